// The positions scan (plugin/count/positions_scan.cpp): every kernel this CPU has gives exactly what the scalar
// reference gives — the same totals for a valid array, the same error (naming the first bad index) otherwise
// — over hand-derived cases, every bad-entry position in arrays long enough to cover the vector loop and its
// tail, entries whose low 32 bits look valid but whose high bits do not, and random arrays.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "count/count_plan.h"
#include "count/positions_scan.h"
#include "flopmeter/error.h"
#include "flopmeter/flop_model.h"

namespace {

using namespace flopmeter;
using detail::positions_kernel;
using detail::positions_totals;

const positions_kernel kAllKernels[] = {positions_kernel::scalar, positions_kernel::sse2, positions_kernel::avx2};

// A kernel's answer: the totals, or the error text.
struct outcome {
  std::optional<positions_totals> totals;
  std::string error;
};

template <class T>
outcome scan(const std::vector<T>& positions, positions_kernel kernel, array_view<attention_window> windows = {}) {
  outcome o;
  try {
    o.totals = detail::scan_positions(array_view<T>(positions), kernel, windows);
  } catch (const error& e) {
    o.error = e.what();
  }
  return o;
}

// Every available kernel agrees with the scalar one; returns the scalar outcome.
template <class T>
outcome scan_all_agree(const std::vector<T>& positions, array_view<attention_window> windows = {}) {
  const outcome reference = scan(positions, positions_kernel::scalar, windows);
  for (const positions_kernel k : kAllKernels) {
    if (!detail::available(k)) continue;
    const outcome o = scan(positions, k, windows);
    EXPECT_EQ(o.totals.has_value(), reference.totals.has_value()) << detail::name_of(k);
    if (o.totals && reference.totals) {
      EXPECT_EQ(o.totals->tokens, reference.totals->tokens) << detail::name_of(k);
      EXPECT_EQ(o.totals->documents, reference.totals->documents) << detail::name_of(k);
      EXPECT_EQ(o.totals->causal_pairs, reference.totals->causal_pairs) << detail::name_of(k);
      for (std::size_t w = 0; w < kMaxAttentionWindows; ++w) {
        EXPECT_EQ(o.totals->window_pairs[w], reference.totals->window_pairs[w])
            << detail::name_of(k) << " window " << w;
      }
    }
    EXPECT_EQ(o.error, reference.error) << detail::name_of(k);
  }
  return reference;
}

template <class T>
std::vector<T> from_lengths(const std::vector<int>& lengths) {
  std::vector<T> positions;
  for (const int l : lengths) {
    for (int p = 0; p < l; ++p) positions.push_back(static_cast<T>(p));
  }
  return positions;
}

// Tokens, documents and pairs from document lengths: sum L, count, sum L(L+1)/2.
positions_totals expected_from_lengths(const std::vector<int>& lengths) {
  positions_totals t;
  for (const int l : lengths) {
    t.tokens += l;
    t.documents += 1;
    t.causal_pairs += std::int64_t{l} * (l + 1) / 2;
  }
  return t;
}

TEST(PositionsScan, BaselineKernelsAreAlwaysAvailable) {
  EXPECT_TRUE(detail::available(positions_kernel::scalar));
  EXPECT_TRUE(detail::available(positions_kernel::sse2));
  EXPECT_TRUE(detail::available(detail::best_positions_kernel()));
  EXPECT_NE(detail::best_positions_kernel(), positions_kernel::scalar);
}

TEST(PositionsScan, HandDerivedTotals) {
  // {0,1,2,0,1}: 5 tokens, 2 documents (the zeros), pairs sum(p + 1) = (1+2+3) + (1+2) = 9.
  const std::vector<std::int64_t> small = {0, 1, 2, 0, 1};
  const outcome o = scan_all_agree(small);
  ASSERT_TRUE(o.totals) << o.error;
  EXPECT_EQ(o.totals->tokens, 5);
  EXPECT_EQ(o.totals->documents, 2);
  EXPECT_EQ(o.totals->causal_pairs, 9);
  // One entry {0}: one document of one token, one pair.
  const outcome one = scan_all_agree(std::vector<std::int32_t>{0});
  ASSERT_TRUE(one.totals);
  EXPECT_EQ(one.totals->causal_pairs, 1);
  // Empty: nothing.
  const outcome none = scan_all_agree(std::vector<std::int64_t>{});
  ASSERT_TRUE(none.totals);
  EXPECT_EQ(none.totals->tokens, 0);
  EXPECT_EQ(none.totals->documents, 0);
}

TEST(PositionsScan, DocumentMixesOfEverySizeMatchTheirLengths) {
  // Lengths chosen so the arrays end at every offset of the vector loop (steps of 4, 8 and 16 entries) and
  // include one-token documents (consecutive zeros) and documents longer than a step.
  const std::vector<std::vector<int>> mixes = {{1},
                                               {2},
                                               {3, 1},
                                               {1, 1, 1, 1, 1, 1, 1, 1, 1},
                                               {17},
                                               {16, 1},
                                               {5, 9, 3, 1},
                                               {31, 2, 1, 1, 40},
                                               {8192, 6000},
                                               {100, 77},
                                               {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}};
  for (const auto& lengths : mixes) {
    const positions_totals expected = expected_from_lengths(lengths);
    for (int extra = 0; extra < 17; ++extra) {  // one more 1..16-token document shifts the tail
      std::vector<int> l = lengths;
      if (extra > 0) l.push_back(extra);
      const positions_totals want = expected_from_lengths(l);
      const outcome o64 = scan_all_agree(from_lengths<std::int64_t>(l));
      const outcome o32 = scan_all_agree(from_lengths<std::int32_t>(l));
      ASSERT_TRUE(o64.totals && o32.totals) << o64.error << o32.error;
      EXPECT_TRUE(*o64.totals == want);
      EXPECT_TRUE(*o32.totals == want);
    }
    (void)expected;
  }
}

TEST(PositionsScan, ErrorsNameTheFirstBadIndex) {
  EXPECT_EQ(scan_all_agree(std::vector<std::int64_t>{5, 0}).error, "positions[0] = 5: the first position must be 0");
  EXPECT_EQ(scan_all_agree(std::vector<std::int64_t>{0, 1, 3, 9}).error,
            "positions[2] = 3: expected 0 (a new document) or 2");
  EXPECT_EQ(scan_all_agree(std::vector<std::int32_t>{0, 1, 2, -1}).error,
            "positions[3] = -1: expected 0 (a new document) or 3");
}

// A bad value at every index of a 40-entry array (vector loop and tail, both element types), for values that
// fail in different ways: off by one, negative, and int64 values whose low 32 bits are exactly what a valid
// entry would hold (the int64 kernel compares low halves and checks the high bits separately).
TEST(PositionsScan, EveryBadIndexIsFoundByEveryKernel) {
  const std::vector<std::int64_t> valid = from_lengths<std::int64_t>({13, 1, 26});
  const std::int64_t two32 = std::int64_t{1} << 32;
  for (std::size_t at = 0; at < valid.size(); ++at) {
    const std::int64_t good = valid[at];
    const std::vector<std::int64_t> bad_values = {good + 1,
                                                  good + 2,
                                                  -1,
                                                  -good - 1,
                                                  good + two32,  // low half valid, high half 1
                                                  two32,         // low half 0 (a "document start")
                                                  std::numeric_limits<std::int64_t>::min() + good,
                                                  std::numeric_limits<std::int64_t>::max(),
                                                  std::int64_t{1} << 31};
    for (const std::int64_t bad : bad_values) {
      if (bad == 0 || (at > 0 && bad == valid[at - 1] + 1)) continue;  // still valid: a start, or a follower
      std::vector<std::int64_t> p = valid;
      p[at] = bad;
      const outcome o = scan_all_agree(p);
      ASSERT_FALSE(o.totals) << "bad " << bad << " at " << at;
      EXPECT_EQ(o.error.rfind("positions[" + std::to_string(at) + "] = " + std::to_string(bad) + ":", 0), 0u)
          << o.error;
      if (bad >= std::numeric_limits<std::int32_t>::min() && bad <= std::numeric_limits<std::int32_t>::max()) {
        std::vector<std::int32_t> p32(p.begin(), p.end());
        const outcome o32 = scan_all_agree(p32);
        EXPECT_EQ(o32.error, o.error);
      }
    }
  }
}

TEST(PositionsScan, Int32RunPastInt32MaxIsAnErrorNotAWrap) {
  // INT32_MAX + 1 wraps to INT32_MIN in 32-bit lanes; the entries are compared in 64 bits, so the first
  // entry is already wrong (a valid array never holds INT32_MAX before index INT32_MAX).
  const std::vector<std::int32_t> p = {0, std::numeric_limits<std::int32_t>::max(),
                                       std::numeric_limits<std::int32_t>::min()};
  EXPECT_EQ(scan_all_agree(p).error, "positions[1] = 2147483647: expected 0 (a new document) or 1");
}

TEST(PositionsScan, RandomArraysAgreeWithTheScalarKernel) {
  std::mt19937_64 rng(20261201);
  for (int trial = 0; trial < 3000; ++trial) {
    const std::size_t n = rng() % 80;
    std::vector<std::int64_t> p;
    for (std::size_t i = 0; i < n; ++i) {
      const bool restart = i == 0 || rng() % 7 == 0;
      p.push_back(restart ? 0 : p.back() + 1);
    }
    const int corruptions = static_cast<int>(rng() % 3);
    for (int c = 0; c < corruptions && n > 0; ++c) {
      const std::size_t at = rng() % n;
      switch (rng() % 4) {
        case 0: p[at] += 1; break;
        case 1: p[at] = -static_cast<std::int64_t>(rng() % 5); break;
        case 2: p[at] += static_cast<std::int64_t>(rng() % 3) << 32; break;
        default: p[at] = 0; break;  // still valid
      }
    }
    scan_all_agree(p);
    scan_all_agree(std::vector<std::int32_t>(p.begin(), p.end()));
  }
}

TEST(PositionsScan, CountFromPositionsAcceptsInt32AndInt64Alike) {
  // Lengths {3, 5} with 2 padding tokens: real 8, pairs 6 + 15 = 21 (the CLI test's batch).
  const std::vector<std::int64_t> lengths = {3, 5};
  const batch_counts from_lengths_counts = count_from_lengths(lengths, 2, {}, vision_geometry{});
  const std::vector<std::int64_t> p64 = {0, 1, 2, 0, 1, 2, 3, 4};
  const std::vector<std::int32_t> p32(p64.begin(), p64.end());
  const batch_counts c64 = count_from_positions(p64, 2, {}, vision_geometry{});
  const batch_counts c32 = count_from_positions(p32, 2, {}, vision_geometry{});
  EXPECT_EQ(c64.real_tokens, 8);
  EXPECT_EQ(c64.causal_pairs, 21);
  EXPECT_EQ(c64.documents, 2);
  EXPECT_EQ(c64.padding_tokens, 2);
  EXPECT_TRUE(c64 == from_lengths_counts);
  EXPECT_TRUE(c32 == c64);
  EXPECT_THROW(count_from_positions(std::vector<std::int32_t>{1}, 0, {}, vision_geometry{}), error);
}

// ---- attention windows ---------------------------------------------------------------------------------------

// The pairs of documents of `lengths` under window `w`, by enumerating every (query i, key j) of each document
// and applying the mask's rule directly: sliding, i - w < j <= i; chunked, j <= i in the same chunk (j / c == i / c).
std::int64_t brute_force_pairs(const std::vector<int>& lengths, const attention_window& w) {
  std::int64_t pairs = 0;
  for (const int l : lengths) {
    for (std::int64_t i = 0; i < l; ++i) {
      for (std::int64_t j = 0; j <= i; ++j) {
        pairs += w.kind == window_kind::sliding ? (j > i - w.size ? 1 : 0) : (j / w.size == i / w.size ? 1 : 0);
      }
    }
  }
  return pairs;
}

vision_geometry with_windows(const attention_window& w0) {
  vision_geometry g;
  g.window_count = 1;
  g.windows[0] = w0;
  return g;
}
vision_geometry with_windows(const attention_window& w0, const attention_window& w1) {
  vision_geometry g = with_windows(w0);
  g.window_count = 2;
  g.windows[1] = w1;
  return g;
}

TEST(Windows, HandDerivedPairsOfOneDocument) {
  // One document of 5 tokens.
  //   sliding 2: queries attend 1, 2, 2, 2, 2 keys = 9 = w(w+1)/2 + (L-w)*w = 3 + 3*2;
  //   chunked 2: chunks {0,1} {2,3} {4}: 1+2 + 1+2 + 1 = 7 = q*c(c+1)/2 + r(r+1)/2 = 2*3 + 1;
  //   sliding 8 (> L): every causal pair, 15; chunked 5 (= L): one chunk, 15.
  const std::vector<std::int64_t> five = {5};
  const batch_counts a =
      count_from_lengths(five, 0, {}, with_windows({window_kind::sliding, 2}, {window_kind::chunked, 2}));
  EXPECT_EQ(a.window_pairs_0, 9);
  EXPECT_EQ(a.window_pairs_1, 7);
  EXPECT_EQ(a.causal_pairs, 15);
  // No image: the window pairs are itemless too (a frozen decoder bills them with other coefficients).
  EXPECT_EQ(a.itemless_window_pairs_0, 9);
  EXPECT_EQ(a.itemless_window_pairs_1, 7);
  const batch_counts b =
      count_from_lengths(five, 0, {}, with_windows({window_kind::sliding, 8}, {window_kind::chunked, 5}));
  EXPECT_EQ(b.window_pairs_0, 15);
  EXPECT_EQ(b.window_pairs_1, 15);
  // Window 1 absent: its count stays 0.
  const batch_counts c = count_from_lengths(five, 0, {}, with_windows({window_kind::sliding, 1}));
  EXPECT_EQ(c.window_pairs_0, 5);  // a window of 1: each query attends itself
  EXPECT_EQ(c.window_pairs_1, 0);
}

// Every description of a batch (lengths, cu_seqlens, int32 and int64 positions through every kernel) gives the
// brute-force count, for documents and windows around the vector steps and each other's sizes.
TEST(Windows, EveryDescriptionMatchesTheBruteForcePairs) {
  const std::vector<std::vector<int>> mixes = {
      {}, {1}, {7}, {1, 1, 1}, {16, 1, 3}, {33, 5}, {8, 9, 10}, {64, 2, 1, 17}, {40, 0, 3}};
  const std::vector<attention_window> windows = {
      {window_kind::sliding, 1},  {window_kind::sliding, 2},   {window_kind::sliding, 3},
      {window_kind::sliding, 16}, {window_kind::sliding, 100}, {window_kind::chunked, 1},
      {window_kind::chunked, 3},  {window_kind::chunked, 8},   {window_kind::chunked, 100}};
  for (const auto& lengths : mixes) {
    std::vector<std::int64_t> lengths64(lengths.begin(), lengths.end()), cu = {0};
    for (const int l : lengths) cu.push_back(cu.back() + l);
    const std::vector<std::int64_t> p64 = from_lengths<std::int64_t>(lengths);
    const std::vector<std::int32_t> p32 = from_lengths<std::int32_t>(lengths);
    for (const attention_window& w0 : windows) {
      for (const attention_window& w1 : windows) {
        const vision_geometry g = with_windows(w0, w1);
        const std::int64_t want0 = brute_force_pairs(lengths, w0), want1 = brute_force_pairs(lengths, w1);
        const batch_counts from_lengths_counts = count_from_lengths(lengths64, 1, {}, g);
        EXPECT_EQ(from_lengths_counts.window_pairs_0, want0);
        EXPECT_EQ(from_lengths_counts.window_pairs_1, want1);
        EXPECT_TRUE(count_from_cu_seqlens(cu, 1, {}, g) == from_lengths_counts);
        // Positions cannot express an empty document: compare them without those.
        std::vector<int> nonempty;
        for (const int l : lengths) {
          if (l > 0) nonempty.push_back(l);
        }
        if (nonempty.size() == lengths.size()) {
          EXPECT_TRUE(count_from_positions(p64, 1, {}, g) == from_lengths_counts);
          EXPECT_TRUE(count_from_positions(p32, 1, {}, g) == from_lengths_counts);
        }
        const attention_window both[] = {w0, w1};
        const outcome o64 = scan_all_agree(p64, both), o32 = scan_all_agree(p32, both);
        ASSERT_TRUE(o64.totals && o32.totals);
        EXPECT_EQ(o64.totals->window_pairs[0], want0);
        EXPECT_EQ(o64.totals->window_pairs[1], want1);
        EXPECT_TRUE(*o32.totals == *o64.totals);
        // One window alone (the one-window kernel).
        const outcome one = scan_all_agree(p32, array_view<attention_window>(both, 1));
        ASSERT_TRUE(one.totals);
        EXPECT_EQ(one.totals->window_pairs[0], want0);
        EXPECT_EQ(one.totals->window_pairs[1], 0);
      }
    }
  }
}

TEST(Windows, RandomPositionsAgreeWithTheScalarKernel) {
  std::mt19937_64 rng(20261203);
  for (int trial = 0; trial < 2000; ++trial) {
    const std::size_t n = rng() % 120;
    std::vector<std::int64_t> p;
    for (std::size_t i = 0; i < n; ++i) p.push_back(i == 0 || rng() % 11 == 0 ? 0 : p.back() + 1);
    if (n > 0 && rng() % 4 == 0) p[rng() % n] += 1 + static_cast<std::int64_t>(rng() % 2);  // sometimes invalid
    const attention_window w[] = {
        {rng() % 2 ? window_kind::sliding : window_kind::chunked, 1 + static_cast<std::int64_t>(rng() % 40)},
        {rng() % 2 ? window_kind::sliding : window_kind::chunked, 1 + static_cast<std::int64_t>(rng() % 40)}};
    scan_all_agree(p, w);
    scan_all_agree(std::vector<std::int32_t>(p.begin(), p.end()), w);
  }
}

TEST(Windows, WindowsLargerThanAnyPositionAreTheCausalPairs) {
  // A window beyond 2^32 (the kernels clamp its limit to 32 bits) and beyond any document: every causal pair.
  const std::int64_t huge = std::int64_t{1} << 40;
  const attention_window w[] = {{window_kind::sliding, huge}, {window_kind::chunked, huge}};
  const std::vector<std::int32_t> p = from_lengths<std::int32_t>({70, 3});
  const outcome o = scan_all_agree(p, w);
  ASSERT_TRUE(o.totals);
  EXPECT_EQ(o.totals->window_pairs[0], o.totals->causal_pairs);
  EXPECT_EQ(o.totals->window_pairs[1], o.totals->causal_pairs);
}

TEST(Windows, LargeWindowsOverLongArraysAreSummedInRuns) {
  // The int32 kernel sums a window's mins in 32-bit lanes and widens them every 2^32 / (2 (w - 1) + 1) steps: a
  // window close to the array's length makes those runs short (here about 2,400 steps of up to 16 entries, some
  // 27 runs over the array). One document of L = 2^20 tokens under sliding w = 900,001:
  // w(w+1)/2 + (L - w) * w, against the scalar kernel too.
  const std::int64_t length = std::int64_t{1} << 20, w = 900001;
  std::vector<std::int32_t> p(static_cast<std::size_t>(length));
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = static_cast<std::int32_t>(i);
  const attention_window windows[] = {{window_kind::sliding, w}, {window_kind::sliding, 3}};
  const outcome o = scan_all_agree(p, windows);
  ASSERT_TRUE(o.totals);
  EXPECT_EQ(o.totals->window_pairs[0], w * (w + 1) / 2 + (length - w) * w);
  EXPECT_EQ(o.totals->window_pairs[1], 6 + (length - 3) * 3);
}

TEST(Windows, LongestDocumentIsExact) {
  // L = 2^32 - 1 (the longest document a count takes). Sliding w = 2^31: w(w+1)/2 + (L - w) * w
  //   = 2^61 + 2^30 + (2^31 - 1) * 2^31 = 2^61 + 2^30 + 2^62 - 2^31; chunked c = 2^31: q = 1, r = 2^31 - 1:
  //   c(c+1)/2 + r(r+1)/2 = (2^61 + 2^30) + (2^61 - 2^30) = 2^62.
  const std::int64_t length = (std::int64_t{1} << 32) - 1, w = std::int64_t{1} << 31;
  const std::vector<std::int64_t> lengths = {length};
  const batch_counts c =
      count_from_lengths(lengths, 0, {}, with_windows({window_kind::sliding, w}, {window_kind::chunked, w}));
  EXPECT_EQ(c.window_pairs_0,
            (std::int64_t{1} << 61) + (std::int64_t{1} << 30) + (std::int64_t{1} << 62) - (std::int64_t{1} << 31));
  EXPECT_EQ(c.window_pairs_1, std::int64_t{1} << 62);
}

TEST(Windows, ChunkedCountOfLongDocumentsEqualsTheDivisionForm) {
  // count_from_lengths forms L / c with a multiply by 1/c (and corrects it); here the same count with integer
  // division, q = L / c, r = L % c: q * c(c+1)/2 + r(r+1)/2, for random L < 2^32 and c <= L, c near L, c
  // dividing L and one off.
  std::mt19937_64 rng(20261204);
  const auto tri = [](std::int64_t m) { return m % 2 == 0 ? (m / 2) * (m + 1) : m * ((m + 1) / 2); };
  for (int trial = 0; trial < 20000; ++trial) {
    std::int64_t length = 1 + static_cast<std::int64_t>(rng() % ((std::uint64_t{1} << 32) - 1));
    if (trial % 5 == 4) {  // c divides L exactly: L / c is an integer, the multiply by 1/c must not round below it
      const std::int64_t chunk = 1 + static_cast<std::int64_t>(rng() % (1 << 20));
      length = chunk * (1 + static_cast<std::int64_t>(rng() % 4000));
      const std::vector<std::int64_t> lengths = {length};
      const batch_counts got = count_from_lengths(lengths, 0, {}, with_windows({window_kind::chunked, chunk}));
      ASSERT_EQ(got.window_pairs_0, (length / chunk) * tri(chunk)) << "L " << length << " c " << chunk;
      continue;
    }
    std::int64_t c = 1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(length));
    switch (trial % 4) {
      case 0: break;
      case 1: c = std::max<std::int64_t>(1, length / (1 + static_cast<std::int64_t>(rng() % 1000))); break;
      case 2: c = std::max<std::int64_t>(1, length / (1 + static_cast<std::int64_t>(rng() % 1000)) + 1); break;
      default: c = std::max<std::int64_t>(1, length - static_cast<std::int64_t>(rng() % 3)); break;
    }
    const std::vector<std::int64_t> lengths = {length};
    const batch_counts got = count_from_lengths(lengths, 0, {}, with_windows({window_kind::chunked, c}));
    ASSERT_EQ(got.window_pairs_0, (length / c) * tri(c) + tri(length % c)) << "L " << length << " c " << c;
  }
}

