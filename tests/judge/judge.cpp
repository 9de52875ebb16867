// Records: encoding, strict decoding, the stream of frames, and the role this process plays
// (judge.h says why there are two processes).
#include "judge.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "kit/errors.h"

namespace kit::judge {
namespace {

// ---- encoding ----

void put_u8(std::string& out, uint8_t x) { out.push_back(static_cast<char>(x)); }
void put_bytes(std::string& out, const std::string& s) {
  put_u64(out, s.size());
  out += s;
}

void encode_into(std::string& out, const Value& v) {
  put_u8(out, static_cast<uint8_t>(v.kind));
  switch (v.kind) {
    case Value::Kind::None: break;
    case Value::Kind::Bool: put_u8(out, v.b ? 1 : 0); break;
    case Value::Kind::Int: put_u64(out, static_cast<uint64_t>(v.i)); break;
    case Value::Kind::Real: {
      uint64_t bits;
      std::memcpy(&bits, &v.r, 8);
      put_u64(out, bits);
      break;
    }
    case Value::Kind::Text: put_bytes(out, v.bytes); break;
    case Value::Kind::Tensor:
      put_u8(out, v.dtype);
      put_u8(out, static_cast<uint8_t>(v.shape.size()));
      for (int64_t d : v.shape) put_u64(out, static_cast<uint64_t>(d));
      put_bytes(out, v.bytes);
      break;
    case Value::Kind::List:
      put_u64(out, v.list.size());
      for (const auto& x : v.list) encode_into(out, x);
      break;
    case Value::Kind::Map:
      put_u64(out, v.map.size());
      for (const auto& [k, x] : v.map) {
        put_bytes(out, k);
        encode_into(out, x);
      }
      break;
  }
}

// ---- strict decoding of untrusted bytes ----

constexpr int kMaxDepth = 64;
constexpr int kMaxDims = 16;

// The element size of a tensor dtype code (judge/tensor.h), 0 for an unknown code.
size_t element_size(uint8_t dtype) {
  switch (dtype) {
    case 1: return 4;  // float32
    case 2: return 8;  // float64
    case 3: return 2;  // bfloat16
    case 4: return 2;  // float16
    case 5: return 8;  // int64
    case 6: return 4;  // int32
    case 7: return 1;  // bool
    case 8: return 1;  // uint8
    case 9: return 1;  // int8
    case 10: return 2;  // int16
    default: return 0;
  }
}

struct Reader {
  const std::string& in;
  size_t at = 0;
  std::string why;

