// Fuzz target: the `flopmeter estimate` argument parsers (tools/cli_args.cpp): --docs lists, --images grid
// lists, --padding and --seq-len integers, and the option parser itself over arbitrary argument words.
//
// Input: the first byte picks the parser, the rest is its text (for the option parser, words separated by
// NUL bytes). Invariants: a parser returns or throws cli::usage_error naming the option it parses (so the
// message says where), nothing else; accepted values are in range and survive a print/parse round trip.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cli.h"
#include "fuzz_support.h"

namespace {

using flopmeter::image_grid;
using flopmeter::cli::usage_error;

const std::vector<flopmeter::cli::option_spec> kEstimateOptions = {
    {"--docs", true}, {"--padding", true}, {"--images", true}, {"--scope", true}, {"--seq-len", true}, {"--json", false}};

std::string join(const std::vector<std::int64_t>& values) {
  std::string text;
  for (std::size_t i = 0; i < values.size(); ++i) text += (i ? "," : "") + std::to_string(values[i]);
  return text;
}

std::string join(const std::vector<image_grid>& grids) {
  std::string text;
  for (std::size_t i = 0; i < grids.size(); ++i) {
    text += (i ? "," : "") + std::to_string(grids[i].t) + "x" + std::to_string(grids[i].h) + "x" + std::to_string(grids[i].w);
  }
  return text;
}

void check_names(const usage_error& e, const std::string& what) {
  const std::string message = e.what();
  FUZZ_CHECK(e.command() == "estimate", "usage_error for another command: " + e.command());
  FUZZ_CHECK(message.find(what) != std::string::npos, "the message does not name " + what + ": " + message);
}

void docs(const std::string& text) {
  std::vector<std::int64_t> values;
  try {
    values = flopmeter::cli::parse_length_list("estimate", "--docs", text);
  } catch (const usage_error& e) {
    check_names(e, "--docs");
    return;
  }
  FUZZ_CHECK(!values.empty(), "an empty --docs list was accepted");
  for (const std::int64_t v : values) FUZZ_CHECK(v >= 0, "a negative length was accepted: " + text);
  FUZZ_CHECK(flopmeter::cli::parse_length_list("estimate", "--docs", join(values)) == values, "round trip: " + text);
}

void images(const std::string& text) {
  std::vector<image_grid> grids;
  try {
    grids = flopmeter::cli::parse_grid_list("estimate", "--images", text);
  } catch (const usage_error& e) {
    check_names(e, "--images");
    return;
  }
  FUZZ_CHECK(!grids.empty(), "an empty --images list was accepted");
  for (const image_grid& g : grids) FUZZ_CHECK(g.t >= 1 && g.h >= 1 && g.w >= 1, "a grid entry < 1: " + text);
  const std::vector<image_grid> again = flopmeter::cli::parse_grid_list("estimate", "--images", join(grids));
  FUZZ_CHECK(again.size() == grids.size(), "round trip: " + text);
  for (std::size_t i = 0; i < grids.size(); ++i) {
    FUZZ_CHECK(again[i].t == grids[i].t && again[i].h == grids[i].h && again[i].w == grids[i].w, "round trip: " + text);
  }
}

void integer(const std::string& text, bool positive) {
  const char* what = positive ? "--seq-len" : "--padding";
  std::int64_t value = 0;
  try {
    value = positive ? flopmeter::cli::parse_positive_int("estimate", what, text)
                     : flopmeter::cli::parse_non_negative_int("estimate", what, text);
  } catch (const usage_error& e) {
    check_names(e, what);
    return;
  }
  FUZZ_CHECK(value >= (positive ? 1 : 0), std::string(what) + " out of range was accepted: " + text);
  FUZZ_CHECK(std::to_string(value) == text || text.find_first_not_of("0123456789-") == std::string::npos,
             "accepted text that is not a decimal integer: " + text);
}

void command_line(const std::string& text) {
  std::vector<std::string> words;
  std::string::size_type start = 0;
  while (start <= text.size()) {
    const std::string::size_type end = text.find('\0', start);
    words.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  try {
    const flopmeter::cli::parsed_args parsed = flopmeter::cli::parse_args("estimate", words, kEstimateOptions);
    if (parsed.help) return;
    for (const auto& option : parsed.options) {
      bool known = false;
      for (const auto& spec : kEstimateOptions) known = known || option.first == spec.name;
      FUZZ_CHECK(known, "an unknown option was accepted: " + option.first);
    }
    // What `estimate` does next with the values.
    if (const auto value = parsed.single("--docs")) docs(*value);
    if (const auto value = parsed.single("--images")) images(*value);
    if (const auto value = parsed.single("--padding")) integer(*value, false);
    if (const auto value = parsed.single("--seq-len")) integer(*value, true);
  } catch (const usage_error& e) {
    FUZZ_CHECK(e.command() == "estimate", "usage_error for another command");
    FUZZ_CHECK(std::string(e.what()).size() > 0, "an empty usage message");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 5) {
    case 0: docs(text); break;
    case 1: images(text); break;
    case 2: integer(text, false); break;
    case 3: integer(text, true); break;
    default: command_line(text); break;
  }
  return 0;
}