TEST(Windows, BadWindowsAndOverflowingSumsAreErrors) {
  const std::vector<std::int64_t> lengths = {4};
  const auto message = [&](const vision_geometry& g) {
    try {
      count_from_lengths(lengths, 0, {}, g);
    } catch (const error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(with_windows({window_kind::sliding, 0})),
            "vision_geometry.windows[0]: the size must be >= 1 (got 0) and the kind sliding or chunked");
  vision_geometry three = with_windows({window_kind::sliding, 2});
  three.window_count = 3;
  EXPECT_EQ(message(three), "vision_geometry.window_count = 3: expected 0 to 2");
  EXPECT_THROW(count_from_cu_seqlens(std::vector<std::int64_t>{0}, 0, {}, three), error);
  EXPECT_THROW(count_from_positions(std::vector<std::int32_t>{0}, 0, {}, three), error);
  // Sums of window counts are checked like every count (the table's overflow_name names it).
  batch_counts big, one;
  big.window_pairs_1 = std::numeric_limits<std::int64_t>::max();
  one.window_pairs_1 = 1;
  try {
    big += one;
    ADD_FAILURE() << "no overflow";
  } catch (const error& e) {
    EXPECT_STREQ(e.what(), "window pair count overflows a 64-bit count");
  }
  big.window_pairs_1 = 0;
  big.itemless_window_pairs_0 = std::numeric_limits<std::int64_t>::max();
  one.itemless_window_pairs_0 = 1;
  EXPECT_THROW(big += one, error);
}

TEST(Windows, ChunkDivisorGivesTheQuotientOfEveryPositionBelow2To31) {
  // The block kernels form floor(p / c) as (p * magic) >> shift (chunk_divisor_of). Checked against integer
  // division for chunk sizes at and around every power of two, small ones and random ones, at positions around
  // multiples of c (where the quotient steps), near 2^31 (the largest an accepted array holds) and random ones.
  std::vector<std::uint64_t> sizes = {1, 2, 3, 5, 7, 10, 1000, 2048, 4095, 8192, 1000003, (std::uint64_t{1} << 31) - 1};
  for (unsigned l = 1; l < 31; ++l) {
    for (const std::int64_t d : {-1, 0, 1}) sizes.push_back(static_cast<std::uint64_t>((std::int64_t{1} << l) + d));
  }
  std::mt19937_64 rng(20261205);
  for (int i = 0; i < 200; ++i) sizes.push_back(1 + rng() % ((std::uint64_t{1} << 31) - 1));
  const std::uint64_t top = (std::uint64_t{1} << 31) - 1;
  for (const std::uint64_t c : sizes) {
    const detail::chunk_divisor d = detail::chunk_divisor_of(c);
    ASSERT_LT(d.magic, std::uint64_t{1} << 32) << "c " << c;  // one 32 x 32 -> 64-bit multiply
    std::vector<std::uint64_t> positions = {0, 1, top, top - 1, c - 1, c, c + 1, top - top % c, top - top % c - 1};
    for (int k = 0; k < 200; ++k) {
      positions.push_back(rng() % (top + 1));
      const std::uint64_t multiple = c * (1 + rng() % (top / c));  // a multiple of c in [c, 2^31)
      positions.push_back(multiple);
      positions.push_back(multiple - 1);
    }
    for (const std::uint64_t p : positions) {
      if (p > top) continue;
      ASSERT_EQ(d.quotient(p), p / c) << "p " << p << " c " << c;
    }
  }
  EXPECT_THROW(detail::chunk_divisor_of(0), error);
  EXPECT_THROW(detail::chunk_divisor_of(std::uint64_t{1} << 31), error);
}

TEST(Windows, BatchesOf2To32TokensOrMoreAreCountedExactly) {
  // The one-pass count takes batches below 2^32 tokens (which bounds its sums); larger ones are counted document by
  // document with every sum checked. Two documents of L = 2^31 tokens (2^32 in all), per document:
  //   causal        L(L+1)/2 = 2^61 + 2^30
  //   sliding 2^30  w(w+1)/2 + (L - w) w = (2^59 + 2^29) + 2^60
  //   chunked 2^30  q = 2 chunks of c(c+1)/2 = 2^59 + 2^29 each, r = 0: 2^60 + 2^30
  const std::int64_t length = std::int64_t{1} << 31, w = std::int64_t{1} << 30;
  const vision_geometry g = with_windows({window_kind::sliding, w}, {window_kind::chunked, w});
  const std::vector<std::int64_t> lengths = {length, length};
  const std::vector<std::int64_t> cu = {0, length, 2 * length};
  for (const batch_counts& c : {count_from_lengths(lengths, 0, {}, g), count_from_cu_seqlens(cu, 0, {}, g)}) {
    EXPECT_EQ(c.real_tokens, std::int64_t{1} << 32);
    EXPECT_EQ(c.documents, 2);
    EXPECT_EQ(c.causal_pairs, 2 * ((std::int64_t{1} << 61) + (std::int64_t{1} << 30)));
    EXPECT_EQ(c.window_pairs_0, 2 * ((std::int64_t{1} << 59) + (std::int64_t{1} << 29) + (std::int64_t{1} << 60)));
    EXPECT_EQ(c.window_pairs_1, 2 * ((std::int64_t{1} << 60) + (std::int64_t{1} << 30)));
  }
  // One token more than 2^32 - 1 per document overflows the pair count, from either description, naming the entry.
  const std::vector<std::int64_t> too_long = {3, std::int64_t{1} << 32};
  EXPECT_THROW(count_from_lengths(too_long, 0, {}, g), error);
  const std::vector<std::int64_t> decreasing = {0, 5, 4};
  try {
    count_from_cu_seqlens(decreasing, 0, {}, g);
    ADD_FAILURE() << "no error";
  } catch (const error& e) {
    EXPECT_STREQ(e.what(), "cu_seqlens[2] = 4 is less than cu_seqlens[1] = 5 (cu_seqlens must be non-decreasing)");
  }
}

TEST(Windows, APlanCountsAsCountFromDoesForEveryWindowKind) {
  // count_plan_of picks the loop for a geometry's windows once (the throughput plugin's on_microbatch uses it);
  // its functions must give count_from_lengths' and count_from_cu_seqlens' counts and errors, for no window, each
  // kind alone and every pair, over documents around the windows' sizes (the brute force above checks those).
  const std::vector<std::int64_t> lengths = {0, 1, 5, 6, 7, 40, 13};
  std::vector<std::int64_t> cu = {0};
  for (const std::int64_t l : lengths) cu.push_back(cu.back() + l);
  const attention_window kinds[] = {
      {window_kind::sliding, 6}, {window_kind::chunked, 6}, {window_kind::sliding, 1}, {window_kind::chunked, 100}};
  std::vector<vision_geometry> geometries = {vision_geometry{}};
  for (const attention_window& a : kinds) {
    geometries.push_back(with_windows(a));
    for (const attention_window& b : kinds) geometries.push_back(with_windows(a, b));
  }
  for (const vision_geometry& g : geometries) {
    const detail::count_plan plan = detail::count_plan_of(g);
    EXPECT_EQ(plan.from_lengths(lengths, 3, {}, g), count_from_lengths(lengths, 3, {}, g));
    EXPECT_EQ(plan.from_cu_seqlens(cu, 3, {}, g), count_from_cu_seqlens(cu, 3, {}, g));
    EXPECT_EQ(plan.from_cu_seqlens(cu, 3, {}, g).window_pairs_0, count_from_lengths(lengths, 3, {}, g).window_pairs_0);
    const std::vector<std::int64_t> negative = {4, -1};
    EXPECT_THROW(plan.from_lengths(negative, 0, {}, g), error);
    EXPECT_THROW(plan.from_lengths(lengths, -1, {}, g), error);
  }
  EXPECT_THROW(detail::count_plan_of(with_windows({window_kind::sliding, 0})), error);
}

}  // namespace