  bool fail(const std::string& w) {
    if (why.empty()) why = w + " at byte " + std::to_string(at);
    return false;
  }
  size_t left() const { return in.size() - at; }
  bool u8(uint8_t* x) {
    if (left() < 1) return fail("a value cut short");
    *x = static_cast<uint8_t>(in[at++]);
    return true;
  }
  bool u64(uint64_t* x) {
    if (left() < 8) return fail("a value cut short");
    uint64_t v = 0;
    for (int k = 0; k < 8; ++k) v |= static_cast<uint64_t>(static_cast<uint8_t>(in[at + k])) << (8 * k);
    at += 8;
    *x = v;
    return true;
  }
  bool bytes(std::string* s) {
    uint64_t n;
    if (!u64(&n)) return false;
    if (n > left()) return fail("a length of " + std::to_string(n) + " bytes past the end");
    s->assign(in, at, n);
    at += n;
    return true;
  }
  bool value(Value* v, int depth) {
    if (depth > kMaxDepth) return fail("values nested more than 64 deep");
    uint8_t kind;
    if (!u8(&kind)) return false;
    if (kind > static_cast<uint8_t>(Value::Kind::Map)) return fail("an unknown kind of value " + std::to_string(kind));
    v->kind = static_cast<Value::Kind>(kind);
    switch (v->kind) {
      case Value::Kind::None: return true;
      case Value::Kind::Bool: {
        uint8_t b;
        if (!u8(&b)) return false;
        if (b > 1) return fail("a boolean that is neither 0 nor 1");
        v->b = b == 1;
        return true;
      }
      case Value::Kind::Int: {
        uint64_t x;
        if (!u64(&x)) return false;
        v->i = static_cast<int64_t>(x);
        return true;
      }
      case Value::Kind::Real: {
        uint64_t x;
        if (!u64(&x)) return false;
        std::memcpy(&v->r, &x, 8);
        return true;
      }
      case Value::Kind::Text: return bytes(&v->bytes);
      case Value::Kind::Tensor: {
        uint8_t dims;
        if (!u8(&v->dtype) || !u8(&dims)) return false;
        if (dims > kMaxDims) return fail("a tensor of more than 16 dimensions");
        const size_t size = v->dtype == 0 ? 0 : element_size(v->dtype);
        if (v->dtype != 0 && size == 0) return fail("an unknown tensor dtype code " + std::to_string(v->dtype));
        uint64_t numel = 1;
        v->shape.clear();
        for (int k = 0; k < dims; ++k) {
          uint64_t d;
          if (!u64(&d)) return false;
          if (d > (uint64_t{1} << 40)) return fail("a tensor dimension of " + std::to_string(d));
          numel = d == 0 ? 0 : (numel > (uint64_t{1} << 40) / d ? (uint64_t{1} << 41) : numel * d);
          v->shape.push_back(static_cast<int64_t>(d));
        }
        if (!bytes(&v->bytes)) return false;
        if (v->dtype == 0) {
          if (dims != 0 || !v->bytes.empty()) return fail("an undefined tensor with a shape or elements");
          return true;
        }
        if (numel > (uint64_t{1} << 40) || v->bytes.size() != numel * size)
          return fail("a tensor whose bytes (" + std::to_string(v->bytes.size()) + ") are not its shape's elements");
        return true;
      }
      case Value::Kind::List: {
        uint64_t n;
        if (!u64(&n)) return false;
        if (n > left()) return fail("a list longer than the bytes left");
        v->list.resize(n);
        for (auto& x : v->list)
          if (!value(&x, depth + 1)) return false;
        return true;
      }
      case Value::Kind::Map: {
        uint64_t n;
        if (!u64(&n)) return false;
        if (n > left()) return fail("a map longer than the bytes left");
        v->map.resize(n);
        for (size_t k = 0; k < n; ++k) {
          if (!bytes(&v->map[k].first) || !value(&v->map[k].second, depth + 1)) return false;
          for (size_t j = 0; j < k; ++j)
            if (v->map[j].first == v->map[k].first) return fail("a map with the key '" + v->map[k].first + "' twice");
        }
        return true;
      }
    }
    return fail("an unknown kind of value");
  }
};

// ---- the role of this process ----

struct State {
  Role role = Role::kBoth;
  int fd = -1;                  // the subject's records descriptor
  std::string rank_path;        // a rank's record file
  std::vector<Record> records;  // the judge's: what the subject wrote
  std::string subject_status;   // the judge's: how the subject process ended
  std::string stream_problem;   // the judge's: why the stream could not be read, if it could not
  size_t next = 0;              // the judge's: the next record of this case
  bool header_written = false;
};
State& state() {
  static State s;
  return s;
}


}  // namespace

void put_u64(std::string& out, uint64_t x) {
  for (int k = 0; k < 8; ++k) out.push_back(static_cast<char>((x >> (8 * k)) & 0xff));
}

void write_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the grader stopped reading: nothing more to tell
    done += static_cast<size_t>(n);
  }
}

const Value* Value::find(const std::string& key) const {
  for (const auto& [k, v] : map)
    if (k == key) return &v;
  return nullptr;
}

std::string Value::kind_name() const {
  static const char* names[] = {"nothing", "boolean", "integer", "real number", "text", "tensor", "list", "map"};
  return names[static_cast<int>(kind)];
}

std::string encode(const Value& v) {
  std::string out;
  encode_into(out, v);
  return out;
}

std::optional<Value> decode(const std::string& bytes, std::string* why) {
  Reader r{bytes};
  Value v;
  if (!r.value(&v, 0)) {
    if (why) *why = r.why;
    return std::nullopt;
  }
  if (r.left() != 0) {
    if (why) *why = std::to_string(r.left()) + " bytes after the value";
    return std::nullopt;
  }
  return v;
}

