// Table formatting and text escaping for the flopmeter tool (JSON goes through plugin/output/json_writer.h).
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "cli.h"
#include "flopmeter/error.h"

namespace flopmeter::cli {
namespace {

std::string printf_double(const char* format, double value) {
  char buffer[512];
  const int n = std::snprintf(buffer, sizeof buffer, format, value);
  if (n < 0) return "?";
  return std::string(buffer, static_cast<std::size_t>(n) < sizeof buffer ? static_cast<std::size_t>(n) : sizeof buffer - 1);
}

}  // namespace

std::string printable(const std::string& text, bool keep_newlines) { return printable_text(text, keep_newlines); }

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
