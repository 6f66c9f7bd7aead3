// The positions scan: a scalar reference loop and branch-free block kernels (see positions_scan.h).
//
// Why the block kernels may skip the per-entry error handling and the overflow checks:
//   - They compute, for every entry i >= 1, ok_i = (p[i] == p[i-1] + 1) | (p[i] == 0) with wrapping lane
//     arithmetic, OR the failures together, and accept only if p[0] == 0 and every ok_i holds.
//   - By induction, an accepted array has 0 <= p[i] <= i: p[0] = 0, and p[i] is 0 or p[i-1] + 1 <= i. So
//     p[i-1] + 1 never wraps while n <= 2^31 (p[i-1] <= 2^31 - 2 fits int32 and int64), and a wrapped
//     compare cannot make an invalid entry look valid. Larger arrays (16 GiB of int64) go to the scalar loop.
//   - The same bound makes every sum fit: sum(p + 1) <= n(n+1)/2 < 2^61 for n <= 2^31, and the lane
//     accumulators (zeros per lane <= n, sums per lane < 2^62) cannot wrap for an accepted array.
//   - Any failure anywhere reruns the scalar loop, which throws the exact error naming the first bad index.
//     An invalid array costs two passes; a valid one, one pass at memory speed.
#include "core/positions_scan.h"

#include <cstring>
#include <string>

#include "flopmeter/error.h"

#if defined(__x86_64__) || defined(__i386__)
#define FLOPMETER_POSITIONS_X86 1
#endif