std::string Outcome::describe() const {
  if (!threw()) return "returned normally";
  return "threw " + kind + (message.empty() ? "" : ": " + message);
}

Outcome current_exception_outcome() {
  try {
    throw;
  } catch (const kit::NotImplemented& e) {
    return {"kit::NotImplemented", e.what()};
  } catch (const kit::Error& e) {
    return {"kit::Error", e.what()};
  } catch (const std::exception& e) {
    return {"std::exception", e.what()};
  } catch (...) {
    return {"unknown", "(an object that is not a std::exception)"};
  }
}

// ---- records ----

void Record::set(const std::string& name, Value v) {
  for (auto& [k, x] : values_.map)
    if (k == name) {
      x = std::move(v);
      return;
    }
  values_.map.emplace_back(name, std::move(v));
}

bool Record::has(const std::string& name) const { return values_.find(name) != nullptr; }

std::string Record::where() const {
  return "the code under test" + (label_.empty() ? std::string() : " (" + label_ + ")");
}

const Value* Record::lookup(const std::string& name) const {
  if (!ok()) return nullptr;  // subject() has already failed the case, with the reason
  const Value* v = values_.find(name);
  if (!v) ADD_FAILURE() << where() << " recorded no value '" << name << "'";
  return v;
}

Value Record::to_value() const {
  Value v;
  v.kind = Value::Kind::Map;
  v.map.emplace_back("label", Codec<std::string>::put(label_));
  v.map.emplace_back("status", Codec<std::string>::put(status_));
  v.map.emplace_back("error", Codec<std::string>::put(error_));
  v.map.emplace_back("values", values_);
  return v;
}

std::optional<Record> Record::from_value(const Value& v, std::string* why) {
  Record r;
  const auto text = [&](const char* key, std::string* out) {
    const Value* x = v.find(key);
    return x && Codec<std::string>::get(*x, out);
  };
  const Value* values = v.kind == Value::Kind::Map ? v.find("values") : nullptr;
  if (v.kind != Value::Kind::Map || v.map.size() != 4 || !text("label", &r.label_) || !text("status", &r.status_) ||
      !text("error", &r.error_) || !values || values->kind != Value::Kind::Map) {
    if (why) *why = "a record is not a map of label, status, error and values";
    return std::nullopt;
  }
  if (r.status_ != "ok" && r.status_ != "threw") {
    if (why) *why = "a record's status is '" + r.status_ + "', not ok or threw";
    return std::nullopt;
  }
  r.values_ = *values;
  return r;
}

std::string stream_header() { return "KIT-RECORDS 1\n"; }

std::string frame(const Record& r) {
  const std::string body = encode(r.to_value());
  std::string out = "SEC";
  put_u64(out, body.size());
  return out + body;
}

bool parse_stream(const std::string& stream, std::vector<Record>* out, std::string* why, std::string* note) {
  out->clear();
  const std::string header = stream_header();
  if (stream.empty()) return true;  // the subject wrote nothing at all
  if (stream.compare(0, header.size(), header) != 0) {
    *why = "the records do not start with the header the kit writes";
    return false;
  }
  size_t at = header.size();
  while (at < stream.size()) {
    if (stream.size() - at < 11) {
      *note = "the last record was cut short (the subject process ended while writing it)";
      return true;
    }
    if (stream.compare(at, 3, "SEC") != 0) {
      *why = "a record frame without its SEC mark at byte " + std::to_string(at);
      return false;
    }
    uint64_t n = 0;
    for (int k = 0; k < 8; ++k) n |= static_cast<uint64_t>(static_cast<uint8_t>(stream[at + 3 + k])) << (8 * k);
    at += 11;
    if (n > stream.size() - at) {
      *note = "the last record was cut short (the subject process ended while writing it)";
      return true;
    }
    std::string problem;
    const auto v = decode(stream.substr(at, n), &problem);
    if (!v) {
      *why = "record " + std::to_string(out->size() + 1) + " is malformed: " + problem;
      return false;
    }
    auto r = Record::from_value(*v, &problem);
    if (!r) {
      *why = "record " + std::to_string(out->size() + 1) + " is malformed: " + problem;
      return false;
    }
    out->push_back(std::move(*r));
    at += n;
  }
  return true;
}

