// plugin/count/exact_flops.h — internal: the model FLOPs of counts in a training regime as an exact integer,
// for running totals that must not round (train/flops_seen). compute_flops(regime, counts, scope).total() is
// the same sum rounded term by term to double; this keeps every product and the sum in unsigned 128 bits.
// model_flop_weights gives the same FLOPs as one integer weight per count, for code that forms them where the
// counts are (a device) and can only multiply and add.
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <optional>

#include "count/count_fields.h"
#include "arch/flop_terms.h"
#include "flopmeter/flop_model.h"

namespace flopmeter::detail {

// The exact value of compute_flops(coeffs, counts, scope).total() (model FLOPs, MFU's numerator; the recomputed
// forward is not in it); nullopt when it reaches 2^128 (3.4e38 FLOPs: coefficients and counts that no run has).
std::optional<uint128> exact_model_flops(const regime_coefficients& coeffs, const batch_counts& counts,
                                         flop_scope scope);

// The model FLOPs one unit of each count adds, in kCountFields' order: FLOPs are linear in the counts, so
// exact_model_flops(coeffs, n, scope) == sum over f of weight[f] * n.f for every batch_counts whose itemless
// counts lie within their totals (what count_event forms). A weight is a sum of a few int64 coefficients, or
// (an itemless count's) the difference of two: it may be negative, and its magnitude stays below 2^66.
std::array<int128, kCountFieldCount> model_flop_weights(const regime_coefficients& coeffs, flop_scope scope);

}  // namespace flopmeter::detail
