#include "model/ordered_dict_pickle.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

namespace kit {
namespace {

// The little-endian unsigned integer of `bytes` bytes at `at`, or -1 past the end.
int64_t uint_at(const std::string& p, size_t at, size_t bytes) {
  if (at + bytes > p.size()) return -1;
  uint64_t v = 0;
  for (size_t i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[at + i])) << (8 * i);
  return v > p.size() ? -1 : static_cast<int64_t>(v);
}

// How many bytes of argument follow the opcode at `pos`; -1 for an opcode not known here
// or an argument past the end. The opcodes are those of pickle protocols 0 to 5 (see
// Python's pickletools).
int64_t argument_length(const std::string& p, size_t pos) {
  auto counted = [&](size_t bytes) {  // a length field, then that many bytes
    const int64_t n = uint_at(p, pos + 1, bytes);
    return n < 0 ? -1 : static_cast<int64_t>(bytes) + n;
  };
  auto lines = [&](int n) -> int64_t {  // newline-terminated text
    size_t at = pos + 1;
    for (int i = 0; i < n; ++i) {
      at = p.find('\n', at);
      if (at == std::string::npos) return -1;
      ++at;
    }
    return static_cast<int64_t>(at - pos - 1);
  };
  switch (static_cast<unsigned char>(p[pos])) {
    case '(': case '.': case '0': case '1': case '2': case 'N': case ')': case 't': case ']':
    case 'a': case 'e': case 'l': case 'd': case '}': case 's': case 'u': case 'R': case 'b':
    case 'Q': case 'o': case 0x81: case 0x85: case 0x86: case 0x87: case 0x88: case 0x89:
    case 0x8f: case 0x90: case 0x91: case 0x92: case 0x93: case 0x94: case 0x97: case 0x98:
      return 0;
    case 'K': case 'q': case 'h': case 0x80: case 0x82: return 1;
    case 'M': case 0x83: return 2;
    case 'J': case 'r': case 'j': case 0x84: return 4;
    case 'G': case 0x95: return 8;
    case 'U': case 'C': case 0x8a: case 0x8c: return counted(1);
    case 'X': case 'T': case 'B': case 0x8b: return counted(4);
    case 0x8d: case 0x8e: case 0x96: return counted(8);
    case 'I': case 'L': case 'F': case 'S': case 'V': case 'P': case 'p': case 'g': return lines(1);
    case 'c': case 'i': return lines(2);
    default: return -1;
  }
}

// LibTorch's unpickler knows no POP opcode, but its NEWOBJ does just that: it drops the top
// of the stack (the class's empty arguments, in the pickles LibTorch writes).
constexpr char kPop = '\x81';

enum class Kind { Other, OrderedDictClass, OrderedDict };

// A value on the unpickler's stack: where the opcodes that build it begin, and what it is.
struct Item {
  size_t start;
  Kind kind;
};

}  // namespace

