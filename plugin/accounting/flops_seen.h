// plugin/accounting/flops_seen.h — internal: train/flops_seen, the running total of exact model FLOPs, in a
// row and over the DP group.
//
// The total outgrows a double's exact integers (2^53 = 9e15 FLOPs) within the first steps of any real run, and
// a double summed step by step or rank by rank rounds at every addition. So each rank keeps its total as an
// unsigned 128-bit integer (count/exact_flops.h) and writes it into its row as three limbs of 32 bits (row_layout.h,
// row_flops_seen_0..2): whole numbers below 2^32, which a SUM all-reduce adds exactly in any order for up to
// 2^21 ranks (2^21 x 2^32 = 2^53). The three DP sums are recombined in 128 bits, Σ0 + 2^32 Σ1 + 2^64 Σ2, and
// rounded once to the record's double: the figure is the exact integer to 1 part in 2^53 (its nearest
// double), and the integer itself below 2^53. A rank's total of 2^96 (7.9e28 FLOPs) or more does not fit
// three limbs: its row carries kFlopsSeenBeyondRow and the figure is left out with a warning, never rounded.
//
// Every micro-batch is counted on the host (a device's index arrays are copied there first), so the rank's
// total is formed in one place, exact_model_flops of its counts (count/exact_flops.h).
// Thread-safety: pure functions.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "accounting/row_layout.h"
#include "arch/flop_terms.h"

namespace flopmeter::detail {

inline constexpr double kFlopsSeenLimb = 4294967296.0;  // 2^32
inline constexpr double kFlopsSeenBeyondRow = -1.0;     // the rank's total reached 2^96

// A rank's running total into its row's limbs (kFlopsSeenBeyondRow in each when it is nullopt or >= 2^96).
inline void flops_seen_to_row(const std::optional<uint128>& total, double* row) {
  const uint128 mask = 0xFFFFFFFFu;
  if (!total || (*total >> 96) != 0) {
    row[row_flops_seen_0] = row[row_flops_seen_1] = row[row_flops_seen_2] = kFlopsSeenBeyondRow;
    return;
  }
  row[row_flops_seen_0] = static_cast<double>(static_cast<std::uint64_t>(*total & mask));
  row[row_flops_seen_1] = static_cast<double>(static_cast<std::uint64_t>((*total >> 32) & mask));
  row[row_flops_seen_2] = static_cast<double>(static_cast<std::uint64_t>(*total >> 64));
}

// The DP group's limb sums and the smallest and largest limb of its rows: what derive() and the fixed-size
// reduction both carry.
struct flops_seen_sums {
  double limbs[3] = {0, 0, 0};
  double smallest_limb = 0;  // over every limb of every DP row: a marker shows here
  double largest_limb = 0;
  bool any_row = false;

  void add_row(const double* row) {
    for (int i = 0; i < 3; ++i) {
      const double limb = row[row_flops_seen_0 + static_cast<std::size_t>(i)];
      limbs[i] += limb;
      smallest_limb = any_row ? std::min(smallest_limb, limb) : limb;
      largest_limb = any_row ? std::max(largest_limb, limb) : limb;
      any_row = true;
    }
  }
};

// train/flops_seen from the DP sums when every limb was a whole number in [0, 2^32) (the sums are exact then),
// else nullopt and `why` says why the figure is left out.
inline std::optional<double> flops_seen_figure(const double* limb_sums, double smallest_limb, double largest_limb,
                                               std::string& why) {
  if (!(smallest_limb >= 0 && largest_limb < kFlopsSeenLimb)) {
    why =
        "train/flops_seen not reported: a rank's running total reached 2^96 FLOPs, beyond what a row carries "
        "exactly";
    return std::nullopt;
  }
  uint128 total = 0;
  for (int i = 2; i >= 0; --i) {
    // Each sum is a whole number below 2^53: exact as an integer.
    total = (total << 32) + static_cast<uint128>(static_cast<std::uint64_t>(limb_sums[i]));
  }
  return static_cast<double>(total);  // rounded once, to the nearest double
}

}  // namespace flopmeter::detail
