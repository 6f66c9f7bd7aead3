// Reading the JSON that flopmeter and the example trainer write (JSONL sink records, the C ABI metrics
// callback's line, the trainer's records and summaries) with nlohmann-json. Parsing is strict (RFC 8259), so
// malformed output fails the test; a missing or non-numeric field fails it with the field's name and the
// whole object, instead of reading as some default number.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace flopmeter::testing {

// `text` parsed as one JSON value; a test failure (naming `what` and the text) and null if it is not JSON.
inline nlohmann::json parse_json(const std::string& text, const std::string& what = "JSON text") {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    ADD_FAILURE() << what << " is not valid JSON (" << e.what() << "):\n" << text;
    return nullptr;
  }
}

// The file at `path` parsed as one JSON value (a summary file).
inline nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) ADD_FAILURE() << "cannot open " << path;
  return parse_json(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()), path);
}

// The JSONL file at `path`, one JSON value per line (every line must be one: an empty line fails too).
inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) ADD_FAILURE() << "cannot open " << path;
  std::vector<nlohmann::json> records;
  int line_number = 0;
  for (std::string line; std::getline(in, line);) {
    records.push_back(parse_json(line, path + " line " + std::to_string(++line_number)));
  }
  return records;
}

// The number `object[key]`; a test failure (naming the key and showing the object) and NaN if it is absent
// or not a number, so no expected value can match by accident.
inline double number_field(const nlohmann::json& object, const std::string& key) {
  if (!object.is_object() || !object.contains(key) || !object.at(key).is_number()) {
    ADD_FAILURE() << "no number \"" << key << "\" in " << object.dump();
    return std::numeric_limits<double>::quiet_NaN();
  }
  return object.at(key).get<double>();
}

// The array of numbers `object[key]`; a test failure and an empty vector if it is absent or holds a non-number.
inline std::vector<double> number_array_field(const nlohmann::json& object, const std::string& key) {
  std::vector<double> values;
  if (!object.is_object() || !object.contains(key) || !object.at(key).is_array()) {
    ADD_FAILURE() << "no array \"" << key << "\" in " << object.dump();
    return values;
  }
  for (const nlohmann::json& v : object.at(key)) {
    if (!v.is_number()) {
      ADD_FAILURE() << "a non-number in \"" << key << "\": " << object.dump();
      return {};
    }
    values.push_back(v.get<double>());
  }
  return values;
}

}  // namespace flopmeter::testing
