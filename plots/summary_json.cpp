// Reading a benchmark's summary.json (see summary_json.h).
#include "summary_json.h"

#include <fstream>

#include "kit/errors.h"

namespace kit::plots {

using nlohmann::json;

json SummaryReader::read(const std::string& path, const std::string& runs_dir) const {
  std::ifstream f(path);
  if (!f) throw Error("cannot read " + path + ": run " + make_it + " --out " + runs_dir + " first");
  try {
    return json::parse(f);
  } catch (const std::exception& e) {
    throw Error(path + " is not JSON (" + e.what() + "): run " + make_it + " --out " + runs_dir + " again");
  }
}

const json& SummaryReader::field(const json& j, const char* key, const std::string& where) const {
  if (!j.is_object() || !j.contains(key))
    throw Error(where + " has no \"" + key + "\": is it " + source + "? Run " + make_it + " first");
  return j.at(key);
}

double SummaryReader::number(const json& j, const char* key, const std::string& where) const {
  const json& v = field(j, key, where);
  if (!v.is_number()) throw Error(where + ": \"" + key + "\" is not a number");
  return v.get<double>();
}

int SummaryReader::integer(const json& j, const char* key, const std::string& where) const {
  const json& v = field(j, key, where);
  if (!v.is_number_integer()) throw Error(where + ": \"" + key + "\" is not a whole number");
  return v.get<int>();
}

const std::string& SummaryReader::text(const json& j, const char* key, const std::string& where) const {
  const json& v = field(j, key, where);
  if (!v.is_string()) throw Error(where + ": \"" + key + "\" is not a string");
  return v.get_ref<const std::string&>();
}

bool SummaryReader::boolean(const json& j, const char* key, const std::string& where) const {
  const json& v = field(j, key, where);
  if (!v.is_boolean()) throw Error(where + ": \"" + key + "\" is not true or false");
  return v.get<bool>();
}

const json& SummaryReader::list(const json& j, const char* key, const std::string& where) const {
  const json& v = field(j, key, where);
  if (!v.is_array() || v.empty()) throw Error(where + ": \"" + key + "\" is not a non-empty list");
  return v;
}

}  // namespace kit::plots
