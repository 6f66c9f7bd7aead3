// flopmeter's JSON writer (see json_writer.h for the rules).
#include "output/json_writer.h"

#include "util/utf8.h"

#include <charconv>
#include <cmath>
#include <system_error>

namespace flopmeter::detail {

void append_json_string(std::string& out, std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  for (std::size_t i = 0; i < text.size();) {
    const char ch = text[i];
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x80) {
      const std::size_t length = utf8_sequence_length(text, i);
      if (length == 0) {
        out += "\\ufffd";  // one replacement character per byte that does not start a valid sequence
        i += 1;
      } else {
        out.append(text.substr(i, length));
        i += length;
      }
      continue;
    }
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7F) {
          out += "\\u00";
          out.push_back(kHex[c >> 4]);
          out.push_back(kHex[c & 0xF]);
        } else {
          out.push_back(ch);
        }
    }
    ++i;
  }
  out.push_back('"');
}

void append_json_number(std::string& out, double value) {
  if (!std::isfinite(value)) {
    out += "null";
    return;
  }
  if (value == 0) {
    out.push_back('0');  // also -0
    return;
  }
  // The longest shortest-round-trip form is "-2.2250738585072014e-308" (24 characters); a fixed integral
  // below 1e21 has at most 22.
  char buffer[32];
  const bool integral = std::trunc(value) == value && std::fabs(value) < 1e21;
  const std::to_chars_result r = integral ? std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::fixed)
                                          : std::to_chars(buffer, buffer + sizeof buffer, value);
  if (r.ec != std::errc()) {  // cannot happen with this buffer; stay valid JSON regardless
    out += "null";
    return;
  }
  out.append(buffer, r.ptr);
}

void append_json_int(std::string& out, std::int64_t value) {
  char buffer[24];
  const std::to_chars_result r = std::to_chars(buffer, buffer + sizeof buffer, value);
  out.append(buffer, r.ptr);
}

std::string json_string(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  append_json_string(out, text);
  return out;
}

std::string json_number(double value) {
  std::string out;
  append_json_number(out, value);
  return out;
}

void json_object::key(std::string_view name) {
  if (!body_.empty()) body_ += spaced_ ? ", " : ",";
  append_json_string(body_, name);
  body_ += spaced_ ? ": " : ":";
}

json_object& json_object::number(std::string_view name, double value) {
  key(name);
  append_json_number(body_, value);
  return *this;
}

json_object& json_object::integer(std::string_view name, std::int64_t value) {
  key(name);
  append_json_int(body_, value);
  return *this;
}

json_object& json_object::boolean(std::string_view name, bool value) {
  key(name);
  body_ += value ? "true" : "false";
  return *this;
}

json_object& json_object::string(std::string_view name, std::string_view value) {
  key(name);
  append_json_string(body_, value);
  return *this;
}

json_object& json_object::null(std::string_view name) {
  key(name);
  body_ += "null";
  return *this;
}

json_object& json_object::raw(std::string_view name, std::string_view json) {
  key(name);
  body_ += json;
  return *this;
}

}  // namespace flopmeter::detail
