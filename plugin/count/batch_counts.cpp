// plugin/count/batch_counts.cpp — the exact unit counts of a micro-batch (flopmeter/flop_model.h batch_counts):
// tokens, documents and causal pairs from the three ways a trainer describes documents, patches and vision
// pairs from the image grids (vision_counts.cpp), and their overflow-checked sums. Positions are scanned in
// positions_scan.cpp.
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "arch/architecture.h"
#include "count/count_fields.h"
#include "count/count_plan.h"
#include "count/positions_scan.h"
#include "count/vision_counts.h"
#include "flopmeter/array_view.h"
#include "flopmeter/error.h"
#include "flopmeter/flop_model.h"

namespace flopmeter {
namespace {

std::int64_t checked_add(std::int64_t a, std::int64_t b, const char* what) {
  std::int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) {
    throw error(std::string(what) + " overflows a 64-bit count");
  }
  return sum;
}

// The slow path of batch_counts::operator+=: which count overflows, in the table's order, the device tokens
// (real + padding) checked after the padding (the first checked_add that overflows throws, naming it).
// Kept out of line and cold: inlined, its string building made the hot path spill registers to the stack.
[[noreturn, gnu::noinline, gnu::cold]] void throw_count_overflow(const batch_counts& a, const batch_counts& o) {
  batch_counts sum;
  for (const detail::count_field& field : detail::kCountFields) {
    sum.*field.member = checked_add(a.*field.member, o.*field.member, field.overflow_name);
    if (field.member == &batch_counts::padding_tokens) {
      checked_add(sum.real_tokens, sum.padding_tokens, "device token count");
    }
  }
  throw error("a batch count overflows a 64-bit count");  // not reached: one of the sums above overflows
}

}  // namespace

batch_counts& batch_counts::operator+=(const batch_counts& o) {
  // The hot path (on_microbatch adds every batch): the sums into a copy, leaving at the first overflow for the
  // slow path, which names the count; *this is unchanged then.
  batch_counts sum = *this;
  std::int64_t device = 0;
  const auto add_overflows = [&](auto i) {
    constexpr std::int64_t batch_counts::*member = detail::kCountMember<decltype(i)::value>;
    return __builtin_add_overflow(sum.*member, o.*member, &(sum.*member));
  };
  if (detail::any_count_field(add_overflows) || __builtin_add_overflow(sum.real_tokens, sum.padding_tokens, &device)) {
    throw_count_overflow(*this, o);
  }
  *this = sum;
  return *this;
}

bool operator==(const batch_counts& a, const batch_counts& b) {
  for (const detail::count_field& field : detail::kCountFields) {
    if (a.*field.member != b.*field.member) return false;
  }
  return true;
}

