// plugin/core/batch_counts.cpp — the exact unit counts of a micro-batch (flopmeter/flop_model.h batch_counts):
// tokens, documents and causal pairs from the three ways a trainer describes documents, patches and vision
// pairs from the image grids, and their overflow-checked sums. Positions are scanned in positions_scan.cpp.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/architecture.h"
#include "core/count_fields.h"
#include "core/positions_scan.h"
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

vision_geometry geometry_of(const model_spec& spec) {
  vision_geometry g;
  if (spec.vision) {
    const vision_spec& v = *spec.vision;
    g.has_vision = true;
    g.spatial_merge_size = v.spatial_merge_size;
    if (v.num_window_blocks() > 0 && v.patch_size > 0 && v.spatial_merge_size > 0) {
      g.vision_window = v.window_size / (v.patch_size * v.spatial_merge_size);
    }
    g.cls_tokens = v.cls_token ? 1 : 0;
    if (v.image_size > 0 && v.patch_size > 0) g.segment_side = v.image_size / v.patch_size;
    g.image_block = v.bidirectional_image;
  }
  // The decoder's distinct windows in order of first use (core/architecture.cpp); the coefficients'
  // window_attn_pair[k] bills window k.
  const std::vector<attention_window> windows = detail::attention_windows(spec);
  for (const attention_window& w : windows) {
    if (g.window_count == static_cast<std::int64_t>(kMaxAttentionWindows)) break;  // the rules refuse more
    g.windows[g.window_count++] = w;
  }
  return g;
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

// m(m+1)/2 for 0 <= m <= 2^32 - 1: m(m+1) < 2^64 fits uint64.
std::int64_t triangle(std::int64_t m) {
  const auto u = static_cast<std::uint64_t>(m);
  return static_cast<std::int64_t>(u * (u + 1) / 2);
}

// A window with what its per-document count needs precomputed, so that the loop over documents has no branch on
// the kind and no division (a 64-bit division per document was most of the windows' cost in
// bench_on_microbatch's BM_count_cu_seqlens).
struct window_counter {
  std::int64_t size;
  std::int64_t chunk_pairs;  // chunked: c(c+1)/2 for c < 2^32 (a larger c is beyond every document: never used)
  double reciprocal;         // chunked: 1/c rounded up by (1 + 2^-50), see chunked()

  // Only a chunked window needs chunk_pairs and the reciprocal (a division): a sliding one skips them.
  window_counter(const attention_window& w, bool chunked)
      : size(w.size),
        chunk_pairs(chunked && w.size < (std::int64_t{1} << 32) ? triangle(w.size) : 0),
        reciprocal(chunked ? 1.0 / static_cast<double>(w.size) * (1.0 + 0x1p-50) : 0) {}

  // Sliding w, a document of L tokens (0 <= L <= 2^32 - 1, as add_document allows): query i attends
  // min(i + 1, w) keys. With m = min(L, w) the first m queries attend 1 .. m keys, m(m+1)/2 pairs, the other
  // L - m attend m each: m(m+1)/2 + (L - m) * m = m (2L - m + 1) / 2 (L <= w: L(L+1)/2; otherwise
  // w(w+1)/2 + (L - w) * w). The product is at most L(L+1) < 2^64: formed in uint64.
  std::int64_t sliding(std::int64_t length) const {
    const auto l = static_cast<std::uint64_t>(length);
    const auto m = static_cast<std::uint64_t>(length < size ? length : size);
    return static_cast<std::int64_t>(m * (2 * l - m + 1) / 2);
  }

  // Chunked c: q = L / c whole chunks of c(c+1)/2 pairs each and a last chunk of r = L - q c tokens, r(r+1)/2
  // pairs. c >= L: one chunk, L(L+1)/2. Otherwise c < L < 2^32 and q = floor(L * reciprocal) exactly: the
  // reciprocal is 1/c times a factor in [1 + 2^-51, 1 + 2^-49] (2^-50 and two roundings of at most 2^-53), and
  // the product rounds once more, so L * reciprocal lies in (L/c, (L/c)(1 + 2^-48)]: above L/c, and below
  // floor(L/c) + 1, since L/c <= floor(L/c) + 1 - 1/c and (L/c) 2^-48 < 1/c while L < 2^48.
  std::int64_t chunked(std::int64_t length) const {
    if (size >= length) return triangle(length);
    const auto q = static_cast<std::int64_t>(static_cast<double>(length) * reciprocal);
    return q * chunk_pairs + triangle(length - q * size);
  }

  template <window_kind K>
  std::int64_t pairs(std::int64_t length) const {
    return K == window_kind::sliding ? sliding(length) : chunked(length);
  }
};

// The window sums of a count over documents, added to as each document is (one pass: each length read once,
// the kinds fixed at compile time, no branch per document on them). `no_windows` is full attention: the loop it
// is given compiles to the loop of a model without windows.
struct no_windows {
  void operator()(std::int64_t /*length*/) {}
  void store(batch_counts& /*counts*/) const {}
};
template <window_kind K0, window_kind K1, std::int64_t N>  // N = 1 or 2 windows
struct window_sums {
  window_counter w0, w1;
  std::int64_t sum0 = 0, sum1 = 0;
  explicit window_sums(const vision_geometry& g)
      : w0(g.windows[0], K0 == window_kind::chunked), w1(g.windows[N - 1], K1 == window_kind::chunked) {}
  // `length` was validated by add_document: in [0, 2^32 - 1], and the sums fit (see above).
  void operator()(std::int64_t length) {
    sum0 += w0.pairs<K0>(length);
    if constexpr (N == 2) sum1 += w1.pairs<K1>(length);
  }
  void store(batch_counts& counts) const {
    counts.*detail::kWindowPairs[0] = sum0;
    counts.*detail::kWindowPairs[1] = sum1;
  }
};

// f(sums) with the window_sums a geometry with windows needs (count_from_* call f(no_windows{}) themselves
// without windows, so that the full-attention path is the loop it was). Throws for bad windows.
template <class F>
[[gnu::noinline]] batch_counts with_window_sums(const vision_geometry& g, F&& f) {
  check_windows(g);
  constexpr window_kind S = window_kind::sliding, C = window_kind::chunked;
  const bool chunked0 = g.windows[0].kind == C, chunked1 = g.window_count == 2 && g.windows[1].kind == C;
  static_assert(kMaxAttentionWindows == 2, "with_window_sums dispatches one or two windows");
  if (g.window_count == 1) return chunked0 ? f(window_sums<C, S, 1>(g)) : f(window_sums<S, S, 1>(g));
  if (chunked0) return chunked1 ? f(window_sums<C, C, 2>(g)) : f(window_sums<C, S, 2>(g));
  return chunked1 ? f(window_sums<S, C, 2>(g)) : f(window_sums<S, S, 2>(g));
}

// The vision counts of one item beyond patches and pairs (geometry_of: Qwen2.5-VL windows, InternViT's CLS token,
// Gemma 3's image blocks). Closed forms, no loop over patches or windows:
//   window pairs   a segment's merged grid H x W (H = h/m, W = w/m) is cut into windows of v x v merged tokens from
//                  the top left, the last row of windows H mod v tall and the last column W mod v wide (transformers'
//                  get_window_index). Window (i, j) holds m^2 * a_i * b_j patches, a_i the heights (v, ..., v,
//                  H mod v), b_j the widths, so the sum over windows of (patches)^2 factors:
//                  m^4 * (sum a_i^2) * (sum b_j^2) = m^4 * (floor(H/v) v^2 + (H mod v)^2) * (floor(W/v) v^2 +
//                  (W mod v)^2), per segment, times t.
//   CLS tokens     c per segment: t*c tokens through every block; the per-segment pairs are t*(h*w + c)^2.
//   image blocks   a segment's n = h*w/m^2 merged tokens attend to each other in the decoder: n^2 pairs where the
//                  causal mask has n(n+1)/2, so n(n-1)/2 more per segment, times t, wherever the image sits.
//
// None can overflow once the item's per-segment pairs t*(h*w + c)^2 and the batch's sums of them and of the
// patches are checked (add_grids does that first): a segment's window pairs are a sum of squares of parts of its
// h*w patches, at most (h*w)^2; its image-block pairs n(n-1)/2 < (h*w)^2; its CLS tokens c <= h*w. So the sums
// below stay under sums already known to fit, and are formed without checks (this runs per item on the hook).
inline void add_vision_extras(batch_counts& counts, const image_grid& g, std::int64_t frame,
                              const vision_geometry& geometry) {
  const std::int64_t m = geometry.spatial_merge_size;
  if (geometry.vision_window > 0) {
    const std::int64_t v = geometry.vision_window;
    std::int64_t H = 0, W = 0, qh = 0, qw = 0;
    const auto is_power_of_two = [](std::int64_t x) { return (x & (x - 1)) == 0; };
    if (is_power_of_two(v) && is_power_of_two(m)) {
      // Every released Qwen2.5-VL (m = 2, v = 4): shifts instead of four divisions per item.
      const int sm = __builtin_ctzll(static_cast<unsigned long long>(m));
      const int sv = __builtin_ctzll(static_cast<unsigned long long>(v));
      H = g.h >> sm;
      W = g.w >> sm;
      qh = H >> sv;
      qw = W >> sv;
    } else {
      H = g.h / m;
      W = g.w / m;
      qh = H / v;
      qw = W / v;
    }
    const std::int64_t rh = H - qh * v, rw = W - qw * v;
    // m^2 * rows is the sum of the squares of the window rows' heights in patches (at most h^2), likewise m^2 * cols
    // (at most w^2): their product, the segment's window pairs, is at most (h*w)^2.
    const std::int64_t rows = qh * v * v + rh * rh, cols = qw * v * v + rw * rw;
    counts.vision_window_pairs += g.t * ((m * m * rows) * (m * m * cols));
  }
  counts.vision_cls_tokens += g.t * geometry.cls_tokens;
  if (geometry.image_block) {
    const std::int64_t n = frame / (m * m);
    counts.image_block_pairs += g.t * (n % 2 == 0 ? (n / 2) * (n - 1) : n * ((n - 1) / 2));
  }
}

// Adds the grids' counts to `counts` (shared by the three count_from_* functions).
void add_grids(batch_counts& counts, array_view<image_grid> grids, const vision_geometry& geometry) {
  if (!grids.empty() && !geometry.has_vision) {
    throw error("the batch has " + std::to_string(grids.size()) + " image grid(s) but the model has no vision tower");
  }
  const std::int64_t m = geometry.spatial_merge_size;
  const std::int64_t c = geometry.cls_tokens;
  const bool extras = geometry.vision_window > 0 || c > 0 || geometry.image_block;
  for (std::size_t i = 0; i < grids.size(); ++i) {
    const image_grid& g = grids[i];
    // Built only on the error path, so a valid batch allocates nothing.
    const auto fail = [&](const std::string& what) {
      throw error("grid_thw[" + std::to_string(i) + "] = (" + std::to_string(g.t) + ", " + std::to_string(g.h) + ", " +
                  std::to_string(g.w) + "): " + what);
    };
    if (g.t < 1 || g.h < 1 || g.w < 1) fail("t, h and w must be >= 1");
    if (g.h % m != 0 || g.w % m != 0) fail("h and w must be multiples of spatial_merge_size " + std::to_string(m));
    if (geometry.segment_side > 0 && (g.h != geometry.segment_side || g.w != geometry.segment_side)) {
      const std::string side = std::to_string(geometry.segment_side);
      fail("not a whole tile: h and w must both be " + side +
           " (image_size / patch_size; an image of n tiles is "
           "the item n x " +
           side + " x " + side + ")");
    }
    std::int64_t frame = 0, patches = 0, segment = 0, frame_squared = 0, per_frame_pairs = 0, whole_pairs = 0;
    if (__builtin_mul_overflow(g.h, g.w, &frame) || __builtin_mul_overflow(g.t, frame, &patches) ||
        __builtin_add_overflow(frame, c, &segment) || __builtin_mul_overflow(segment, segment, &frame_squared) ||
        __builtin_mul_overflow(frame_squared, g.t, &per_frame_pairs) ||
        __builtin_mul_overflow(patches, patches, &whole_pairs)) {
      fail("patch or pair count overflows a 64-bit count");
    }
    if (__builtin_add_overflow(counts.patches, patches, &counts.patches) ||
        __builtin_add_overflow(counts.merged_tokens, patches / (m * m), &counts.merged_tokens) ||
        __builtin_add_overflow(counts.vision_pairs_per_frame, per_frame_pairs, &counts.vision_pairs_per_frame) ||
        __builtin_add_overflow(counts.vision_pairs_whole, whole_pairs, &counts.vision_pairs_whole)) {
      fail("the batch's patch or pair count overflows a 64-bit count");
    }
    if (extras) add_vision_extras(counts, g, frame, geometry);
    counts.items += 1;
  }
  // A micro-batch without images or videos: all of its text work is itemless (regime_coefficients).
  if (counts.items == 0) {
    counts.itemless_device_tokens = counts.real_tokens + counts.padding_tokens;  // checked by set_padding
    counts.itemless_causal_pairs = counts.causal_pairs;
    for (std::size_t k = 0; k < kMaxAttentionWindows; ++k) {
      counts.*detail::kItemlessWindowPairs[k] = counts.*detail::kWindowPairs[k];
    }
  }
}

}  // namespace

