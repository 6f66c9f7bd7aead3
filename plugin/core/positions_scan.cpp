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

template <class T>
positions_totals scan_scalar(array_view<T> positions) {
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
template <class V64, class V32>
FLOPMETER_ALWAYS_INLINE bool scan_block_int64(const std::int64_t* p, std::size_t n, positions_totals& totals) {
  constexpr std::size_t lanes = sizeof(V64) / sizeof(std::uint64_t);
  constexpr std::size_t step = lanes * 2;
  V32 good0 = ~V32{}, good1 = ~V32{}, zeros0 = {}, zeros1 = {};
  V64 sum0 = {}, sum1 = {}, bits0 = {}, bits1 = {};
  const V32 one = V32{} + 1;
  std::size_t i = 1;
#define FLOPMETER_STEP_INT64(k)                                        \
  {                                                                    \
    const block<V64, V32> b = load_block<V64, V32>(p + i + (k)*lanes); \
    good##k &= reinterpret_cast<V32>(b.v == b.prev + one) | b.is_zero; \
    zeros##k -= b.is_zero; /* - (all ones) adds 1 */                   \
    sum##k += b.wide;                                                  \
    bits##k |= b.wide;                                                 \
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
  for (; i < n; ++i) {
    const std::uint64_t v = static_cast<std::uint64_t>(p[i]), prev = static_cast<std::uint64_t>(p[i - 1]);
    ok &= v == 0 || v == prev + 1;
    zeros_total += v == 0 ? 1 : 0;
    sum_total += v;
  }
  if (!ok) return false;
  totals.tokens = static_cast<std::int64_t>(n);
  totals.documents = static_cast<std::int64_t>(zeros_total);
  totals.causal_pairs = static_cast<std::int64_t>(sum_total + n);
  return true;
}

// int32 entries, two V32 (uint32 lanes) per step; the sum reads the same bytes as V64 (uint64 lanes) and adds
// the low and high halves separately, which zero-extends each entry (valid entries are >= 0).
template <class V64, class V32>
FLOPMETER_ALWAYS_INLINE bool scan_block_int32(const std::int32_t* p, std::size_t n, positions_totals& totals) {
  constexpr std::size_t lanes = sizeof(V32) / sizeof(std::uint32_t);
  constexpr std::size_t step = lanes * 2;
  V32 bad0 = {}, bad1 = {}, zeros0 = {}, zeros1 = {};
  V64 low0 = {}, low1 = {}, high0 = {}, high1 = {};
  const V32 one = V32{} + 1;
  const V64 low_mask = V64{} + 0xFFFFFFFFu;
  std::size_t i = 1;
#define FLOPMETER_STEP_INT32(k)                                          \
  {                                                                      \
    const block<V64, V32> b = load_block<V64, V32>(p + i + (k)*lanes);   \
    bad##k |= ~(reinterpret_cast<V32>(b.v == b.prev + one) | b.is_zero); \
    zeros##k -= b.is_zero; /* - (all ones) adds 1 */                     \
    low##k += b.wide & low_mask;                                         \
    high##k += b.wide >> 32;                                             \
  }
  for (; i + step <= n; i += step) {
    FLOPMETER_STEP_INT32(0)
    FLOPMETER_STEP_INT32(1)
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
  }
  if (bad_bits != 0) return false;
  totals.tokens = static_cast<std::int64_t>(n);
  totals.documents = static_cast<std::int64_t>(zeros_total);
  totals.causal_pairs = static_cast<std::int64_t>(sum_total + n);
  return true;
}

// The baseline kernel: 16-byte vectors (SSE2 on x86-64).
bool block_baseline(const std::int64_t* p, std::size_t n, positions_totals& t) {
  return scan_block_int64<u64x2, u32x4>(p, n, t);
}
bool block_baseline(const std::int32_t* p, std::size_t n, positions_totals& t) {
  return scan_block_int32<u64x2, u32x4>(p, n, t);
}

#ifdef FLOPMETER_POSITIONS_X86
// The AVX2 kernel: the same code with 32-byte vectors.
__attribute__((target("avx2"))) bool block_avx2(const std::int64_t* p, std::size_t n, positions_totals& t) {
  return scan_block_int64<u64x4, u32x8>(p, n, t);
}
__attribute__((target("avx2"))) bool block_avx2(const std::int32_t* p, std::size_t n, positions_totals& t) {
  return scan_block_int32<u64x4, u32x8>(p, n, t);
}
#endif

template <class T>
positions_totals scan_with(array_view<T> positions, positions_kernel kernel) {
  if (!available(kernel)) {
    throw error(std::string("the positions kernel ") + name_of(kernel) + " is not available on this CPU");
  }
  if (kernel == positions_kernel::scalar || positions.empty() || positions.size() > kBlockKernelMaxEntries) {
    return scan_scalar(positions);
  }
  positions_totals totals;
  bool ok = false;
#ifdef FLOPMETER_POSITIONS_X86
  if (kernel == positions_kernel::avx2) {
    ok = block_avx2(positions.data(), positions.size(), totals);
  } else {
    ok = block_baseline(positions.data(), positions.size(), totals);
  }
#else
  ok = block_baseline(positions.data(), positions.size(), totals);
#endif
  return ok ? totals : scan_scalar(positions);  // the scalar loop throws the exact error
}

}  // namespace

positions_totals scan_positions(array_view<std::int64_t> positions) {
  return scan_with(positions, best_positions_kernel());
}
positions_totals scan_positions(array_view<std::int32_t> positions) {
  return scan_with(positions, best_positions_kernel());
}
positions_totals scan_positions(array_view<std::int64_t> positions, positions_kernel kernel) {
  return scan_with(positions, kernel);
}
positions_totals scan_positions(array_view<std::int32_t> positions, positions_kernel kernel) {
  return scan_with(positions, kernel);
}

}  // namespace flopmeter::detail