namespace {

void check_padding(std::int64_t padding_tokens) {
  if (padding_tokens < 0) {
    throw error("padding_tokens must be >= 0 (got " + std::to_string(padding_tokens) + ")");
  }
}

// Sets the padding once the documents are counted; real + padding (the device tokens) must fit too.
void set_padding(batch_counts& counts, std::int64_t padding_tokens) {
  std::int64_t device_tokens = 0;
  if (__builtin_add_overflow(counts.real_tokens, padding_tokens, &device_tokens)) {
    throw error("real tokens + padding_tokens overflows a 64-bit count");
  }
  counts.padding_tokens = padding_tokens;
}

// Adds one document of `length` tokens: L tokens, L(L+1)/2 causal pairs. The hot path allocates nothing:
// messages are built only on the error path.
[[noreturn]] void document_error(const char* source, std::size_t index, std::int64_t length, const char* what) {
  throw error(std::string(source) + "[" + std::to_string(index) + "] = " + std::to_string(length) + ": " + what);
}

void add_document(batch_counts& counts, std::int64_t length, std::size_t index, const char* source) {
  if (length < 0) {
    throw error(std::string(source) + "[" + std::to_string(index) + "]: document length must be >= 0 (got " +
                std::to_string(length) + ")");
  }
  // L(L+1)/2 without forming L(L+1): one of L and L+1 is even, so halve that one first. The pair count fits
  // int64 up to L = 2^32 - 1 (L(L+1) itself would overflow from L = 3,037,000,500); check it exactly.
  std::int64_t next = 0, pairs = 0;
  if (__builtin_add_overflow(length, 1, &next) ||
      __builtin_mul_overflow(length % 2 == 0 ? length / 2 : length, length % 2 == 0 ? next : next / 2, &pairs)) {
    document_error(source, index, length, "causal pair count overflows a 64-bit count");
  }
  if (__builtin_add_overflow(counts.real_tokens, length, &counts.real_tokens) ||
      __builtin_add_overflow(counts.causal_pairs, pairs, &counts.causal_pairs)) {
    document_error(source, index, length, "the batch's token or pair count overflows a 64-bit count");
  }
  counts.documents += 1;
}

// ---- attention windows (flop_model.h batch_counts::window_pairs_*) ----------------------------------------------
//
// A window's pairs never exceed the causal pairs: query i of a document attends min(i + 1, w) keys (sliding) or
// (i mod c) + 1 keys (chunked), at most i + 1. So once a batch's causal pair count fits int64 (checked as each
// document is added) every window count and every partial sum does too, and none is checked again.

// Throws when the geometry's windows are not what the count functions can count (the slow path of check_windows).
[[noreturn, gnu::noinline, gnu::cold]] void throw_bad_windows(const vision_geometry& g) {
  if (g.window_count < 0 || g.window_count > static_cast<std::int64_t>(kMaxAttentionWindows)) {
    throw error("vision_geometry.window_count = " + std::to_string(g.window_count) + ": expected 0 to " +
                std::to_string(kMaxAttentionWindows));
  }
  for (std::int64_t k = 0; k < g.window_count; ++k) {
    const attention_window& w = g.windows[k];
    if (w.size < 1 || (w.kind != window_kind::sliding && w.kind != window_kind::chunked)) {
      throw error("vision_geometry.windows[" + std::to_string(k) + "]: the size must be >= 1 (got " +
                  std::to_string(w.size) + ") and the kind sliding or chunked");
    }
  }
  throw error("vision_geometry: bad windows");  // not reached: one of the checks above throws
}

// Only called when the geometry has windows: one or two, each of size >= 1 and a known kind. Inline, the
// messages out of line (measured: 39 instructions per call as a function, most of them its frame).
inline void check_windows(const vision_geometry& g) {
  const auto ok = [](const attention_window& w) {
    return w.size >= 1 && (w.kind == window_kind::sliding || w.kind == window_kind::chunked);
  };
  static_assert(kMaxAttentionWindows == 2, "check_windows checks two windows");
  if (!((g.window_count == 1 && ok(g.windows[0])) || (g.window_count == 2 && ok(g.windows[0]) && ok(g.windows[1])))) {
    throw_bad_windows(g);
  }
}

// ---- the one pass over documents ----------------------------------------------------------------------------
//
// A valid batch is counted by one pass with no branch per document on its validity: each length is formed in
// wrapping uint64 arithmetic and OR'ed into `all_bits`, so that every length lies in [0, 2^32) exactly when
// bits 32..63 of the OR are 0 (a negative length has bit 63 set, a decreasing cu_seqlens wraps to >= 2^32, see
// count_cu_seqlens). A document of L < 2^32 tokens then has L(L+1) < 2^64 (formed in uint64 without a check) and the
// pass sums the doubled counts, halved once at the end. The pass also requires the batch's tokens T = sum of L
// below 2^32 (OR'ed in with the lengths; at most 2^31 documents, so the sum of lengths below 2^32 cannot wrap),
// which bounds every sum without a check per document:
//   causal     sum of L(L+1) = sum of L^2 + sum of L <= T^2 + T < 2^64: no wrap, and the halved sum fits int64.
//   windows    per window a sum of doubled pairs, at most L(L+1) per document (a window's pairs are at most the
//              causal ones), so at most the causal sum.
// Anything else (a length outside [0, 2^32), 2^32 tokens or more in one micro-batch) sends the batch to the
// checked path (count_lengths_checked, count_cu_seqlens_checked), which counts it again document by document,
// every sum checked, and throws the exact error naming the entry. A batch the fast pass accepts is one the checked
// path accepts, with the same counts; a batch of 2^32 tokens or more is counted exactly by the checked path.
constexpr std::size_t kFastMaxDocuments = std::size_t{1} << 31;

// m(m+1) for m < 2^32 (< 2^64); wraps harmlessly for larger m (the pass rejects those afterwards).
inline std::uint64_t twice_triangle(std::uint64_t m) { return m * (m + 1); }

// Sliding w: query i attends min(i + 1, w) keys. Over a document of L tokens that is every causal pair but those
// of the queries past the first w: query i >= w misses i + 1 - w keys, 1 + 2 + ... + (L - w) = (L-w)(L-w+1)/2 in
// all. So pairs = L(L+1)/2 - d(d+1)/2 with d = max(L - w, 0) (L <= w: L(L+1)/2; otherwise
// L(L+1)/2 - (L-w)(L-w+1)/2 = w(w+1)/2 + (L - w) * w, the definition's form). The pass sums the doubled
// excess d(d+1) <= L(L+1); the window's doubled pairs are the doubled causal sum minus it.
struct sliding_counter {
  std::uint64_t size;
  explicit sliding_counter(const attention_window& w) : size(static_cast<std::uint64_t>(w.size)) {}
  // The doubled pairs a document of `length` tokens does not have under the window.
  // d = max(L - w, 0) in signed arithmetic (both below 2^63 for a valid length), a conditional move rather than a
  // branch per document.
  std::uint64_t twice_excess(std::uint64_t length) const {
    const std::int64_t over = static_cast<std::int64_t>(length - size);
    return twice_triangle(static_cast<std::uint64_t>(over > 0 ? over : 0));
  }
};

// Chunked c: q = L / c whole chunks of c(c+1)/2 pairs each and a last chunk of r = L - q c tokens, r(r+1)/2
// pairs; doubled, q c(c+1) + r(r+1) <= L(L+1). A chunk of c >= 2^32 - 1 holds any document the pass accepts
// (L <= 2^32 - 1), as c = 2^32 - 1 does: the size is clamped there, so that c(c+1) < 2^64.
// q = floor(L * reciprocal) exactly, no division per document: the reciprocal is 1/c times a factor in
// [1 + 2^-51, 1 + 2^-49] (2^-50 and two roundings of at most 2^-53), and the product rounds once more, so for
// 1 <= L < 2^48 L * reciprocal lies in (L/c, (L/c)(1 + 2^-48)]: above L/c, and below floor(L/c) + 1, since
// L/c <= floor(L/c) + 1 - 1/c and (L/c) 2^-48 < 1/c. (L = 0 gives 0.) L is converted from its low 32 bits, so
// that a length the pass will reject converts and multiplies harmlessly too.
struct chunked_counter {
  std::uint64_t size;
  std::uint64_t twice_chunk;  // c(c+1)
  double reciprocal;
  static constexpr std::uint64_t kLargest = (std::uint64_t{1} << 32) - 1;
  explicit chunked_counter(const attention_window& w)
      : size(static_cast<std::uint64_t>(w.size) < kLargest ? static_cast<std::uint64_t>(w.size) : kLargest),
        twice_chunk(twice_triangle(size)),
        reciprocal(1.0 / static_cast<double>(size) * (1.0 + 0x1p-50)) {}
  std::uint64_t twice_pairs(std::uint64_t length) const {
    // Through int64 (the product is below 2^33): a double to uint64 conversion costs a compare and a branch.
    const auto q = static_cast<std::uint64_t>(
        static_cast<std::int64_t>(static_cast<double>(static_cast<std::uint32_t>(length)) * reciprocal));
    return q * twice_chunk + twice_triangle(length - q * size);
  }
};

// The window sums of the pass, for the window kinds fixed at compile time (no branch per document on them).
// `no_windows` is full attention: the pass it is given compiles to the pass of a model without windows.
struct no_windows {
  void operator()(std::uint64_t /*length*/) {}
  void store(batch_counts& /*counts*/, std::uint64_t /*twice_causal*/) const {}
};
template <window_kind K>
using counter_of = std::conditional_t<K == window_kind::sliding, sliding_counter, chunked_counter>;
template <window_kind K0, window_kind K1, std::int64_t N>  // N = 1 or 2 windows
struct window_sums {
  counter_of<K0> w0;
  counter_of<K1> w1;
  std::uint64_t sum0 = 0, sum1 = 0;  // doubled: the excess for a sliding window, the pairs for a chunked one
  explicit window_sums(const vision_geometry& g) : w0(g.windows[0]), w1(g.windows[N - 1]) {}
  template <window_kind K>
  static std::uint64_t add(const counter_of<K>& w, std::uint64_t length) {
    if constexpr (K == window_kind::sliding) {
      return w.twice_excess(length);
    } else {
      return w.twice_pairs(length);
    }
  }
  void operator()(std::uint64_t length) {
    sum0 += add<K0>(w0, length);
    if constexpr (N == 2) sum1 += add<K1>(w1, length);
  }
  template <window_kind K>
  static std::int64_t pairs(std::uint64_t sum, std::uint64_t twice_causal) {
    return static_cast<std::int64_t>((K == window_kind::sliding ? twice_causal - sum : sum) / 2);
  }
  void store(batch_counts& counts, std::uint64_t twice_causal) const {
    counts.*detail::kWindowPairs[0] = pairs<K0>(sum0, twice_causal);
    if constexpr (N == 2) counts.*detail::kWindowPairs[1] = pairs<K1>(sum1, twice_causal);
  }
};

// The pass over `n` documents, the length of document i being length_at(i) (wrapping uint64). Returns false,
// leaving `counts` alone, when the batch must go to the checked path; otherwise sets the tokens, documents,
// causal and window pairs.
template <class LengthAt, class Windows>
[[gnu::always_inline]] inline bool fast_count(std::size_t n, LengthAt length_at, Windows& windows,
                                              batch_counts& counts) {
  if (n > kFastMaxDocuments) return false;
  std::uint64_t all_bits = 0, tokens = 0, twice_causal = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t length = length_at(i);
    all_bits |= length;
    tokens += length;
    twice_causal += twice_triangle(length);
    windows(length);
  }
  if (((all_bits | tokens) >> 32) != 0) return false;
  counts.real_tokens = static_cast<std::int64_t>(tokens);
  counts.documents = static_cast<std::int64_t>(n);
  counts.causal_pairs = static_cast<std::int64_t>(twice_causal / 2);
  windows.store(counts, twice_causal);
  return true;
}

