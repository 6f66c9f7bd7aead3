// flopmeter's JSON writer (see json_writer.h for the rules).
#include "output/json_writer.h"

#include <charconv>
#include <cmath>
#include <system_error>

namespace flopmeter::detail {

std::size_t utf8_sequence_length(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  std::size_t length = 0;
  std::uint32_t code = 0;
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) {  // 0xC0, 0xC1 would only start overlong forms of ASCII
    length = 2;
    code = lead & 0x1Fu;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    code = lead & 0x0Fu;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    code = lead & 0x07u;
  } else {
    return 0;  // a continuation byte, or a lead byte of a code point above U+10FFFF
  }
  if (i + length > text.size()) return 0;  // truncated
  for (std::size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0u) != 0x80u) return 0;
    code = (code << 6) | (byte(i + k) & 0x3Fu);
  }
  if ((length == 3 && code < 0x800) || (length == 4 && code < 0x10000)) return 0;  // overlong
  if (code >= 0xD800 && code <= 0xDFFF) return 0;                                  // UTF-16 surrogate
  if (code > 0x10FFFF) return 0;
  return length;
}

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
