// Fuzz target: the model TOML loader on arbitrary text (parse_model_spec), then the FLOP model and the
// Megatron check on whatever it accepts.
//
// Invariants: the loader either returns a spec or throws flopmeter::error whose message starts with the
// source name and a location ("fuzz.toml:LINE:COL: ...") or the source name alone for whole-document
// problems; nothing else escapes. An accepted spec passes validate_model_spec, its coefficients are
// non-negative (or their computation throws flopmeter::error, never overflows), and the sanity check runs
// without undefined behaviour.
#include <cstddef>
#include <cstdint>
#include <string>

#include "flopmeter/error.h"
#include "flopmeter/flop_model.h"
#include "flopmeter/megatron.h"
#include "flopmeter/model_config.h"
#include "fuzz_support.h"

namespace {

constexpr const char* kSource = "fuzz.toml";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace flopmeter;
  const std::string text(reinterpret_cast<const char*>(data), size);
  model_spec spec;
  try {
    spec = parse_model_spec(text, kSource);
  } catch (const error& e) {
    const std::string message = e.what();
    FUZZ_CHECK(message.rfind(std::string(kSource) + ":", 0) == 0, "the message does not name the source: " + message);
    FUZZ_CHECK(message.size() > std::string(kSource).size() + 2, "the message says nothing: " + message);
    return 0;
  }
  try {
    validate_model_spec(spec);
  } catch (const error& e) {
    FUZZ_CHECK(false, std::string("an accepted spec fails validate_model_spec: ") + e.what());
  }
  FUZZ_CHECK(spec.text.num_hidden_layers > 0 && spec.text.num_full_attention_layers() > 0,
             "an accepted spec has no layers or no full attention layer");
  coefficients c;
  try {
    c = compute_coefficients(spec);
  } catch (const error&) {
    return 0;  // a coefficient beyond 2^63: refused, which is the contract
  }
  FUZZ_CHECK(c.dense_per_token > 0, "dense_per_token <= 0 for an accepted spec");
  FUZZ_CHECK(c.text_attn_pair > 0, "text_attn_pair <= 0 although every spec has a full-attention layer");
  FUZZ_CHECK(c.vision_per_patch >= 0 && c.vision_attn_pair >= 0 && c.patch_embed_per_patch >= 0 &&
                 c.merger_per_merged_token >= 0 && c.mtp_per_token >= 0 && c.mtp_attn_pair >= 0,
             "a negative coefficient");
  FUZZ_CHECK(c.patches_per_merged_token >= 1, "patches_per_merged_token < 1");
  for (const std::int64_t s : {1, 4096}) {
    try {
      (void)run_sanity_check(spec, s);
    } catch (const error&) {
      // Refusing is fine (e.g. a term that cannot be formed); undefined behaviour is what the run looks for.
    }
  }
  return 0;
}
