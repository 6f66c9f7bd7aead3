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
// A rank that counts micro-batches on a device (the C++ tensor path, the Python package's CUDA path) never has
// their counts on the host, so it forms their exact FLOPs on the device, at each log and without a sync, and adds
// its device total into the row's limbs inside the collective (device FLOPs, below). The row then carries the
// rank's whole total, every interval included as on the host, and the figure is formed from the rows alone:
// the same on every rank, whichever collectives were lost. A layer of the C ABI that adds device counts but
// not their FLOPs writes kFlopsSeenOnDevice into the first limb, and the figure is left out with a warning.
//
// Device FLOPs. A device adds and multiplies exactly in int64 as long as nothing passes 2^63, so the 128-bit
// product of a count and its weight (count/exact_flops.h, model_flop_weights: FLOPs are linear in the counts) is
// formed from digits of 16 bits:
//   - an interval's count c (a whole float64 below 2^53) has kCountDigits digits a_i = floor(c / 2^16i) mod 2^16;
//   - a weight W (|W| < 2^66) has kWeightDigits digits w_j of |W| and W's sign s;
//   - the interval's FLOPs are sum_k S_k 2^16k with S_k = sum over counts f and i + j = k of s_f a_fi w_fj:
//     one product of the digit vector with weight_digit_matrix. Each term is below 2^32 in magnitude and there
//     are at most kCountFieldCount x kCountDigits = 72 of them, so |S_k| < 2^39;
//   - pairs of positions fold into 32-bit limbs, L_m = S_2m + 2^16 S_2m+1 (|L_m| < 2^56), which are added to
//     the rank's running total T_0..T_4 (kDeviceFlopsLimbs, base 2^32) and carried from the lowest up: carry =
//     floor(T_m / 2^32), which brings T_0..T_3 back into [0, 2^32) and leaves the rest in T_4. The interval's
//     FLOPs are >= 0, so the total is, and T_4 >= 0;
//   - a count of 2^53 or more may already be rounded: it adds 1 to T_4 (2^128 FLOPs), which marks the total as
//     beyond what a row carries from then on (derive() refuses that interval itself);
//   - in the row, the host's limbs h_0..h_2 and T_0..T_2 are added and carried likewise; a carry out of the
//     third limb, T_3 or T_4 != 0 (the total reached 2^96) or a host limb of kFlopsSeenBeyondRow gives
//     kFlopsSeenBeyondRow in all three.
// Every value stays an integer below 2^63 in magnitude, so the result is exact whatever the device's order of
// summation, and equals exact_model_flops of the same counts.
// Thread-safety: pure functions.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "flopmeter/error.h"
#include "accounting/row_layout.h"
#include "count/count_fields.h"
#include "arch/flop_terms.h"

namespace flopmeter::detail {

inline constexpr double kFlopsSeenLimb = 4294967296.0;  // 2^32
inline constexpr double kFlopsSeenBeyondRow = -1.0;     // the rank's total reached 2^96
inline constexpr double kFlopsSeenOnDevice = -2.0;      // a layer added device counts but not their FLOPs

// Device FLOPs (above): digits of 16 bits, limbs of 32.
inline constexpr std::int64_t kFlopsDigitBits = 16;
inline constexpr std::int64_t kCountDigits = 4;   // a count below 2^64 (a device's are below 2^53)
inline constexpr std::int64_t kWeightDigits = 5;  // a weight below 2^80 in magnitude (model_flop_weights: 2^66)
inline constexpr std::int64_t kProductDigits = kCountDigits + kWeightDigits - 1;  // S_0..S_7: 4 limbs
inline constexpr std::int64_t kDeviceFlopsLimbs = 5;                              // T_0..T_3 of 32 bits, T_4 the rest

// The matrix of device FLOPs (above), row-major: kCountFieldCount x kCountDigits rows (count f's digit i at
// f * kCountDigits + i), kProductDigits columns, entry (f i, k) = s_f w_f,k-i (0 outside 0 <= k - i <
// kWeightDigits). Throws flopmeter::error for a weight of 2^80 or more in magnitude.
inline std::vector<std::int64_t> weight_digit_matrix(const std::array<int128, kCountFieldCount>& weights) {
  std::vector<std::int64_t> matrix(kCountFieldCount * kCountDigits * kProductDigits, 0);
  for (std::size_t f = 0; f < kCountFieldCount; ++f) {
    const bool negative = weights[f] < 0;
    uint128 magnitude = static_cast<uint128>(negative ? -weights[f] : weights[f]);
    if ((magnitude >> (kWeightDigits * kFlopsDigitBits)) != 0) {
      throw error("the FLOPs weight of count " + std::string(kCountFields[f].name) +
                  " reaches 2^80, beyond what device FLOPs carry");
    }
    for (std::int64_t j = 0; j < kWeightDigits; ++j, magnitude >>= kFlopsDigitBits) {
      const auto digit = static_cast<std::int64_t>(magnitude & 0xFFFF);
      for (std::int64_t i = 0; i < kCountDigits; ++i) {
        matrix[(f * kCountDigits + static_cast<std::size_t>(i)) * kProductDigits + static_cast<std::size_t>(i + j)] =
            negative ? -digit : digit;
      }
    }
  }
  return matrix;
}

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
  if (smallest_limb == kFlopsSeenOnDevice) {
    why =
        "train/flops_seen not reported: a rank's layer adds counts of micro-batches on a device without their "
        "FLOPs (-2 in its row's first FLOPs limb)";
    return std::nullopt;
  }
  if (!(smallest_limb >= 0 && largest_limb < kFlopsSeenLimb)) {
    why =
        "train/flops_seen not reported: a rank's running total reached 2^96 FLOPs (or a count of 2^53 on a "
        "device), beyond what a row carries exactly";
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
