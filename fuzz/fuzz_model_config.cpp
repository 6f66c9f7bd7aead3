// Fuzz target: the model TOML loader on arbitrary text (parse_model_spec), then the FLOP model and the
// Megatron check on whatever it accepts.
//
// Invariants: the loader either returns a spec or throws flopmeter::error whose message starts with the
// source name and a location ("fuzz.toml:LINE:COL: ...") or the source name alone for whole-document
// problems; nothing else escapes. An accepted spec passes validate_model_spec, its coefficients are
// non-negative (or their computation throws flopmeter::error, never overflows), and the sanity check runs
// without undefined behaviour (fuzz::check_accepted_spec, shared with the config.json and plugin targets).
#include <cstddef>
#include <cstdint>
#include <string>

#include "flopmeter/error.h"
#include "flopmeter/model_config.h"
#include "fuzz_support.h"

namespace {

constexpr const char* kSource = "fuzz.toml";

// The TOML loader's errors name the source, then a location or (whole-document problems) nothing more.
void check_error(const flopmeter::error& e, const std::string& /*text*/) {
  const std::string message = e.what();
  FUZZ_CHECK(message.rfind(std::string(kSource) + ":", 0) == 0, "the message does not name the source: " + message);
  FUZZ_CHECK(message.size() > std::string(kSource).size() + 2, "the message says nothing: " + message);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return flopmeter::fuzz::run_model_loader(
      data, size, "parse_model_spec",
      [](const std::string& text) { return flopmeter::parse_model_spec(text, kSource); }, check_error);
}
