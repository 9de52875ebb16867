// The precompiled header: LibTorch is by far the most expensive thing to parse,
// so every target shares one compiled copy of it (see CMakeLists.txt).
#pragma once
#include <torch/torch.h>
#include <nlohmann/json.hpp>
