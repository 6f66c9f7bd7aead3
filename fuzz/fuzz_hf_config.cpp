// Fuzz target: the Hugging Face config.json loader on arbitrary text (parse_hf_config), then the FLOP model
// and the Megatron check on whatever it accepts. config.json comes from checkpoints a user downloads, so it
// is hostile input like the TOML files (issue 9 "config.json as input").
//
// Invariants: the loader either returns a spec or throws flopmeter::error located in the source: where()
// names "fuzz/config.json" with a line in [1, lines of the text] and a column >= 1, what() starts with
// "fuzz/config.json:LINE:COL: ", and the description is not empty; nothing else escapes (no other exception,
// no crash, no UB, no leak). An accepted spec passes validate_model_spec (the two share one rule set), and
// its coefficients are positive or refused with flopmeter::error.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "flopmeter/error.h"
#include "flopmeter/flop_model.h"
#include "flopmeter/megatron.h"
#include "flopmeter/model_config.h"
#include "fuzz_support.h"

namespace {

constexpr const char* kSource = "fuzz/config.json";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace flopmeter;
  const std::string text(reinterpret_cast<const char*>(data), size);
  model_spec spec;
  try {
    spec = parse_hf_config(text, kSource);
  } catch (const error& e) {
    const error_location& at = e.where();
    const auto lines = static_cast<std::uint32_t>(std::count(text.begin(), text.end(), '\n') + 1);
    FUZZ_CHECK(at.file == kSource, "the error does not name the source: " + std::string(e.what()));
    FUZZ_CHECK(at.line >= 1 && at.line <= lines, "the line is outside the text: " + std::string(e.what()));
    FUZZ_CHECK(at.column >= 1, "no column: " + std::string(e.what()));
    FUZZ_CHECK(!e.description().empty(), "the error says nothing: " + std::string(e.what()));
    const std::string prefix = std::string(kSource) + ":" + std::to_string(at.line) + ":" + std::to_string(at.column) + ": ";
    FUZZ_CHECK(std::string(e.what()).rfind(prefix, 0) == 0, "what() is not where + what: " + std::string(e.what()));
    return 0;
  }
  try {
    validate_model_spec(spec);
  } catch (const error& e) {
    FUZZ_CHECK(false, std::string("an accepted config.json fails validate_model_spec: ") + e.what());
  }
  coefficients c;
  try {
    c = compute_coefficients(spec);
  } catch (const error&) {
    return 0;  // a coefficient beyond 2^63: refused, which is the contract
  }
  FUZZ_CHECK(c.dense_per_token > 0, "dense_per_token <= 0 for an accepted spec");
  FUZZ_CHECK(c.text_attn_pair > 0, "text_attn_pair <= 0 although every spec has a full-attention layer");
  for (const std::int64_t s : {1, 4096}) {
    try {
      (void)run_sanity_check(spec, s);
    } catch (const error&) {
      // Refusing is fine; undefined behaviour is what the run looks for.
    }
  }
  return 0;
}
