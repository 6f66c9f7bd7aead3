// JSON and table formatting for the flopmeter tool (no JSON library: the output is small and flat).
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "cli.h"

namespace flopmeter::cli {
namespace {

std::string printf_double(const char* format, double value) {
  char buffer[512];
  const int n = std::snprintf(buffer, sizeof buffer, format, value);
  if (n < 0) return "?";
  return std::string(buffer, static_cast<std::size_t>(n) < sizeof buffer ? static_cast<std::size_t>(n) : sizeof buffer - 1);
}

// Length of the valid UTF-8 sequence starting at s[i] (1..4), or 0 when the bytes there are not valid UTF-8
// (bad lead byte, truncated sequence, overlong form, surrogate, or above U+10FFFF).
std::size_t utf8_sequence_length(const std::string& s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char lead = byte(i);
  std::size_t length = 0;
  std::uint32_t code = 0;
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
    code = lead & 0x1Fu;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    code = lead & 0x0Fu;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    code = lead & 0x07u;
  } else {
    return 0;
  }
  if (i + length > s.size()) return 0;
  for (std::size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0u) != 0x80u) return 0;
    code = (code << 6) | (byte(i + k) & 0x3Fu);
  }
  if ((length == 3 && code < 0x800) || (length == 4 && code < 0x10000)) return 0;  // overlong
  if (code >= 0xD800 && code <= 0xDFFF) return 0;                                  // surrogate
  if (code > 0x10FFFF) return 0;
  return length;
}

}  // namespace

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x80) {
      const std::size_t length = utf8_sequence_length(text, i);
      if (length == 0) {
        out += "\\ufffd";
        i += 1;
      } else {
        out.append(text, i, length);
        i += length;
      }
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (u < 0x20 || u == 0x7F) {
          char escape[8];
          std::snprintf(escape, sizeof escape, "\\u%04x", static_cast<unsigned>(u));
          out += escape;
        } else {
          out += c;
        }
    }
    ++i;
  }
  out += '"';
  return out;
}

std::string json_number(double value) {
  if (!std::isfinite(value)) return "null";
  if (value == 0) return "0";  // also turns -0 into 0
  // Integral values below 2^63 print exactly as integers; everything else as %.17g, which round-trips.
  if (std::floor(value) == value && std::fabs(value) < 9223372036854775808.0) return printf_double("%.0f", value);
  return printf_double("%.17g", value);
}

std::string json_int(std::int64_t value) { return std::to_string(value); }

json_object& json_object::raw(const char* key, const std::string& json) {
  if (!body_.empty()) body_ += ", ";
  body_ += json_string(key);
  body_ += ": ";
  body_ += json;
  return *this;
}

std::string group_digits(std::int64_t value) {
  const std::string digits = std::to_string(value);
  const std::size_t sign = (value < 0) ? 1 : 0;
  std::string out = digits.substr(0, sign);
  const std::size_t n = digits.size() - sign;
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0 && (n - i) % 3 == 0) out += ',';
    out += digits[sign + i];
  }
  return out;
}

std::string short_number(double value) {
  if (!std::isfinite(value)) return std::isnan(value) ? "n/a" : (value > 0 ? "inf" : "-inf");
  if (std::floor(value) == value && std::fabs(value) < 1e7) return printf_double("%.0f", value);
  return printf_double("%.6e", value);
}

std::string si_flops(double flops) {
  if (!std::isfinite(flops)) return short_number(flops) + " FLOP";
  static const char* const kPrefixes[] = {"", "k", "M", "G", "T", "P", "E", "Z", "Y"};
  std::size_t index = 0;
  double scaled = flops;
  while (std::fabs(scaled) >= 1000.0 && index + 1 < sizeof kPrefixes / sizeof kPrefixes[0]) {
    scaled /= 1000.0;
    ++index;
  }
  return printf_double(index == 0 ? "%.0f" : "%.4g", scaled) + " " + kPrefixes[index] + "FLOP";
}

std::string ratio_text(double ratio) {
  if (!std::isfinite(ratio)) return short_number(ratio);
  if (std::fabs(ratio) >= 10) return printf_double("%.1f", ratio) + "x";
  return printf_double("%.3f", ratio) + "x";
}

}  // namespace flopmeter::cli