// The checked path's windows: the count of one window for one document, from the fast pass's own counters (one
// document is a pass of its own).
std::int64_t window_pairs_of(const attention_window& w, std::int64_t length) {
  const auto l = static_cast<std::uint64_t>(length);
  if (w.kind == window_kind::sliding) {
    return static_cast<std::int64_t>((twice_triangle(l) - sliding_counter(w).twice_excess(l)) / 2);
  }
  return static_cast<std::int64_t>(chunked_counter(w).twice_pairs(l) / 2);
}

}  // namespace

namespace {

// The checked paths: document by document, every step checked, so that a bad batch throws the error naming its
// entry (the fast pass only says that something is wrong). They count a valid batch exactly as the fast pass does.
void add_windows_checked(batch_counts& counts, const vision_geometry& geometry, std::int64_t length) {
  for (std::int64_t k = 0; k < geometry.window_count; ++k) {
    counts.*detail::kWindowPairs[k] += window_pairs_of(geometry.windows[k], length);  // fits: see fast_count
  }
}

[[gnu::noinline, gnu::cold]] batch_counts count_lengths_checked(array_view<std::int64_t> document_lengths,
                                                                const vision_geometry& geometry) {
  batch_counts counts;
  for (std::size_t i = 0; i < document_lengths.size(); ++i) {
    add_document(counts, document_lengths[i], i, "document_lengths");
    add_windows_checked(counts, geometry, document_lengths[i]);
  }
  return counts;
}

[[gnu::noinline, gnu::cold]] batch_counts count_cu_seqlens_checked(array_view<std::int64_t> cu_seqlens,
                                                                   const vision_geometry& geometry) {
  batch_counts counts;
  if (!cu_seqlens.empty() && cu_seqlens[0] != 0) {
    throw error("cu_seqlens[0] must be 0 (got " + std::to_string(cu_seqlens[0]) + ")");
  }
  for (std::size_t i = 1; i < cu_seqlens.size(); ++i) {
    if (cu_seqlens[i] < cu_seqlens[i - 1]) {
      throw error("cu_seqlens[" + std::to_string(i) + "] = " + std::to_string(cu_seqlens[i]) +
                  " is less than cu_seqlens[" + std::to_string(i - 1) + "] = " + std::to_string(cu_seqlens[i - 1]) +
                  " (cu_seqlens must be non-decreasing)");
    }
    std::int64_t length = 0;
    if (__builtin_sub_overflow(cu_seqlens[i], cu_seqlens[i - 1], &length)) {
      throw error("cu_seqlens[" + std::to_string(i) + "]: document length overflows a 64-bit count");
    }
    add_document(counts, length, i - 1, "cu_seqlens document");
    add_windows_checked(counts, geometry, length);
  }
  return counts;
}

// cu_seqlens longer than this take the checked path: the fast pass's proof that a decrease wraps to a length of
// at least 2^32 needs cu_seqlens[i - 1] < (i - 1) 2^32 + 2^32 <= 2^63 - 2^32 (every earlier length below 2^32),
// so i < 2^31 - 1. (16 GiB of cu_seqlens.)
constexpr std::size_t kFastMaxCuSeqlens = (std::size_t{1} << 31) - 2;

// Inlined into each caller (count_from_*, the plans' functions): a call more costs the hook some 30 instructions.
template <class Windows>
[[gnu::always_inline]] inline batch_counts count_lengths(array_view<std::int64_t> document_lengths,
                                                         std::int64_t padding_tokens, array_view<image_grid> grids,
                                                         const vision_geometry& geometry, Windows windows) {
  batch_counts counts;
  const std::int64_t* lengths = document_lengths.data();
  const auto length_at = [lengths](std::size_t i) { return static_cast<std::uint64_t>(lengths[i]); };
  if (!fast_count(document_lengths.size(), length_at, windows, counts)) {
    counts = count_lengths_checked(document_lengths, geometry);
  }
  set_padding(counts, padding_tokens);
  detail::add_grids(counts, grids, geometry);
  return counts;
}

// Document i is cu_seqlens[i + 1] - cu_seqlens[i], in wrapping uint64: with cu_seqlens[0] = 0, the first
// document that decreases (or grows by 2^32 or more) wraps to a length of at least 2^32, which the pass refuses
// (kFastMaxCuSeqlens); a decrease after it does not matter, the pass is refused already.
template <class Windows>
[[gnu::always_inline]] inline batch_counts count_cu_seqlens(array_view<std::int64_t> cu_seqlens,
                                                            std::int64_t padding_tokens, array_view<image_grid> grids,
                                                            const vision_geometry& geometry, Windows windows) {
  batch_counts counts;
  const std::int64_t* cu = cu_seqlens.data();
  const auto length_at = [cu](std::size_t i) {
    return static_cast<std::uint64_t>(cu[i + 1]) - static_cast<std::uint64_t>(cu[i]);
  };
  const std::size_t documents = cu_seqlens.size() < 2 ? 0 : cu_seqlens.size() - 1;
  if (cu_seqlens.empty() || cu[0] != 0 || cu_seqlens.size() > kFastMaxCuSeqlens ||
      !fast_count(documents, length_at, windows, counts)) {
    counts = count_cu_seqlens_checked(cu_seqlens, geometry);
  }
  set_padding(counts, padding_tokens);
  detail::add_grids(counts, grids, geometry);
  return counts;
}

// f(sums) with the window_sums a geometry with windows needs. Throws for bad windows.
template <class F>
batch_counts with_window_sums(const vision_geometry& g, F&& f) {
  check_windows(g);
  constexpr window_kind S = window_kind::sliding, C = window_kind::chunked;
  const bool chunked0 = g.windows[0].kind == C, chunked1 = g.window_count == 2 && g.windows[1].kind == C;
  static_assert(kMaxAttentionWindows == 2, "with_window_sums dispatches one or two windows");
  if (g.window_count == 1) return chunked0 ? f(window_sums<C, S, 1>(g)) : f(window_sums<S, S, 1>(g));
  if (chunked0) return chunked1 ? f(window_sums<C, C, 2>(g)) : f(window_sums<C, S, 2>(g));
  return chunked1 ? f(window_sums<S, C, 2>(g)) : f(window_sums<S, S, 2>(g));
}

// The windowed counts out of line: count_from_* without windows then is the pass it was, its arguments in
// registers (the dispatch's lambda takes them by reference, which made the full-attention path store them).
[[gnu::noinline]] batch_counts count_lengths_windowed(array_view<std::int64_t> document_lengths,
                                                      std::int64_t padding_tokens, array_view<image_grid> grids,
                                                      const vision_geometry& geometry) {
  return with_window_sums(geometry, [&](auto windows) {
    return count_lengths(document_lengths, padding_tokens, grids, geometry, windows);
  });
}
[[gnu::noinline]] batch_counts count_cu_seqlens_windowed(array_view<std::int64_t> cu_seqlens,
                                                         std::int64_t padding_tokens, array_view<image_grid> grids,
                                                         const vision_geometry& geometry) {
  return with_window_sums(
      geometry, [&](auto windows) { return count_cu_seqlens(cu_seqlens, padding_tokens, grids, geometry, windows); });
}

}  // namespace

