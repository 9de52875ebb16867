// Problem 8 (given): reading the planner's JSON files with errors that name the field
// ("cluster.json.nodes[2].devices is -1: it must be ...") instead of a bare parse failure.
#pragma once
#include <nlohmann/json.hpp>

#include <string>

namespace kit::planner {

// j[key], or kit::Error saying that `where` has no `key` and which header documents the format.
const nlohmann::json& field(const nlohmann::json& j, const char* key, const std::string& where,
                            const char* format_header);
double positive_number(const nlohmann::json& j, const char* key, const std::string& where, const char* format_header);
double non_negative_number(const nlohmann::json& j, const char* key, const std::string& where,
                           const char* format_header);
// A JSON file, or kit::Error naming the file and what is wrong with it.
nlohmann::json read_json_file(const std::string& path, const char* what);

}  // namespace kit::planner