namespace flopmeter::detail {

bool operator==(const positions_totals& a, const positions_totals& b) {
  for (std::size_t k = 0; k < kMaxAttentionWindows; ++k) {
    if (a.window_pairs[k] != b.window_pairs[k]) return false;
  }
  return a.tokens == b.tokens && a.documents == b.documents && a.causal_pairs == b.causal_pairs;
}

const char* name_of(positions_kernel kernel) {
  switch (kernel) {
    case positions_kernel::scalar: return "scalar";
    case positions_kernel::sse2: return "sse2";
    case positions_kernel::avx2: return "avx2";
  }
  return "unknown";
}

bool available(positions_kernel kernel) {
  switch (kernel) {
    case positions_kernel::scalar:
    case positions_kernel::sse2: return true;
    case positions_kernel::avx2:
#ifdef FLOPMETER_POSITIONS_X86
      return __builtin_cpu_supports("avx2");
#else
      return false;
#endif
  }
  return false;
}

positions_kernel best_positions_kernel() {
  static const positions_kernel best = available(positions_kernel::avx2) ? positions_kernel::avx2 : positions_kernel::sse2;
  return best;
}

namespace {

// Arrays above this many entries take the scalar loop (the bound the block kernels' proof needs).
constexpr std::size_t kBlockKernelMaxEntries = std::size_t{1} << 31;

// ---- the scalar reference ---------------------------------------------------------------------------------

// A window's pairs per entry are at most the causal ones (min(p + 1, w) and (p mod c) + 1 are <= p + 1), so
// once the causal sum fits, the window sums do too: they are not checked again.
template <class T>
positions_totals scan_scalar(array_view<T> positions, array_view<attention_window> windows) {
  positions_totals totals;
  for (std::size_t i = 0; i < positions.size(); ++i) {
    const std::int64_t p = positions[i];
    // Entries before i are valid, so positions[i - 1] <= i - 1 and the + 1 (in 64 bits) cannot overflow.
    const std::int64_t expected = i == 0 ? 0 : std::int64_t{positions[i - 1]} + 1;
    if (p != 0 && p != expected) {
      throw error("positions[" + std::to_string(i) + "] = " + std::to_string(p) +
                  (i == 0 ? std::string(": the first position must be 0")
                          : ": expected 0 (a new document) or " + std::to_string(expected)));
    }
    totals.documents += p == 0 ? 1 : 0;
    // p + 1 <= i + 1 cannot overflow; the running sum can, for a batch of more than ~4.3e9 tokens.
    if (__builtin_add_overflow(totals.causal_pairs, p + 1, &totals.causal_pairs)) {
      throw error("positions[" + std::to_string(i) + "]: the batch's causal pair count overflows a 64-bit count");
    }
    for (std::size_t k = 0; k < windows.size(); ++k) {
      const std::int64_t w = windows[k].size;
      totals.window_pairs[k] += windows[k].kind == window_kind::sliding ? (p + 1 < w ? p + 1 : w) : p % w + 1;
    }
  }
  totals.tokens = static_cast<std::int64_t>(positions.size());
  return totals;
}

// ---- the block kernels -------------------------------------------------------------------------------------
// GCC/Clang vector extensions: the compiler lowers each operation to the widest instructions the function's
// target allows (SSE2 in the baseline, AVX2 in the avx2 clone), with no intrinsics and no vector-typed
// function parameters (which would change the calling convention between the two).

#define FLOPMETER_ALWAYS_INLINE inline __attribute__((always_inline))

using u64x2 = std::uint64_t __attribute__((vector_size(16)));
using u64x4 = std::uint64_t __attribute__((vector_size(32)));
using u32x4 = std::uint32_t __attribute__((vector_size(16)));
using u32x8 = std::uint32_t __attribute__((vector_size(32)));

template <class Vec>
FLOPMETER_ALWAYS_INLINE std::uint64_t lane_sum(const Vec& v) {
  constexpr std::size_t lanes = sizeof(Vec) / sizeof(v[0]);
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < lanes; ++i) sum += v[i];
  return sum;
}

// One vector's worth of entries starting at `at` (both kernels): the entries as uint32 lanes (`v`), the same
// lanes one entry earlier (`prev`), the same bytes as uint64 lanes (`wide`, for the sums), and all ones in
// each uint32 lane that is 0. Unaligned loads through memcpy, which compile to one vector load each.
template <class V64, class V32>
struct block {
  V32 v, prev, is_zero;
  V64 wide;
};
template <class V64, class V32, class T>
FLOPMETER_ALWAYS_INLINE block<V64, V32> load_block(const T* at) {
  block<V64, V32> b;
  std::memcpy(&b.v, at, sizeof b.v);
  std::memcpy(&b.prev, at - 1, sizeof b.prev);
  std::memcpy(&b.wide, at, sizeof b.wide);
  b.is_zero = reinterpret_cast<V32>(b.v == V32{});
  return b;
}

// int64 entries, read as pairs of uint32 lanes (an entry's two halves sit in two lanes; `v` and `prev` are
// loaded a whole entry apart, so each lane meets the same half of the previous entry on either byte order).
// An accepted array has 0 <= p[i] < 2^31 (the proof above), so every high half is 0 and every
// low half is the whole value. The kernel therefore
//   - ORs all entries together and requires bits 31..63 of the result to be 0 (any entry >= 2^31 or < 0
//     fails), and given that,
//   - checks the low halves exactly like the int32 kernel: good = (v == prev + 1) | (v == 0) per 32-bit lane.
//     High-half lanes are 0, so their "v == 0" holds and they never fail; a low half of 0 counts a document.
// This needs only 32-bit compares, which SSE2 has (it has no 64-bit one).
// Returns whether the array is valid; fills the totals if so.
//
// Sliding windows (S of them, limit[s] = min(w - 1, 2^32 - 1)): sum(min(p + 1, w)) = sum(min(p, w - 1)) + n. The
// min is taken per uint32 lane (a high half is 0, so its min is 0) and the lanes read as uint64 are the entries'
// mins; they sum like the positions (min(p, w - 1) <= p, so no lane accumulator can wrap either).
template <class V64, class V32, std::size_t S>
FLOPMETER_ALWAYS_INLINE bool scan_block_int64(const std::int64_t* p, std::size_t n, const std::uint32_t* limits,
                                              positions_totals& totals) {
  constexpr std::size_t lanes = sizeof(V64) / sizeof(std::uint64_t);
  constexpr std::size_t step = lanes * 2;
  V32 good0 = ~V32{}, good1 = ~V32{}, zeros0 = {}, zeros1 = {};
  V64 sum0 = {}, sum1 = {}, bits0 = {}, bits1 = {};
  V32 limit[S == 0 ? 1 : S] = {};
  V64 window_sum[S == 0 ? 1 : S] = {};
  for (std::size_t w = 0; w < S; ++w) limit[w] = V32{} + limits[w];
  const V32 one = V32{} + 1;
  std::size_t i = 1;
#define FLOPMETER_STEP_INT64(k)                                                                                  \
  {                                                                                                              \
    const block<V64, V32> b = load_block<V64, V32>(p + i + (k)*lanes);                                           \
    good##k &= reinterpret_cast<V32>(b.v == b.prev + one) | b.is_zero;                                           \
    zeros##k -= b.is_zero; /* - (all ones) adds 1 */                                                             \
    sum##k += b.wide;                                                                                            \
    bits##k |= b.wide;                                                                                           \
    for (std::size_t w = 0; w < S; ++w) window_sum[w] += reinterpret_cast<V64>(b.v < limit[w] ? b.v : limit[w]); \
  }
  for (; i + step <= n; i += step) {
    FLOPMETER_STEP_INT64(0)
    FLOPMETER_STEP_INT64(1)
  }
#undef FLOPMETER_STEP_INT64
  const V32 good = good0 & good1;
  const V64 bits = bits0 | bits1;
  bool ok = p[0] == 0;
  for (std::size_t l = 0; l < 2 * lanes; ++l) ok &= good[l] == ~std::uint32_t{0};
  std::uint64_t all_bits = 0;
  for (std::size_t l = 0; l < lanes; ++l) all_bits |= bits[l];
  ok &= (all_bits >> 31) == 0;
  // The zero count includes one zero high half per entry of the vector loop (i - 1 of them).
  std::uint64_t zeros_total = 1 + lane_sum(zeros0) + lane_sum(zeros1) - (i - 1);
  std::uint64_t sum_total = lane_sum(sum0 + sum1);
  std::uint64_t window_total[S == 0 ? 1 : S] = {};
  for (std::size_t w = 0; w < S; ++w) window_total[w] = lane_sum(window_sum[w]);
  for (; i < n; ++i) {
    const std::uint64_t v = static_cast<std::uint64_t>(p[i]), prev = static_cast<std::uint64_t>(p[i - 1]);
    ok &= v == 0 || v == prev + 1;
    zeros_total += v == 0 ? 1 : 0;
    sum_total += v;
    for (std::size_t w = 0; w < S; ++w) window_total[w] += v < limits[w] ? v : limits[w];
  }
  if (!ok) return false;
  totals.tokens = static_cast<std::int64_t>(n);
  totals.documents = static_cast<std::int64_t>(zeros_total);
  totals.causal_pairs = static_cast<std::int64_t>(sum_total + n);
  for (std::size_t w = 0; w < S; ++w) totals.window_pairs[w] = static_cast<std::int64_t>(window_total[w] + n);
  return true;
}

// int32 entries, two V32 (uint32 lanes) per step; the sum reads the same bytes as V64 (uint64 lanes) and adds
// the low and high halves separately, which zero-extends each entry (valid entries are >= 0).
// Sliding windows as in the int64 kernel: the per-lane mins, read as uint64 lanes, are split into their low and
// high halves and both added to the window's one accumulator (each step adds < 2^33 per lane: no wrap).
template <class V64, class V32, std::size_t S>
FLOPMETER_ALWAYS_INLINE bool scan_block_int32(const std::int32_t* p, std::size_t n, const std::uint32_t* limits,
                                              positions_totals& totals) {
  constexpr std::size_t lanes = sizeof(V32) / sizeof(std::uint32_t);
  constexpr std::size_t step = lanes * 2;
  V32 bad0 = {}, bad1 = {}, zeros0 = {}, zeros1 = {};
  V64 low0 = {}, low1 = {}, high0 = {}, high1 = {};
  V32 limit[S == 0 ? 1 : S] = {};
  std::uint64_t window_total[S == 0 ? 1 : S] = {};
  // The windows' mins are summed in uint32 lanes (a min and an add per vector), widened once per run of
  // `block_steps` steps: each step adds at most 2 x limit per lane, so a run stays below 2^32. The caller passes
  // only limits below n - 1 <= 2^31 (a window as long as the array is the causal count), so runs have >= 1 step.
  std::size_t block_steps = ~std::size_t{0};
  for (std::size_t w = 0; w < S; ++w) {
    limit[w] = V32{} + limits[w];
    const std::size_t steps = 0xFFFFFFFFu / (2 * static_cast<std::size_t>(limits[w]) + 1);
    block_steps = steps < block_steps ? steps : block_steps;
  }
  const V32 one = V32{} + 1;
  const V64 low_mask = V64{} + 0xFFFFFFFFu;
  std::size_t i = 1;
#define FLOPMETER_STEP_INT32(k)                                                           \
  {                                                                                       \
    const block<V64, V32> b = load_block<V64, V32>(p + i + (k)*lanes);                    \
    bad##k |= ~(reinterpret_cast<V32>(b.v == b.prev + one) | b.is_zero);                  \
    zeros##k -= b.is_zero; /* - (all ones) adds 1 */                                      \
    low##k += b.wide & low_mask;                                                          \
    high##k += b.wide >> 32;                                                              \
    for (std::size_t w = 0; w < S; ++w) window_run[w] += b.v < limit[w] ? b.v : limit[w]; \
  }
  while (i + step <= n) {
    V32 window_run[S == 0 ? 1 : S] = {};
    const std::size_t run_end = (n - i) / step > block_steps ? i + block_steps * step : n;
    for (; i + step <= run_end; i += step) {
      FLOPMETER_STEP_INT32(0)
      FLOPMETER_STEP_INT32(1)
    }
    for (std::size_t w = 0; w < S; ++w) window_total[w] += lane_sum(window_run[w]);
  }
#undef FLOPMETER_STEP_INT32
  const V32 bad = bad0 | bad1;
  std::uint64_t bad_bits = static_cast<std::uint32_t>(p[0]);
  for (std::size_t l = 0; l < lanes; ++l) bad_bits |= bad[l];
  std::uint64_t zeros_total = 1 + lane_sum(zeros0) + lane_sum(zeros1);
  std::uint64_t sum_total = lane_sum(low0 + low1) + lane_sum(high0 + high1);
  for (; i < n; ++i) {
    const std::uint32_t v = static_cast<std::uint32_t>(p[i]), prev = static_cast<std::uint32_t>(p[i - 1]);
    bad_bits |= static_cast<std::uint64_t>(v != 0 && v != prev + 1u);
    zeros_total += v == 0 ? 1 : 0;
    sum_total += v;
    for (std::size_t w = 0; w < S; ++w) window_total[w] += v < limits[w] ? v : limits[w];
  }
  if (bad_bits != 0) return false;
  totals.tokens = static_cast<std::int64_t>(n);
  totals.documents = static_cast<std::int64_t>(zeros_total);
  totals.causal_pairs = static_cast<std::int64_t>(sum_total + n);
  for (std::size_t w = 0; w < S; ++w) totals.window_pairs[w] = static_cast<std::int64_t>(window_total[w] + n);
  return true;
}

// The kernels, for S = 0, 1, 2 sliding windows (a model without windows runs the S = 0 one, the loop it had
// before windows existed).
template <std::size_t S>
bool block_baseline(const std::int64_t* p, std::size_t n, const std::uint32_t* limits, positions_totals& t) {
  return scan_block_int64<u64x2, u32x4, S>(p, n, limits, t);
}
template <std::size_t S>
bool block_baseline(const std::int32_t* p, std::size_t n, const std::uint32_t* limits, positions_totals& t) {
  return scan_block_int32<u64x2, u32x4, S>(p, n, limits, t);
}

#ifdef FLOPMETER_POSITIONS_X86
// The AVX2 kernel: the same code with 32-byte vectors.
template <std::size_t S>
__attribute__((target("avx2"))) bool block_avx2(const std::int64_t* p, std::size_t n, const std::uint32_t* limits,
                                                positions_totals& t) {
  return scan_block_int64<u64x4, u32x8, S>(p, n, limits, t);
}
template <std::size_t S>
__attribute__((target("avx2"))) bool block_avx2(const std::int32_t* p, std::size_t n, const std::uint32_t* limits,
                                                positions_totals& t) {
  return scan_block_int32<u64x4, u32x8, S>(p, n, limits, t);
}
#endif

template <std::size_t S, class T>
bool block_with(positions_kernel kernel, const T* p, std::size_t n, const std::uint32_t* limits, positions_totals& t) {
#ifdef FLOPMETER_POSITIONS_X86
  if (kernel == positions_kernel::avx2) return block_avx2<S>(p, n, limits, t);
#else
  (void)kernel;
#endif
  return block_baseline<S>(p, n, limits, t);
}

// sum((p mod c) + 1) over a valid array: p mod c restarts at 0 with each document and otherwise steps by one,
// wrapping to 0 at c, so a running counter replaces the division.
template <class T>
std::int64_t chunked_pairs(const T* p, std::size_t n, std::int64_t c) {
  std::int64_t r = 0, sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    r = p[i] == 0 ? 0 : (r + 1 == c ? 0 : r + 1);
    sum += r + 1;
  }
  return sum;
}

