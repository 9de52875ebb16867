// A C interface to SentencePiece, built as its own module (libkit_spm.so) that the
// tokenizer loads with dlopen.
//
// Why not link SentencePiece into the kit directly: Debian's libsentencepiece carries a
// private copy of protobuf (3.14) and exports its symbols, while LibTorch links the
// system libprotobuf (3.21). In one symbol namespace each library ends up calling the
// other's protobuf, which crashes at start-up or aborts at the first tokenizer call.
// Loaded with RTLD_LOCAL | RTLD_DEEPBIND, the module binds to its own copy and LibTorch
// never sees it. A plain C interface also keeps C++ ABI differences (a LibTorch built
// with the old std::string ABI) away from the boundary.
//
// One catch of RTLD_DEEPBIND: the module's std::cerr may be a copy that was never
// constructed (the program's own copy is the live one), so SentencePiece must not log:
// the tokenizer trains with minloglevel=3 and gets every error back as a message.
//
// Conventions: functions returning int return 0 on success. On failure they set *err
// (when err is not null) to a message allocated with malloc; free every buffer this
// module returns with kit_spm_free.
#pragma once
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kit_spm kit_spm;  // a loaded model

// Trains a model on n sentences with SentencePiece trainer options given as a
// null-terminated list key, value, key, value, ..., NULL. Returns the serialized model.
int kit_spm_train(const char* const* sentences, size_t n, const char* const* options, char** model,
                  size_t* model_len, char** err);

// Loads a serialized model; returns null on failure.
kit_spm* kit_spm_load(const char* model, size_t model_len, char** err);
void kit_spm_close(kit_spm* spm);

int kit_spm_encode(const kit_spm* spm, const char* text, size_t text_len, int** ids, size_t* n_ids, char** err);
int kit_spm_decode(const kit_spm* spm, const int* ids, size_t n_ids, char** text, size_t* text_len, char** err);

int kit_spm_piece_size(const kit_spm* spm);
int kit_spm_piece_to_id(const kit_spm* spm, const char* piece);  // unk id when absent
int kit_spm_unk_id(const kit_spm* spm);
int kit_spm_pad_id(const kit_spm* spm);  // -1 when the model has no pad piece

void kit_spm_free(void* buffer);

#ifdef __cplusplus
}
#endif
