// plugin/arch/flop_model.cpp — the full-training coefficients of a model_spec (compute_coefficients(spec),
// flopmeter/flop_model.h): the one GEMM walk (gemm_walk.cpp, where every per-GEMM derivation is) with everything
// trainable, and the scope names. The other parts
// of the FLOP model: the per-batch counts (batch_counts.cpp), the FLOPs of counts (flop_totals.cpp) and the
// coefficients of a training regime with frozen parts or LoRA (training_regime.cpp).
#include "flopmeter/flop_model.h"

#include <cstdint>
#include <string>

#include "arch/gemm_walk.h"
#include "flopmeter/error.h"

namespace flopmeter {

const char* to_string(flop_scope scope) { return scope == flop_scope::seed ? "seed" : "complete"; }

flop_scope parse_flop_scope(const std::string& text, const error_location& where) {
  if (text == "seed") return flop_scope::seed;
  if (text == "complete") return flop_scope::complete;
  throw error(where, "unknown FLOP scope '" + text + "' (expected \"seed\" or \"complete\")");
}

// Full training is the regime where everything trains: the same walk and rule as every other regime
// (gemm_walk.cpp), each GEMM 3 passes (6 FLOPs per multiply-add), the patch embedding 2 (its input is pixels).
coefficients compute_coefficients(const model_spec& spec) {
  return detail::fold_coefficients(spec, training_regime{}, true);
}

}  // namespace flopmeter