template <class T>
positions_totals scan_with(array_view<T> positions, positions_kernel kernel, array_view<attention_window> windows) {
  if (!available(kernel)) {
    throw error(std::string("the positions kernel ") + name_of(kernel) + " is not available on this CPU");
  }
  if (windows.size() > kMaxAttentionWindows) throw error("scan_positions: more windows than kMaxAttentionWindows");
  if (kernel == positions_kernel::scalar || positions.empty() || positions.size() > kBlockKernelMaxEntries) {
    return scan_scalar(positions, windows);
  }
  // The sliding windows' limits w - 1 for the kernels, and which window each is.
  std::uint32_t limits[kMaxAttentionWindows] = {};
  std::size_t sliding_index[kMaxAttentionWindows] = {};
  std::size_t sliding = 0;
  const std::size_t n = positions.size();
  std::size_t as_long_as_the_array[kMaxAttentionWindows] = {};
  std::size_t long_windows = 0;
  for (std::size_t k = 0; k < windows.size(); ++k) {
    if (windows[k].kind != window_kind::sliding) continue;
    // A valid array has p[i] <= i < n, so a window of w >= n never bites: its pairs are the causal ones (and the
    // kernels get only limits below n - 1 < 2^31, see scan_block_int32).
    if (static_cast<std::uint64_t>(windows[k].size) >= n) {
      as_long_as_the_array[long_windows++] = k;
      continue;
    }
    limits[sliding] = static_cast<std::uint32_t>(windows[k].size - 1);
    sliding_index[sliding++] = k;
  }
  positions_totals totals;
  const T* p = positions.data();
  const bool ok = sliding == 0   ? block_with<0>(kernel, p, n, limits, totals)
                  : sliding == 1 ? block_with<1>(kernel, p, n, limits, totals)
                                 : block_with<2>(kernel, p, n, limits, totals);
  if (!ok) return scan_scalar(positions, windows);  // the scalar loop throws the exact error
  // The kernels fill window_pairs[0 .. sliding): move each to its window's index (from the last: s <= k).
  for (std::size_t s = sliding; s-- > 0;) {
    const std::int64_t pairs = totals.window_pairs[s];
    totals.window_pairs[s] = 0;
    totals.window_pairs[sliding_index[s]] = pairs;
  }
  for (std::size_t k = 0; k < windows.size(); ++k) {
    if (windows[k].kind == window_kind::chunked) totals.window_pairs[k] = chunked_pairs(p, n, windows[k].size);
  }
  for (std::size_t l = 0; l < long_windows; ++l) totals.window_pairs[as_long_as_the_array[l]] = totals.causal_pairs;
  return totals;
}

}  // namespace

positions_totals scan_positions(array_view<std::int64_t> positions, array_view<attention_window> windows) {
  return scan_with(positions, best_positions_kernel(), windows);
}
positions_totals scan_positions(array_view<std::int32_t> positions, array_view<attention_window> windows) {
  return scan_with(positions, best_positions_kernel(), windows);
}
positions_totals scan_positions(array_view<std::int64_t> positions, positions_kernel kernel,
                                array_view<attention_window> windows) {
  return scan_with(positions, kernel, windows);
}
positions_totals scan_positions(array_view<std::int32_t> positions, positions_kernel kernel,
                                array_view<attention_window> windows) {
  return scan_with(positions, kernel, windows);
}

}  // namespace flopmeter::detail
