// Fuzz target: the Hugging Face config.json loader on arbitrary text (parse_hf_config), then the FLOP model
// and the Megatron check on whatever it accepts. config.json comes from checkpoints a user downloads, so it
// is hostile input like the TOML files.
//
// Invariants: the loader either returns a spec or throws flopmeter::error located in the source: where()
// names "fuzz/config.json" with a line in [1, lines of the text] and a column >= 1, what() starts with
// "fuzz/config.json:LINE:COL: ", and the description is not empty; nothing else escapes (no other exception,
// no crash, no UB, no leak). An accepted spec passes the checks of fuzz::check_accepted_spec, as the TOML
// loader's do (validate_model_spec, since the two share one rule set; coefficients positive or refused with
// flopmeter::error; the Megatron check without UB).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "flopmeter/error.h"
#include "flopmeter/model_config.h"
#include "fuzz_support.h"

namespace {

constexpr const char* kSource = "fuzz/config.json";

// Every config.json error is located: where() names the source, a line within the text and a column, and
// what() is that location followed by a description that says something.
void check_error(const flopmeter::error& e, const std::string& text) {
  const flopmeter::error_location& at = e.where();
  const auto lines = static_cast<std::uint32_t>(std::count(text.begin(), text.end(), '\n') + 1);
  FUZZ_CHECK(at.file == kSource, "the error does not name the source: " + std::string(e.what()));
  FUZZ_CHECK(at.line >= 1 && at.line <= lines, "the line is outside the text: " + std::string(e.what()));
  FUZZ_CHECK(at.column >= 1, "no column: " + std::string(e.what()));
  FUZZ_CHECK(!e.description().empty(), "the error says nothing: " + std::string(e.what()));
  const std::string prefix =
      std::string(kSource) + ":" + std::to_string(at.line) + ":" + std::to_string(at.column) + ": ";
  FUZZ_CHECK(std::string(e.what()).rfind(prefix, 0) == 0, "what() is not where + what: " + std::string(e.what()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return flopmeter::fuzz::run_model_loader(
      data, size, "parse_hf_config", [](const std::string& text) { return flopmeter::parse_hf_config(text, kSource); },
      check_error);
}