std::string ordered_dicts_as_dicts(const std::string& pickle) {
  std::string out = pickle;
  std::vector<size_t> marks_at;  // positions of MARK opcodes
  std::vector<Item> stack;
  std::vector<size_t> marks;     // stack sizes at each MARK still open
  std::map<int64_t, Kind> memo;
  bool changed = false;
  // Pops n items (n < 0: down to the last MARK) and returns where the first of them began.
  auto pop = [&](int n, size_t pos) -> int64_t {
    size_t keep = 0;
    if (n < 0) {
      if (marks.empty()) return -1;
      keep = marks.back();
      pos = marks_at.back();
      marks.pop_back();
      marks_at.pop_back();
    } else {
      if (stack.size() < static_cast<size_t>(n)) return -1;
      keep = stack.size() - static_cast<size_t>(n);
      if (n > 0) pos = stack[keep].start;
    }
    stack.resize(keep);
    return static_cast<int64_t>(pos);
  };
  std::vector<size_t> insert_mark_at;
  for (size_t pos = 0; pos < pickle.size();) {
    const unsigned char op = static_cast<unsigned char>(pickle[pos]);
    const int64_t len = argument_length(pickle, pos);
    if (len < 0) return pickle;
    const size_t next = pos + 1 + static_cast<size_t>(len);
    int64_t start = static_cast<int64_t>(pos);  // where the pushed item begins, for pushes
    Kind kind = Kind::Other;
    bool push = true;
    switch (op) {
      case 0x80: case 0x95: case 'q': case 'r': case 'p': case 0x94: case '.':
        push = false;  // PROTO, FRAME, the puts, STOP: no change to the stack
        if ((op == 'q' || op == 'r') && !stack.empty())
          memo[uint_at(pickle, pos + 1, static_cast<size_t>(len))] = stack.back().kind;
        break;
      case '(':
        marks.push_back(stack.size());
        marks_at.push_back(pos);
        push = false;
        break;
      case 'c':
        if (pickle.compare(pos + 1, static_cast<size_t>(len), "collections\nOrderedDict\n") == 0)
          kind = Kind::OrderedDictClass;
        break;
      case 'h': case 'j': {
        auto it = memo.find(uint_at(pickle, pos + 1, static_cast<size_t>(len)));
        if (it != memo.end()) kind = it->second;
        break;
      }
      case 't': case 'l': case 'd': case 'o': case 'i': case 0x91:  // down to MARK, then one item
        start = pop(-1, pos);
        break;
      case 'u': case 'e': case 0x90: case '1': start = pop(-1, pos); push = false; break;
      case 0x85: start = pop(1, pos); break;
      case 0x86: case 0x93: start = pop(2, pos); break;
      case 0x87: case 0x92: start = pop(3, pos); break;
      case 'Q': case 0x98: start = pop(1, pos); break;  // BINPERSID, READONLY_BUFFER: one item -> one
      case 'a': case '0': start = pop(1, pos); push = false; break;
      case 's':  // SETITEM -> MARK before the key, SETITEMS
        start = pop(2, pos);
        if (start >= 0) insert_mark_at.push_back(static_cast<size_t>(start));
        out[pos] = 'u';
        changed = true;
        push = false;
        break;
      case 'b':  // BUILD: pops the state, applies it to the object below
        if (stack.size() >= 2 && stack[stack.size() - 2].kind == Kind::OrderedDict) {
          out[pos] = kPop;
          changed = true;
        }
        start = pop(1, pos);
        push = false;
        break;
      case 'R': case 0x81: {  // REDUCE, NEWOBJ: callable, arguments -> object
        const bool empty_args = !stack.empty() && stack.back().start + 1 == pos && pickle[pos - 1] == ')';
        const bool od_class = stack.size() >= 2 && stack[stack.size() - 2].kind == Kind::OrderedDictClass;
        start = pop(2, pos);
        if (op == 'R' && empty_args && od_class) {
          out[pos - 1] = kPop;  // EMPTY_TUPLE REDUCE -> pop the class, EMPTY_DICT
          out[pos] = '}';
          kind = Kind::OrderedDict;
          changed = true;
        }
        break;
      }
      case '2': if (stack.empty()) return pickle; kind = stack.back().kind; break;  // DUP
      default: break;  // every other opcode pushes one value and pops none
    }
    if (start < 0) return pickle;  // a stack this walker does not follow
    if (push) stack.push_back({static_cast<size_t>(start), kind});
    if (op == '.') break;
    pos = next;
  }
  if (!changed) return pickle;
  std::sort(insert_mark_at.begin(), insert_mark_at.end());
  std::string result;
  result.reserve(out.size() + insert_mark_at.size());
  size_t from = 0;
  for (size_t at : insert_mark_at) {
    result.append(out, from, at - from);
    result += '(';
    from = at;
  }
  result.append(out, from, std::string::npos);
  return result;
}

}  // namespace kit
