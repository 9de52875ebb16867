// convert_checkpoint: a GPT-2 checkpoint from one layout to the other, checked against a
// model preset on the way (every parameter present, with the preset's shapes).
//   ./build/convert_checkpoint --preset tiny --to hf runs/train.pt runs/pytorch_model.bin
//   ./build/convert_checkpoint --preset gpt2 --to kit model.safetensors gpt2.pt
// Input: a kit checkpoint (train --save), a Hugging Face state dict saved with torch.save
// (pytorch_model.bin), or a Hugging Face model.safetensors. Output: torch.save's format,
// in the kit's layout (train --init reads it) or in GPT2LMHeadModel's (load_state_dict).
#include <torch/torch.h>

#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "app/cli.h"
#include "kit/config.h"
#include "kit/errors.h"
#include "model/checkpoint.h"

namespace {

// The first tensor of `dict` named `name` with or without Hugging Face's prefix.
const at::Tensor* find_tensor(const kit::TensorDict& dict, const std::string& name) {
  for (const std::string& key : {name, "transformer." + name}) {
    auto it = dict.find(key);
    if (it != dict.end()) return &it->value();
  }
  return nullptr;
}

// The one preset whose depth, width and number of positions match the file's, or "" when
// none or several do.
std::string preset_fitting(const kit::TensorDict& dict) {
  const at::Tensor* wte = find_tensor(dict, "wte.weight");
  const at::Tensor* wpe = find_tensor(dict, "wpe.weight");
  if (!wte || !wpe || wte->dim() != 2 || wpe->dim() != 2) return "";
  std::set<std::string> blocks;
  for (const auto& e : dict) {  // h.N.* or transformer.h.N.*: collect the N
    std::string k = e.key();
    if (k.rfind("transformer.", 0) == 0) k = k.substr(12);
    if (k.rfind("h.", 0) == 0) blocks.insert(k.substr(2, k.find('.', 2) - 2));
  }
  std::vector<std::string> fits;
  for (const auto& name : kit::gpt2_preset_names()) {
    const auto p = kit::gpt2_preset(name);
    if (p.n_layer == static_cast<int64_t>(blocks.size()) && p.n_embd == wte->size(1) &&
        p.n_positions == wpe->size(0) && (p.vocab_size == 0 || p.vocab_size == wte->size(0)))
      fits.push_back(name);
  }
  return fits.size() == 1 ? fits[0] : "";
}

// The fix to add to load_state_dict's message, in this program's flags.
std::string fix_hint(const kit::TensorDict& dict, const std::string& preset, const std::string& from) {
  const std::string fits = preset_fitting(dict);
  if (!fits.empty() && fits != preset)
    return " The file fits preset '" + fits + "', not '" + preset + "': pass --preset " + fits + ".";
  if (from != "auto") return " Check --from " + from + ": the file may be in the other layout (--from auto tells).";
  return " Check --preset " + preset + ": it must be the preset the checkpoint was trained with.";
}

kit::CheckpointLayout layout_of(const std::string& flag) {
  if (flag == "kit") return kit::CheckpointLayout::Kit;
  if (flag == "hf") return kit::CheckpointLayout::HuggingFace;
  return kit::CheckpointLayout::Auto;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Convert a GPT-2 checkpoint between the kit's layout (Linear (out, in) weights, as train --save "
               "writes) and Hugging Face's (GPT2LMHeadModel.state_dict(): 'transformer.' names, Conv1D (in, out) "
               "weights). Reads torch.save files (dict or OrderedDict) and model.safetensors; writes torch.save "
               "files, which Python reads with torch.load."};
  std::string input, output, to, from = "auto", preset;
  app.add_option("input", input, "Checkpoint to read: .pt/.bin (torch.save) or .safetensors")->required();
  app.add_option("output", output, "File to write (torch.save's format)")->required();
  app.add_option("--to", to, "Layout to write: kit, or hf (Hugging Face GPT2LMHeadModel)")
      ->required()
      ->check(CLI::IsMember({"kit", "hf"}));
  app.add_option("--from", from, "Layout of the input: auto (told by c_attn's shape and the names), kit or hf")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "kit", "hf"}));
  app.add_option("--preset,--model", preset,
                 "The model preset the checkpoint belongs to (" + kit::preset_list() +
                     "); the vocabulary size comes from the file when the preset leaves it to the tokenizer")
      ->required();
  return kit::guarded_main(argc, argv, app, [&] {
    kit::GPT2Config cfg = kit::gpt2_preset(preset);
    const kit::TensorDict dict = kit::load_tensor_dict(input);
    if (cfg.vocab_size <= 0) {  // the kit's presets take it from the tokenizer: read it off wte
      const at::Tensor* wte = find_tensor(dict, "wte.weight");
      if (!wte || wte->dim() != 2)
        throw kit::Error("checkpoint '" + input + "' has no 2-D wte.weight (the token embedding): it is not a GPT-2 "
                         "checkpoint, or a damaged one");
      cfg.vocab_size = wte->size(0);
    }
    kit::GPT2 model(cfg);
    try {
      kit::load_state_dict(*model, dict, layout_of(from), input);
    } catch (const kit::Error& e) {
      throw kit::Error(std::string(e.what()) + fix_hint(dict, preset, from));
    }
    kit::export_checkpoint(*model, output, layout_of(to));
    std::cout << "wrote " << output << " (" << (to == "hf" ? "Hugging Face GPT2LMHeadModel" : "kit")
              << " layout, preset " << preset << ", vocab " << cfg.vocab_size << ")\n";
    if (to == "hf")
      std::cout << "In Python:\n"
                << "  import torch\n"
                << "  from transformers import GPT2Config, GPT2LMHeadModel\n"
                << "  model = GPT2LMHeadModel(GPT2Config(n_layer=" << cfg.n_layer << ", n_embd=" << cfg.n_embd
                << ", n_head=" << cfg.n_head << ", n_positions=" << cfg.n_positions
                << ", vocab_size=" << cfg.vocab_size << "))\n"
                << "  model.load_state_dict(torch.load(\"" << output << "\"))\n";
    else
      std::cout << "Train from it with: ./build/train --preset " << preset << " --init " << output << "\n";
    return 0;
  });
}