namespace {

template <class Windows>
batch_counts count_lengths(array_view<std::int64_t> document_lengths, std::int64_t padding_tokens,
                           array_view<image_grid> grids, const vision_geometry& geometry, Windows windows) {
  batch_counts counts;
  for (std::size_t i = 0; i < document_lengths.size(); ++i) {
    add_document(counts, document_lengths[i], i, "document_lengths");
    windows(document_lengths[i]);
  }
  windows.store(counts);
  set_padding(counts, padding_tokens);
  add_grids(counts, grids, geometry);
  return counts;
}

template <class Windows>
batch_counts count_cu_seqlens(array_view<std::int64_t> cu_seqlens, std::int64_t padding_tokens,
                              array_view<image_grid> grids, const vision_geometry& geometry, Windows windows) {
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
    windows(length);
  }
  windows.store(counts);
  set_padding(counts, padding_tokens);
  add_grids(counts, grids, geometry);
  return counts;
}

}  // namespace

batch_counts count_from_lengths(array_view<std::int64_t> document_lengths, std::int64_t padding_tokens,
                                array_view<image_grid> grids, const vision_geometry& geometry) {
  check_padding(padding_tokens);
  if (geometry.window_count == 0) return count_lengths(document_lengths, padding_tokens, grids, geometry, no_windows{});
  return with_window_sums(geometry, [&](auto windows) {
    return count_lengths(document_lengths, padding_tokens, grids, geometry, windows);
  });
}

batch_counts count_from_cu_seqlens(array_view<std::int64_t> cu_seqlens, std::int64_t padding_tokens,
                                   array_view<image_grid> grids, const vision_geometry& geometry) {
  check_padding(padding_tokens);
  if (geometry.window_count == 0) return count_cu_seqlens(cu_seqlens, padding_tokens, grids, geometry, no_windows{});
  return with_window_sums(
      geometry, [&](auto windows) { return count_cu_seqlens(cu_seqlens, padding_tokens, grids, geometry, windows); });
}

namespace {
// Positions are scanned in core/positions_scan.cpp (one entry per token, so it runs at memory speed).
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
  add_grids(counts, grids, geometry);
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
