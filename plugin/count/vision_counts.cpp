// plugin/count/vision_counts.cpp — the vision counts of a micro-batch (vision_counts.h): the geometry a model's
// vision tower and windows give (flopmeter/flop_model.h geometry_of), and the patches, merged tokens and ViT pairs of
// its image grids, overflow-checked.
#include "count/vision_counts.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "arch/architecture.h"
#include "count/count_fields.h"
#include "flopmeter/error.h"
#include "flopmeter/flop_model.h"

namespace flopmeter {

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
  // The decoder's distinct windows in order of first use (arch/architecture.cpp); the coefficients'
  // window_attn_pair[k] bills window k.
  const std::vector<attention_window> windows = detail::attention_windows(spec);
  for (const attention_window& w : windows) {
    if (g.window_count == static_cast<std::int64_t>(kMaxAttentionWindows)) break;  // the rules refuse more
    g.windows[g.window_count++] = w;
  }
  return g;
}

namespace {

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

}  // namespace

namespace detail {

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

}  // namespace detail
}  // namespace flopmeter
