// plugin/accounting/sanitize_options.h — internal: the one check of throughput_options, shared by
// throughput_plugin::create and the plugin-file loader (throughput_config.cpp).
//
// The bounds of each bounded setting are here once. The plugin-file loader reads each key against them and
// reports a value outside at its file:line:col; it then hands the options it built to sanitize_options, as
// create() does, so that a plugin file can never produce options that create() refuses.
// Thread-safety: pure functions and constants.
#pragma once

#include <cstdint>

#include "flopmeter/throughput.h"

namespace flopmeter::detail {

// Rows per side of perf_topk/*: create() takes any k >= 0 (k beyond the world lists every rank); a plugin
// file caps it at 1024, beyond which a top-k is no longer a summary.
inline constexpr std::int64_t kMinTopk = 0;
inline constexpr std::int64_t kMaxTopkInFile = 1024;
// collective_timeout: [0, one hour]; a Gloo rendezvous needs a positive one.
inline constexpr std::int64_t kMinCollectiveTimeoutMs = 0;
inline constexpr std::int64_t kMinRendezvousTimeoutMs = 1;

// Checks every setting of `options` that has a documented range (setting_range, kMinTopk, the timeouts) and
// validates the model spec; throws flopmeter::error whose where().key is the setting (the throughput_options
// member) and whose description() is the problem: "key 'tpi_multiplier': must be in [1, 1e6] (got 0.500000)". The sinks, logger and clock are not checked: any value is valid.
void sanitize_options(const throughput_options& options);

// throughput_options::sanity_check: runs the term-by-term check of `model` against the Megatron constant at
// S = 4096, 8192 and 32768 and throws flopmeter::error listing the terms that fail ("sanity check failed for
// model 'NAME' at S=4096:\n  TERM: ratio R, expected E").
void refuse_failed_sanity_check(const model_spec& model);

}  // namespace flopmeter::detail