batch_counts count_from_lengths(array_view<std::int64_t> document_lengths, std::int64_t padding_tokens,
                                array_view<image_grid> grids, const vision_geometry& geometry) {
  check_padding(padding_tokens);
  if (geometry.window_count == 0) return count_lengths(document_lengths, padding_tokens, grids, geometry, no_windows{});
  return count_lengths_windowed(document_lengths, padding_tokens, grids, geometry);
}

batch_counts count_from_cu_seqlens(array_view<std::int64_t> cu_seqlens, std::int64_t padding_tokens,
                                   array_view<image_grid> grids, const vision_geometry& geometry) {
  check_padding(padding_tokens);
  if (geometry.window_count == 0) return count_cu_seqlens(cu_seqlens, padding_tokens, grids, geometry, no_windows{});
  return count_cu_seqlens_windowed(cu_seqlens, padding_tokens, grids, geometry);
}

namespace {

// The loops a count_plan points at: one per window kinds, the geometry's windows checked when the plan was made.
template <class Windows>
Windows windows_of(const vision_geometry& geometry) {
  if constexpr (std::is_same_v<Windows, no_windows>) {
    (void)geometry;
    return no_windows{};
  } else {
    return Windows(geometry);
  }
}
template <class Windows>
batch_counts planned_lengths(array_view<std::int64_t> document_lengths, std::int64_t padding_tokens,
                             array_view<image_grid> grids, const vision_geometry& geometry) {
  check_padding(padding_tokens);
  return count_lengths(document_lengths, padding_tokens, grids, geometry, windows_of<Windows>(geometry));
}
template <class Windows>
batch_counts planned_cu_seqlens(array_view<std::int64_t> cu_seqlens, std::int64_t padding_tokens,
                                array_view<image_grid> grids, const vision_geometry& geometry) {
  check_padding(padding_tokens);
  return count_cu_seqlens(cu_seqlens, padding_tokens, grids, geometry, windows_of<Windows>(geometry));
}
template <class Windows>
detail::count_plan plan_for() {
  detail::count_plan plan;
  plan.from_lengths = planned_lengths<Windows>;
  plan.from_cu_seqlens = planned_cu_seqlens<Windows>;
  return plan;
}

}  // namespace

