// fuzz/fuzz_support.h — what the fuzz targets share: an invariant check that aborts with a message (a
// libFuzzer crash with a reproducer), independent of NDEBUG; the input as text; and the checks every model
// spec a loader accepted must pass, whichever loader (TOML or config.json) read it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "flopmeter/error.h"
#include "flopmeter/flop_model.h"
#include "flopmeter/megatron.h"
#include "flopmeter/model_config.h"
#include "flopmeter/model_spec.h"

namespace flopmeter::fuzz {

[[noreturn]] inline void invariant_failed(const char* file, int line, const char* condition, const std::string& note) {
  std::fprintf(stderr, "%s:%d: invariant failed: %s\n  %s\n", file, line, condition, note.c_str());
  std::abort();
}

}  // namespace flopmeter::fuzz

// FUZZ_CHECK(condition, note): aborts naming the condition and `note` (a std::string expression, evaluated
// only on failure) when `condition` is false.
#define FUZZ_CHECK(condition, note)                                                   \
  do {                                                                                \
    if (!(condition)) ::flopmeter::fuzz::invariant_failed(__FILE__, __LINE__, #condition, (note)); \
  } while (false)

namespace flopmeter::fuzz {

// libFuzzer's bytes as the text a loader reads (any bytes, NUL included).
inline std::string input_text(const std::uint8_t* data, std::size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// What every accepted spec must satisfy, whichever loader (`loader`, for the message) produced it:
// validate_model_spec accepts it (the loaders and it share one rule set); it has layers and an attention layer
// (full, windowed or MLA); its coefficients are positive where every spec has the term and non-negative elsewhere, or their
// computation is refused with flopmeter::error (a coefficient beyond 2^63), never an overflow; and the
// Megatron sanity check runs without undefined behaviour (it may refuse, e.g. a term that cannot be formed).
inline void check_accepted_spec(const model_spec& spec, const std::string& loader) {
  try {
    validate_model_spec(spec);
  } catch (const error& e) {
    FUZZ_CHECK(false, "a spec " + loader + " accepted fails validate_model_spec: " + e.what());
  }
  // Softmax attention of any window (full, sliding, chunked) or MLA: a model may slide on every layer (Mistral); a
  // Mamba-2 hybrid may have Mamba mixers only.
  FUZZ_CHECK(
      spec.text.num_hidden_layers > 0 && (spec.text.num_attention_layers() > 0 || spec.text.num_mamba_layers() > 0),
      "an accepted spec has no layers or no token mixer");
  coefficients c;
  try {
    c = compute_coefficients(spec);
  } catch (const error&) {
    return;  // a coefficient beyond 2^63: refused, which is the contract
  }
  FUZZ_CHECK(c.dense_per_token > 0, "dense_per_token <= 0 for an accepted spec");
  FUZZ_CHECK(c.text_attn_pair >= 0 && c.window_attn_pair[0] >= 0 && c.window_attn_pair[1] >= 0,
             "a negative attention pair coefficient");
  FUZZ_CHECK(c.text_attn_pair > 0 || c.window_attn_pair[0] > 0 || c.window_attn_pair[1] > 0,
             "no attention pair coefficient > 0 although every spec has an attention layer");
  FUZZ_CHECK(c.vision_per_patch >= 0 && c.vision_attn_pair >= 0 && c.patch_embed_per_patch >= 0 &&
                 c.merger_per_merged_token >= 0 && c.mtp_per_token >= 0 && c.mtp_attn_pair >= 0,
             "a negative coefficient");
  FUZZ_CHECK(c.patches_per_merged_token >= 1, "patches_per_merged_token < 1");
  for (const std::int64_t s : {1, 4096}) {
    try {
      (void)run_sanity_check(spec, s);
    } catch (const error&) {
      // Refusing is fine; undefined behaviour is what the run looks for.
    }
  }
}

// One input through a model loader (the model TOML and config.json targets): `load(text)` either returns a
// spec, which must pass check_accepted_spec, or throws flopmeter::error, which `check_error(e, text)` inspects
// (each loader locates its errors its own way); any other exception escapes to libFuzzer as a finding.
template <typename Load, typename CheckError>
int run_model_loader(const std::uint8_t* data, std::size_t size, const std::string& loader, Load&& load,
                     CheckError&& check_error) {
  const std::string text = input_text(data, size);
  model_spec spec;
  try {
    spec = load(text);
  } catch (const error& e) {
    check_error(e, text);
    return 0;
  }
  check_accepted_spec(spec, loader);
  return 0;
}

}  // namespace flopmeter::fuzz
