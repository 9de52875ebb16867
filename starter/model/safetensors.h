// Reading Hugging Face's safetensors files (model.safetensors): an 8-byte little-endian
// header length N, N bytes of JSON mapping each tensor name to
//   {"dtype": "F32", "shape": [768, 2304], "data_offsets": [begin, end]}
// (plus an optional "__metadata__" entry of strings), then the tensors' raw little-endian
// bytes, row-major, at those offsets from the end of the header.
#pragma once
#include <string>

#include "model/checkpoint_layout.h"  // TensorDict

namespace kit {

// Whether `head` (a file's first bytes) starts like a safetensors file: a header length,
// then '{'.
bool looks_like_safetensors(const std::string& head);

// Every tensor of the file, copied into memory. kit::Error naming the file and the entry
// for a header that is not valid JSON, an unknown dtype, or offsets that disagree with
// the shape or run past the end of the file.
TensorDict read_safetensors(const std::string& path);

}  // namespace kit
