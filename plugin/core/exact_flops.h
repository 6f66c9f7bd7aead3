// plugin/core/exact_flops.h — internal: the model FLOPs of counts in a training regime as an exact integer,
// for running totals that must not round (train/flops_seen). compute_flops(regime, counts, scope).total() is
// the same sum rounded term by term to double; this keeps every product and the sum in unsigned 128 bits.
// Thread-safety: a pure function.
#pragma once

#include <optional>

#include "core/flop_terms.h"
#include "flopmeter/flop_model.h"

namespace flopmeter::detail {

// The exact value of compute_flops(coeffs, counts, scope).total() (model FLOPs, MFU's numerator; the recomputed
// forward is not in it); nullopt when it reaches 2^128 (3.4e38 FLOPs: coefficients and counts that no run has).
std::optional<uint128> exact_model_flops(const regime_coefficients& coeffs, const batch_counts& counts,
                                         flop_scope scope);

}  // namespace flopmeter::detail