// ---- roles ----

Role role() { return state().role; }
bool judging() { return state().role == Role::kBoth || state().role == Role::kJudge; }

void become_subject(int fd) {
  state().role = Role::kSubject;
  state().fd = fd;
}

bool become_judge(const std::string& stream, const std::string& subject_status, std::string* why) {
  State& s = state();
  s.role = Role::kJudge;
  s.subject_status = subject_status;
  s.stream_problem.clear();
  std::string note;
  if (!parse_stream(stream, &s.records, why, &note)) {
    s.records.clear();
    s.stream_problem = *why;
    return false;
  }
  if (!note.empty()) s.stream_problem = note;
  return true;
}

void become_rank(const std::string& path) {
  // A rank forked from a subject does not write into the subject's channel: its record goes
  // to its own file, which the subject reads back.
  if (state().fd >= 0) ::close(state().fd);
  state().fd = -1;
  state().role = Role::kRank;
  state().rank_path = path;
}

void start_case() { state().next = 0; }

void finish_rank(const Record& r) {
  std::ofstream out(state().rank_path, std::ios::binary | std::ios::trunc);
  out << stream_header() << frame(r);
}

std::optional<Record> read_rank_record(const std::string& path, std::string* why) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *why = "the rank wrote no record (it ended before its role did)";
    return std::nullopt;
  }
  std::string stream;
  char buf[65536];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    stream.append(buf, static_cast<size_t>(in.gcount()));
    if (stream.size() > kMaxStreamBytes) {
      *why = "the rank's record is larger than the judge reads";
      return std::nullopt;
    }
  }
  std::vector<Record> records;
  std::string note;
  if (!parse_stream(stream, &records, why, &note)) return std::nullopt;
  if (records.size() != 1) {
    *why = records.empty() ? "the rank's record was cut short (it ended while writing it)"
                           : "the rank wrote " + std::to_string(records.size()) + " records, not one";
    return std::nullopt;
  }
  return records[0];
}

Record subject(const std::function<void(Record&)>& fn, const std::string& label) {
  State& s = state();
  if (s.role == Role::kJudge) {
    const size_t k = s.next++;
    if (k < s.records.size()) {
      Record r = s.records[k];
      if (r.label() != label) {
        ADD_FAILURE() << "the subject's record " << k + 1 << " is labelled '" << r.label() << "', this part is '"
                      << label << "': the records are out of step with the test";
        r.mark("threw", "records out of step");
        return r;
      }
      if (r.status() == "threw")
        ADD_FAILURE() << "the code under test" << (label.empty() ? "" : " (" + label + ")") << " " << r.error();
      return r;
    }
    Record missing;
    missing.set_label(label);
    missing.mark("missing", "");
    ADD_FAILURE() << "the subject process ended before the code under test"
                  << (label.empty() ? "" : " (" + label + ")") << " finished (it produced " << s.records.size()
                  << " of this case's records; the subject " << (s.subject_status.empty() ? "ended" : s.subject_status)
                  << (s.stream_problem.empty() ? "" : "; " + s.stream_problem)
                  << "): it crashed, timed out or ended the process. Its output is below.";
    return missing;
  }

  Record r;
  r.set_label(label);
  try {
    fn(r);
  } catch (...) {
    r.mark("threw", current_exception_outcome().describe());
  }
  if (s.role == Role::kSubject) {
    std::string data;
    if (!s.header_written) {
      data = stream_header();
      s.header_written = true;
    }
    write_all(s.fd, data + frame(r));
    return r;
  }
  // A plain run (or a rank's own part): through the same encoding and strict parsing the judge
  // uses, so that a value the codec cannot carry fails here too.
  std::string why;
  const auto v = decode(encode(r.to_value()), &why);
  auto back = v ? Record::from_value(*v, &why) : std::nullopt;
  if (!back) {
    ADD_FAILURE() << "the record of " << (label.empty() ? "a subject part" : label) << " does not survive encoding: " << why;
    return r;
  }
  if (back->status() == "threw")
    ADD_FAILURE() << "the code under test" << (label.empty() ? "" : " (" + label + ")") << " " << back->error();
  return *back;
}

}  // namespace kit::judge
