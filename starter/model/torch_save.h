// Name -> tensor dicts in the file format of Python's torch.save (a zip archive holding a
// pickle and one record per storage), so Python reads them with torch.load and vice versa.
#pragma once
#include <string>

#include "model/checkpoint_layout.h"  // TensorDict

namespace kit {

// Writes `dict` as the plain dict torch.save writes; tensors that share a storage (a tied
// weight) share it in the file too. kit::Error when the file cannot be written.
void save_tensor_dict(const TensorDict& dict, const std::string& path);

// Reads a file torch.save wrote (PyTorch 1.6 or later) holding a dict or an OrderedDict
// (what model.state_dict() returns) of name -> tensor. kit::Error naming the file and
// the fix when it is anything else.
TensorDict read_torch_save(const std::string& path);

}  // namespace kit
