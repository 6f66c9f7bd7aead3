// plugin/count/positions_scan.h — the per-token scan behind count_from_positions (private to the library).
//
// Positions give one entry per real token: 0 starts a document, every other entry is the previous + 1. A
// valid array of n entries therefore holds n tokens, one document per 0, and sum(position + 1) causal pairs
// (a document 0, 1, ..., L-1 contributes 1 + 2 + ... + L = L(L+1)/2, the reference's sum(positions + 1)).
//
// This is the one loop in flopmeter whose cost grows with the token count, so it runs at memory speed: a
// branch-free block kernel checks every entry with vector compares, counts the zeros and sums the entries,
// and only if some entry failed does the scalar loop run again to name the first bad index in the error.
// Kernels: the scalar loop (the reference), an SSE2 one (the x86-64 baseline, always there) and an AVX2 one
// chosen at run time when the CPU has it. All give identical results and identical errors; tests and
// fuzz/fuzz_microbatch.cpp check every available kernel against the scalar one.
//
// Thread-safety: the functions are pure (they only read the array); any thread may call them.
#pragma once

#include <cstdint>

#include "flopmeter/array_view.h"
#include "flopmeter/flop_model.h"

namespace flopmeter::detail {

// Totals of a valid positions array.
struct positions_totals {
  std::int64_t tokens = 0;        // entries (real tokens)
  std::int64_t documents = 0;     // entries equal to 0
  std::int64_t causal_pairs = 0;  // sum of (position + 1)
  // Per window k of the scan's `windows` (0 past them): the pairs query p of its document attends,
  //   sliding w: sum of min(position + 1, w)   (keys j with p - w < j <= p)
  //   chunked c: sum of (position mod c) + 1   (the keys of its own chunk, causally)
  std::int64_t window_pairs[kMaxAttentionWindows] = {};
};
bool operator==(const positions_totals& a, const positions_totals& b);

enum class positions_kernel {
  scalar,  // one entry at a time, with the error message; the reference for the others
  sse2,    // 2 x int64 / 4 x int32 per compare; x86-64 baseline
  avx2,    // 4 x int64 / 8 x int32 per compare; only where the CPU has AVX2
};
const char* name_of(positions_kernel kernel);
// Whether this CPU can run `kernel` (scalar and SSE2: always on x86-64; off x86 only scalar and the
// portable block kernel, reported as sse2).
bool available(positions_kernel kernel);
// The kernel scan_positions uses: the widest available one.
positions_kernel best_positions_kernel();

// floor(p / c) without a division, for the block kernels' chunked windows: (p * magic) >> shift for every
// 0 <= p < 2^31 and 1 <= c < 2^31, with magic < 2^32, so that one 32 x 32 -> 64-bit multiply per entry forms it
// (SSE2's pmuludq). The derivation is beside chunk_divisor_of in positions_scan.cpp.
struct chunk_divisor {
  std::uint64_t size = 1;   // c
  std::uint64_t magic = 0;  // ceil(2^shift / c)
  unsigned shift = 0;       // 31 + ceil(log2 c)
  std::uint64_t quotient(std::uint64_t p) const { return (p * magic) >> shift; }
};
chunk_divisor chunk_divisor_of(std::uint64_t c);  // 1 <= c < 2^31

// Validates `positions` and returns its totals. Throws flopmeter::error naming the first bad index
// ("positions[i] = v: expected 0 (a new document) or w") or an overflowing count; int32 entries are compared
// in 64-bit arithmetic, so a run that would wrap past INT32_MAX is an error, never a wrap.
// `windows` (at most kMaxAttentionWindows, each size >= 1, checked by the caller) are counted in the same pass,
// inside the block kernels: sliding ones as a lane-wise min and sum per window, chunked ones as a lane-wise
// quotient floor(p / c) by a multiply and a shift (chunk_divisor), summed: sum of (p mod c) + 1 is
// n + sum of p - c * sum of floor(p / c).
positions_totals scan_positions(array_view<std::int64_t> positions, array_view<attention_window> windows = {});
positions_totals scan_positions(array_view<std::int32_t> positions, array_view<attention_window> windows = {});

// The same with a chosen kernel (tests, fuzz, bench). Throws flopmeter::error if the CPU lacks it.
positions_totals scan_positions(array_view<std::int64_t> positions, positions_kernel kernel,
                                array_view<attention_window> windows = {});
positions_totals scan_positions(array_view<std::int32_t> positions, positions_kernel kernel,
                                array_view<attention_window> windows = {});

}  // namespace flopmeter::detail
