#include "kit/config.h"

#include "kit/errors.h"

namespace kit {

namespace {
GPT2Config make(const char* name, int64_t layers, int64_t embd, int64_t heads,
                int64_t positions, int64_t vocab) {
  GPT2Config c;
  c.name = name;
  c.n_layer = layers;
  c.n_embd = embd;
  c.n_head = heads;
  c.n_positions = positions;
  c.vocab_size = vocab;
  return c;
}

const std::vector<GPT2Config>& presets() {
  static const std::vector<GPT2Config> all = {
      make("gpt2", 12, 768, 12, 1024, 50257),
      make("cpu-base", 6, 256, 8, 128, 0),
      make("cpu-small", 4, 128, 4, 128, 0),
      make("tiny", 2, 32, 2, 128, 0),
  };
  return all;
}
}  // namespace

std::vector<std::string> gpt2_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : presets()) names.push_back(p.name);
  return names;
}

GPT2Config gpt2_preset(const std::string& name) {
  for (const auto& p : presets())
    if (p.name == name) return p;
  std::string known;
  for (const auto& n : gpt2_preset_names()) known += (known.empty() ? "" : ", ") + n;
  throw Error("unknown model preset '" + name + "': choose one of " + known);
}

}  // namespace kit
