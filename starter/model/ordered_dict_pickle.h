// Python's torch.save(model.state_dict(), p) pickles a collections.OrderedDict, with the
// state dict's _metadata attribute set by a BUILD opcode. LibTorch's unpickler reads every
// OrderedDict as None (it expects them only as a tensor's empty backward hooks), cannot
// apply BUILD to a dict, and (in 1.13) knows no SETITEM, which Python writes for a dict of
// one entry. This rewrites such a pickle into one it reads:
//   OrderedDict()                -> an empty dict, which the SETITEMS after it fill as before
//   BUILD on such a dict         -> the state is dropped (_metadata holds version numbers only)
//   key value SETITEM            -> MARK key value SETITEMS
#pragma once
#include <string>

namespace kit {

// The rewritten pickle, or `pickle` unchanged when nothing needs rewriting or it holds an
// opcode or a stack this walker does not follow (LibTorch then reports the problem).
std::string ordered_dicts_as_dicts(const std::string& pickle);

}  // namespace kit