detail::count_plan detail::count_plan_of(const vision_geometry& g) {
  if (g.window_count == 0) return plan_for<no_windows>();
  check_windows(g);
  constexpr window_kind S = window_kind::sliding, C = window_kind::chunked;
  const bool chunked0 = g.windows[0].kind == C, chunked1 = g.window_count == 2 && g.windows[1].kind == C;
  static_assert(kMaxAttentionWindows == 2, "count_plan_of plans one or two windows");
  if (g.window_count == 1) return chunked0 ? plan_for<window_sums<C, S, 1>>() : plan_for<window_sums<S, S, 1>>();
  if (chunked0) return chunked1 ? plan_for<window_sums<C, C, 2>>() : plan_for<window_sums<C, S, 2>>();
  return chunked1 ? plan_for<window_sums<S, C, 2>>() : plan_for<window_sums<S, S, 2>>();
}

namespace {
// Positions are scanned in count/positions_scan.cpp (one entry per token, so it runs at memory speed).
template <class T>
batch_counts count_positions(array_view<T> positions, std::int64_t padding_tokens, array_view<image_grid> grids,
                             const vision_geometry& geometry) {
  check_padding(padding_tokens);
  if (geometry.window_count != 0) check_windows(geometry);
  const detail::positions_totals totals = detail::scan_positions(
      positions, array_view<attention_window>(geometry.windows, static_cast<std::size_t>(geometry.window_count)));
  batch_counts counts;
  counts.real_tokens = totals.tokens;
  counts.documents = totals.documents;
  counts.causal_pairs = totals.causal_pairs;
  for (std::size_t k = 0; k < kMaxAttentionWindows; ++k) counts.*detail::kWindowPairs[k] = totals.window_pairs[k];
  set_padding(counts, padding_tokens);
  detail::add_grids(counts, grids, geometry);
  return counts;
}
}  // namespace

batch_counts count_from_positions(array_view<std::int64_t> positions, std::int64_t padding_tokens,
                                  array_view<image_grid> grids, const vision_geometry& geometry) {
  return count_positions(positions, padding_tokens, grids, geometry);
}
batch_counts count_from_positions(array_view<std::int32_t> positions, std::int64_t padding_tokens,
                                  array_view<image_grid> grids, const vision_geometry& geometry) {
  return count_positions(positions, padding_tokens, grids, geometry);
}

}  // namespace flopmeter
