// plugin/arch/flop_terms.h — internal: the pieces every FLOP coefficient is built from. Saturating 128-bit
// multiply-add counts that remember which model_spec fields formed them (`term`), and the multiply-adds per
// token (or per pair, per patch) of each GEMM family, each with its derivation in flop_terms.cpp. The
// full-training coefficients (flop_model.cpp) and the per-regime ones (training_regime.cpp) both bill these;
// flop_terms.cpp also builds the coefficient_overflow they throw. The bottom of the FLOP model's files.
// Not installed. Thread-safety: pure functions on values.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "flopmeter/model_spec.h"

namespace flopmeter::detail {

__extension__ typedef __int128 int128;
__extension__ typedef unsigned __int128 uint128;

// Saturating arithmetic with provenance. Sizes are capped at 2^31 by the loader, but products of several
// (the merger's (m^2 * hv)^2 is up to 2^186) and layer counts times per-layer work can exceed even 128 bits.
// A `term` saturates at kSaturated (2^120, far above any int64) instead of wrapping, and remembers the
// model_spec fields it was formed from, so an overflow says which sizes are to blame. A sum keeps the fields
// of its largest part: the part that made it too large.
constexpr int128 kSaturated = int128{1} << 120;

struct term {
  int128 value = 0;
  std::vector<const char*> fields;
};

// A product of sizes (each >= 0); `field` is nullptr for a constant factor.
struct factor {
  int128 value;
  const char* field;
};

term product(std::initializer_list<factor> factors);
term operator*(term t, const factor& f);
term operator*(term a, const term& b);  // the fields of both
term operator+(const term& a, const term& b);

// Training FLOPs of a per-unit multiply-add count, as int64; coefficient_overflow names the fields otherwise.
std::int64_t to_coefficient(const term& macs, int128 passes, const char* name);
// Reports add some coefficients (dense_per_token + mtp_per_token, the text + MTP pair terms): the sums must fit
// too; throws coefficient_overflow named `name` otherwise.
void check_sum_fits(std::int64_t a, const term& a_macs, std::int64_t b, const term& b_macs, const char* name);
// Exact a*b rounded once to double (a, b are exact int64 counts / coefficients). Inline: compute_flops calls it
// per term for every rank's row at each log (out of line it was 8% of derive's instructions at 16,384 ranks).
inline double exact_product(std::int64_t a, std::int64_t b) {
  const int128 product = static_cast<int128>(a) * static_cast<int128>(b);
  return static_cast<double>(product);
}

}  // namespace flopmeter::detail
