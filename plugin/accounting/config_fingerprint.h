// plugin/accounting/config_fingerprint.h — internal: what gives a rank's row its meaning, carried in the row so
// that ranks that loaded different configurations are found at the first log instead of being summed.
//
// Every rank derives the record from every rank's row with its own coefficients and layout. Rows whose
// settings differ (another model, scope, frozen parts or LoRA, recompute, [parallel] layout or order,
// tpi_multiplier) would be summed into a number that means nothing, the same on no two ranks. So each row carries a fingerprint of those settings
// (row_config_*, row_layout.h); the protocol compares the gathered fingerprints at every log and emits no
// interval while they differ (log_protocol.h).
//
// What may differ, and is not in the fingerprint: the peak (a mixed fleet: each rank's MFU uses its own
// peak, and the record the emitting rank writes uses the emitting rank's peak), the sinks and emit mode, the
// logger, the clock, topk, collective_timeout and sanity_check.
//
// Encoding: every field is a whole number below 2^48 (or, for tpi_multiplier, the double itself), so it is
// exact in a double and survives an all-gather and an all-reduce over zeros unchanged.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "flopmeter/flop_model.h"
#include "flopmeter/layout.h"

namespace flopmeter::detail {

// The settings a row carries, as the plugin knows them at create.
struct config_settings {
  std::string model_name;  // model_spec::name
  coefficients model;      // the model's coefficients
  training_regime regime;  // which parts train, and the LoRA adapters
  flop_scope scope = flop_scope::complete;
  parallel_sizes parallel;
  std::string rank_order = "tp-cp-dp-pp";
  double tpi_multiplier = 1.0;
};

// Writes the fingerprint of `settings` into row_config_* of `row`.
void write_fingerprint(const config_settings& settings, double* row);

// True when every one of `world` rows carries the same fingerprint as `rows`' row `rank`.
bool fingerprints_agree(const double* rows, std::int64_t world, std::int64_t rank);

// Which ranks differ from the others, and in which setting: "rank 5: model qwen3_vl_4b, the others
// qwen3_vl_2b; ranks 2 and 3: [parallel] tp 2, the others tp 1". For each setting the value most ranks hold
// (ties: the one the lowest rank holds) is "the others'"; ranks are listed up to 8 per value. "" when every
// row agrees.
std::string describe_fingerprint_differences(const double* rows, std::int64_t world);

}  // namespace flopmeter::detail
