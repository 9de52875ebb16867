// Problem 8 (given): see planner/json_fields.h.
#include "planner/json_fields.h"

#include <cmath>
#include <fstream>

#include "kit/errors.h"

namespace kit::planner {

using nlohmann::json;

const json& field(const json& j, const char* key, const std::string& where, const char* format_header) {
  if (!j.is_object() || !j.contains(key))
    throw Error(where + " has no \"" + key + "\": see " + format_header + " for the format");
  return j.at(key);
}

namespace {
double number(const json& j, const char* key, const std::string& where, const char* format_header, bool zero_ok) {
  const json& v = field(j, key, where, format_header);
  if (!v.is_number()) throw Error(where + "." + key + " is " + v.dump() + ", not a number");
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < 0 || (x == 0 && !zero_ok))
    throw Error(where + "." + key + " is " + v.dump() + ": it must be " + (zero_ok ? "0 or more" : "positive"));
  return x;
}
}  // namespace

double positive_number(const json& j, const char* key, const std::string& where, const char* format_header) {
  return number(j, key, where, format_header, false);
}

double non_negative_number(const json& j, const char* key, const std::string& where, const char* format_header) {
  return number(j, key, where, format_header, true);
}

json read_json_file(const std::string& path, const char* what) {
  std::ifstream in(path);
  if (!in) throw Error(std::string("cannot read the ") + what + " file " + path);
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw Error(path + " is not JSON: " + e.what());
  }
}

}  // namespace kit::planner
