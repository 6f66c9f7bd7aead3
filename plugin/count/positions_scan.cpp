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
#include "count/positions_scan.h"

#include <cstring>
#include <string>

#include "flopmeter/error.h"

#if defined(__x86_64__) || defined(__i386__)
#define FLOPMETER_POSITIONS_X86 1
#include <immintrin.h>
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
  static const positions_kernel best =
      available(positions_kernel::avx2) ? positions_kernel::avx2 : positions_kernel::sse2;
  return best;
}

// floor(p / c) = floor(p * m / 2^s) with s = 31 + l, l = ceil(log2 c) (2^(l-1) < c <= 2^l), m = ceil(2^s / c), for
// 0 <= p < 2^31 (the round-up division by a constant, as compilers emit it):
//   - m = (2^s + e) / c with 0 <= e < c, so p m / 2^s = p/c + p e / (c 2^s), and the error term is below
//     2^31 c / (c 2^(31+l)) = 2^-l <= 1/c. p/c = floor(p/c) + r/c with r <= c - 1, so p m / 2^s lies in
//     [p/c, floor(p/c) + 1): its floor is floor(p/c).
//   - m < 2^32: c > 2^(l-1) gives 2^s / c < 2^32, and m = 2^32 would need 2^s / c > 2^32 - 1, that is
//     c < 2^(l-1) (1 + 1/(2^32 - 1)) < 2^(l-1) + 1 (l <= 31): no integer c > 2^(l-1). (c = 2^l: m = 2^31.)
//   So p m < 2^63 fits uint64, and both factors fit 32 bits: one pmuludq per two or four entries.
chunk_divisor chunk_divisor_of(std::uint64_t c) {
  if (c < 1 || c >= (std::uint64_t{1} << 31)) throw error("chunk_divisor_of: c must be in [1, 2^31)");
  unsigned l = 0;
  while ((std::uint64_t{1} << l) < c) ++l;
  chunk_divisor d;
  d.size = c;
  d.shift = 31 + l;
  d.magic = ((std::uint64_t{1} << d.shift) - 1) / c + 1;  // ceil(2^s / c)
  return d;
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

// acc += floor(low half / c) per 64-bit lane of `v` (chunk_divisor: the low 32 bits times a magic < 2^32, shifted):
// SSE2's pmuludq / AVX2's vpmuludq, which multiply the low 32 bits of each 64-bit lane into 64 bits (plain vector
// code multiplies all 64 bits, three multiplies per lane). By reference, not by value: a vector parameter changes
// the calling convention between the baseline and AVX2 functions. The AVX2 one is not always_inline (its target
// differs from the kernel template's); it is inlined into block_avx2, whose target has AVX2.
FLOPMETER_ALWAYS_INLINE void add_quotients(u64x2& acc, const u64x2& v, const u64x2& magic, unsigned shift) {
#ifdef FLOPMETER_POSITIONS_X86
  acc +=
      reinterpret_cast<u64x2>(_mm_mul_epu32(reinterpret_cast<__m128i>(v), reinterpret_cast<__m128i>(magic))) >> shift;
#else
  acc += ((v & 0xFFFFFFFFu) * magic) >> shift;
#endif
}
#ifdef FLOPMETER_POSITIONS_X86
inline __attribute__((target("avx2"))) void add_quotients(u64x4& acc, const u64x4& v, const u64x4& magic,
                                                          unsigned shift) {
  acc += reinterpret_cast<u64x4>(_mm256_mul_epu32(reinterpret_cast<__m256i>(v), reinterpret_cast<__m256i>(magic))) >>
         shift;
}
#endif

// The windows a block kernel counts: S sliding ones (limit w - 1 each) and C chunked ones.
struct kernel_windows {
  std::uint32_t limits[kMaxAttentionWindows] = {};
  chunk_divisor chunks[kMaxAttentionWindows];
};

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

// The totals of an accepted array from a kernel's sums: window_pairs[0 .. S) the sliding windows (sum of
// min(p, w - 1), + n), window_pairs[S .. S + C) the chunked ones: sum of (p mod c) + 1 = n + sum of p - c * (sum
// of floor(p / c)), where c * (sum of the quotients) <= sum of p.
template <std::size_t S, std::size_t C>
FLOPMETER_ALWAYS_INLINE void store_totals(positions_totals& totals, std::size_t n, std::uint64_t zeros_total,
                                          std::uint64_t sum_total, const std::uint64_t* window_total,
                                          const std::uint64_t* quotient_total, const kernel_windows& windows) {
  totals.tokens = static_cast<std::int64_t>(n);
  totals.documents = static_cast<std::int64_t>(zeros_total);
  totals.causal_pairs = static_cast<std::int64_t>(sum_total + n);
  for (std::size_t w = 0; w < S; ++w) totals.window_pairs[w] = static_cast<std::int64_t>(window_total[w] + n);
  for (std::size_t c = 0; c < C; ++c) {
    totals.window_pairs[S + c] = static_cast<std::int64_t>(sum_total + n - windows.chunks[c].size * quotient_total[c]);
  }
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
//
// Chunked windows (C of them, chunk_divisor each): the low halves are the entries, so one multiply of each uint64
// lane's low 32 bits by the magic and a shift give floor(p / c) per entry (add_quotients), summed per lane
// (at most the sum of the entries: no wrap); the window's pairs are n + sum of p - c * sum of the quotients.
template <class V64, class V32, std::size_t S, std::size_t C>
FLOPMETER_ALWAYS_INLINE bool scan_block_int64(const std::int64_t* p, std::size_t n, const kernel_windows& windows,
                                              positions_totals& totals) {
  constexpr std::size_t lanes = sizeof(V64) / sizeof(std::uint64_t);
  constexpr std::size_t step = lanes * 2;
  const std::uint32_t* limits = windows.limits;
  V32 good0 = ~V32{}, good1 = ~V32{}, zeros0 = {}, zeros1 = {};
  V64 sum0 = {}, sum1 = {}, bits0 = {}, bits1 = {};
  V32 limit[S == 0 ? 1 : S] = {};
  V64 window_sum[S == 0 ? 1 : S] = {};
  V64 magic[C == 0 ? 1 : C] = {}, quotient_sum[C == 0 ? 1 : C] = {};
  unsigned shift[C == 0 ? 1 : C] = {};
  for (std::size_t w = 0; w < S; ++w) limit[w] = V32{} + limits[w];
  for (std::size_t c = 0; c < C; ++c) {
    magic[c] = V64{} + windows.chunks[c].magic;
    shift[c] = windows.chunks[c].shift;
  }
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
    for (std::size_t c = 0; c < C; ++c) add_quotients(quotient_sum[c], b.wide, magic[c], shift[c]);              \
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
  std::uint64_t quotient_total[C == 0 ? 1 : C] = {};
  for (std::size_t c = 0; c < C; ++c) quotient_total[c] = lane_sum(quotient_sum[c]);
  for (; i < n; ++i) {
    const std::uint64_t v = static_cast<std::uint64_t>(p[i]), prev = static_cast<std::uint64_t>(p[i - 1]);
    ok &= v == 0 || v == prev + 1;
    zeros_total += v == 0 ? 1 : 0;
    sum_total += v;
    for (std::size_t w = 0; w < S; ++w) window_total[w] += v < limits[w] ? v : limits[w];
    for (std::size_t c = 0; c < C; ++c) quotient_total[c] += windows.chunks[c].quotient(v & 0xFFFFFFFFu);
  }
  if (!ok) return false;
  store_totals<S, C>(totals, n, zeros_total, sum_total, window_total, quotient_total, windows);
  return true;
}

// int32 entries, two V32 (uint32 lanes) per step; the sum reads the same bytes as V64 (uint64 lanes) and adds
// the low and high halves separately, which zero-extends each entry (valid entries are >= 0).
// Sliding windows as in the int64 kernel: the per-lane mins, read as uint64 lanes, are split into their low and
// high halves and both added to the window's one accumulator (each step adds < 2^33 per lane: no wrap).
// Chunked windows: the entries are the low and the high halves of the uint64 lanes (the sums above split them
// already), each multiplied by the magic and shifted (add_quotients), two per lane.
template <class V64, class V32, std::size_t S, std::size_t C>
FLOPMETER_ALWAYS_INLINE bool scan_block_int32(const std::int32_t* p, std::size_t n, const kernel_windows& windows,
                                              positions_totals& totals) {
  constexpr std::size_t lanes = sizeof(V32) / sizeof(std::uint32_t);
  constexpr std::size_t step = lanes * 2;
  const std::uint32_t* limits = windows.limits;
  V32 bad0 = {}, bad1 = {}, zeros0 = {}, zeros1 = {};
  V64 low0 = {}, low1 = {}, high0 = {}, high1 = {};
  V32 limit[S == 0 ? 1 : S] = {};
  std::uint64_t window_total[S == 0 ? 1 : S] = {};
  V64 magic[C == 0 ? 1 : C] = {}, quotient_sum[C == 0 ? 1 : C] = {};
  unsigned shift[C == 0 ? 1 : C] = {};
  for (std::size_t c = 0; c < C; ++c) {
    magic[c] = V64{} + windows.chunks[c].magic;
    shift[c] = windows.chunks[c].shift;
  }
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
    const V64 odd = b.wide >> 32;                                                         \
    low##k += b.wide & low_mask;                                                          \
    high##k += odd;                                                                       \
    for (std::size_t w = 0; w < S; ++w) window_run[w] += b.v < limit[w] ? b.v : limit[w]; \
    for (std::size_t c = 0; c < C; ++c) {                                                 \
      add_quotients(quotient_sum[c], b.wide, magic[c], shift[c]);                         \
      add_quotients(quotient_sum[c], odd, magic[c], shift[c]);                            \
    }                                                                                     \
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
  std::uint64_t quotient_total[C == 0 ? 1 : C] = {};
  for (std::size_t c = 0; c < C; ++c) quotient_total[c] = lane_sum(quotient_sum[c]);
  for (; i < n; ++i) {
    const std::uint32_t v = static_cast<std::uint32_t>(p[i]), prev = static_cast<std::uint32_t>(p[i - 1]);
    bad_bits |= static_cast<std::uint64_t>(v != 0 && v != prev + 1u);
    zeros_total += v == 0 ? 1 : 0;
    sum_total += v;
    for (std::size_t w = 0; w < S; ++w) window_total[w] += v < limits[w] ? v : limits[w];
    for (std::size_t c = 0; c < C; ++c) quotient_total[c] += windows.chunks[c].quotient(v);
  }
  if (bad_bits != 0) return false;
  store_totals<S, C>(totals, n, zeros_total, sum_total, window_total, quotient_total, windows);
  return true;
}

// The kernels, for S sliding and C chunked windows, S + C <= 2 (a model without windows runs the S = C = 0 one,
// the loop it had before windows existed).
template <std::size_t S, std::size_t C>
bool block_baseline(const std::int64_t* p, std::size_t n, const kernel_windows& w, positions_totals& t) {
  return scan_block_int64<u64x2, u32x4, S, C>(p, n, w, t);
}
template <std::size_t S, std::size_t C>
bool block_baseline(const std::int32_t* p, std::size_t n, const kernel_windows& w, positions_totals& t) {
  return scan_block_int32<u64x2, u32x4, S, C>(p, n, w, t);
}

#ifdef FLOPMETER_POSITIONS_X86
// The AVX2 kernel: the same code with 32-byte vectors.
template <std::size_t S, std::size_t C>
__attribute__((target("avx2"))) bool block_avx2(const std::int64_t* p, std::size_t n, const kernel_windows& w,
                                                positions_totals& t) {
  return scan_block_int64<u64x4, u32x8, S, C>(p, n, w, t);
}
template <std::size_t S, std::size_t C>
__attribute__((target("avx2"))) bool block_avx2(const std::int32_t* p, std::size_t n, const kernel_windows& w,
                                                positions_totals& t) {
  return scan_block_int32<u64x4, u32x8, S, C>(p, n, w, t);
}
#endif

template <std::size_t S, std::size_t C, class T>
bool block_with(positions_kernel kernel, const T* p, std::size_t n, const kernel_windows& w, positions_totals& t) {
#ifdef FLOPMETER_POSITIONS_X86
  if (kernel == positions_kernel::avx2) return block_avx2<S, C>(p, n, w, t);
#else
  (void)kernel;
#endif
  return block_baseline<S, C>(p, n, w, t);
}

template <class T>
bool block_dispatch(std::size_t sliding, std::size_t chunked, positions_kernel kernel, const T* p, std::size_t n,
                    const kernel_windows& w, positions_totals& t) {
  static_assert(kMaxAttentionWindows == 2, "block_dispatch instantiates up to two windows");
  switch (sliding * 3 + chunked) {
    case 0: return block_with<0, 0>(kernel, p, n, w, t);
    case 1: return block_with<0, 1>(kernel, p, n, w, t);
    case 2: return block_with<0, 2>(kernel, p, n, w, t);
    case 3: return block_with<1, 0>(kernel, p, n, w, t);
    case 4: return block_with<1, 1>(kernel, p, n, w, t);
    default: return block_with<2, 0>(kernel, p, n, w, t);
  }
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
  // The windows for the kernels, sliding ones first, and which window each is. A valid array has p[i] <= i < n,
  // so a window of size >= n never bites: its pairs are the causal ones (and the kernels get only limits below
  // n - 1 < 2^31, see scan_block_int32, and chunk sizes below 2^31, see chunk_divisor_of).
  const std::size_t n = positions.size();
  kernel_windows for_kernel;
  std::size_t kernel_index[kMaxAttentionWindows] = {};  // kernel slot j counts window kernel_index[j]
  std::size_t sliding = 0, chunked = 0;
  std::size_t as_long_as_the_array[kMaxAttentionWindows] = {};
  std::size_t long_windows = 0;
  for (std::size_t k = 0; k < windows.size(); ++k) {
    if (static_cast<std::uint64_t>(windows[k].size) >= n) {
      as_long_as_the_array[long_windows++] = k;
    } else if (windows[k].kind == window_kind::sliding) {
      for_kernel.limits[sliding] = static_cast<std::uint32_t>(windows[k].size - 1);
      kernel_index[sliding++] = k;
    }
  }
  for (std::size_t k = 0; k < windows.size(); ++k) {
    if (static_cast<std::uint64_t>(windows[k].size) < n && windows[k].kind == window_kind::chunked) {
      for_kernel.chunks[chunked] = chunk_divisor_of(static_cast<std::uint64_t>(windows[k].size));
      kernel_index[sliding + chunked++] = k;
    }
  }
  positions_totals totals;
  if (!block_dispatch(sliding, chunked, kernel, positions.data(), n, for_kernel, totals)) {
    return scan_scalar(positions, windows);  // the scalar loop throws the exact error
  }
  // The kernels fill window_pairs[0 .. sliding + chunked): move each to its window's index.
  std::int64_t pairs[kMaxAttentionWindows] = {};
  for (std::size_t j = 0; j < sliding + chunked; ++j) pairs[j] = totals.window_pairs[j];
  for (std::size_t k = 0; k < kMaxAttentionWindows; ++k) totals.window_pairs[k] = 0;
  for (std::size_t j = 0; j < sliding + chunked; ++j) totals.window_pairs[kernel_index[j]] = pairs[j];
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
