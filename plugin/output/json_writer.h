// plugin/output/json_writer.h — flopmeter's one JSON writer (private to the library and its tools): the JSONL
// sink, the `flopmeter` tool's --json output and the example trainer's files all write JSON through it, so a
// number or a string reads the same everywhere.
//
// Numbers: the shortest decimal that parses back to the same double (std::to_chars), so 41.2 is "41.2", not
// "41.200000000000003"; integral values below 1e21 in magnitude without an exponent ("11731992576", as
// JavaScript's JSON.stringify prints them); -0 as 0; NaN and infinities as null (JSON has neither).
// Independent of the C locale.
// Strings: quote, backslash and the control characters U+0000-U+001F and U+007F escaped (\" \\ \b \f \n \r
// \t, the others as \u00XX); valid UTF-8 passes through; each byte that does not start a valid UTF-8 sequence
// (a stray continuation byte, a truncated or overlong sequence, a surrogate, above U+10FFFF) becomes \ufffd,
// so the output is always valid JSON and the same bytes always give the same text.
//
// Thread-safety: free functions over the caller's strings; a json_object is a value, used by one thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace flopmeter::detail {

void append_json_string(std::string& out, std::string_view text);
void append_json_number(std::string& out, double value);
void append_json_int(std::string& out, std::int64_t value);

std::string json_string(std::string_view text);  // with the quotes
std::string json_number(double value);

// One JSON object, keys in insertion order: {"a": 1, "b": "x"} (", " and ": " separators when `spaced`,
// "," and ":" otherwise, as in a JSONL line).
class json_object {
 public:
  explicit json_object(bool spaced = true) : spaced_(spaced) {}
  json_object& number(std::string_view key, double value);
  json_object& integer(std::string_view key, std::int64_t value);
  json_object& boolean(std::string_view key, bool value);
  json_object& string(std::string_view key, std::string_view value);
  json_object& null(std::string_view key);
  // `json` must already be valid JSON (a nested object or array).
  json_object& raw(std::string_view key, std::string_view json);
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void key(std::string_view name);
  bool spaced_;
  std::string body_;
};

}  // namespace flopmeter::detail
