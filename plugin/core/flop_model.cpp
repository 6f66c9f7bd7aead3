// The exact FLOP model. Conventions used by every formula below:
//   - A matmul [n x k] @ [k x m] costs 2*n*k*m FLOPs (one multiply-add = 2 FLOPs).
//   - Training costs 3x the forward matmul work: forward, backward w.r.t. activations (dgrad), backward w.r.t.
//     weights (wgrad), each the same size. Hence the factor kTrain = 3 * 2 = 6 per multiply-add.
//   - Only matmul work is counted. Norms, activations, softmax, RoPE, residual adds, the loss and the
//     optimizer are O(tokens * hidden) element-wise work and are left out, as in Megatron and the reference.
#include "flopmeter/flop_model.h"

#include <cstdint>
#include <string>

#include "core/positions_scan.h"
#include "flopmeter/error.h"

namespace flopmeter {
namespace {

__extension__ typedef __int128 int128;

// fwd + dgrad + wgrad (3) x FLOPs per multiply-add (2).
constexpr int128 kTrain = 3 * 2;
// A layer whose input needs no gradient (the first one, on pixels): fwd + wgrad (2) x 2.
constexpr int128 kForwardAndWeightGradient = 2 * 2;

// Coefficients are formed in 128-bit arithmetic from sizes the loader caps at 2^31, so no intermediate can
// overflow; the result must still fit the int64 the public struct holds.
std::int64_t to_coefficient(int128 value, const char* name) {
  if (value > static_cast<int128>(INT64_MAX)) {
    throw error(std::string("flopmeter: coefficient ") + name + " exceeds 2^63 FLOPs; the model sizes are not plausible");
  }
  return static_cast<std::int64_t>(value);
}

// Exact a*b rounded once to double (a, b are exact int64 counts / coefficients).
double exact_product(std::int64_t a, std::int64_t b) {
  const int128 product = static_cast<int128>(a) * static_cast<int128>(b);
  return static_cast<double>(product);
}

std::int64_t checked_add(std::int64_t a, std::int64_t b, const char* what) {
  std::int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) {
    throw error(std::string("flopmeter: ") + what + " overflows a 64-bit count");
  }
  return sum;
}

// Decoder, per token, one full-attention layer: the four projections.
//   q_proj  h -> nh*hd, doubled when the Qwen3.5 output gate is on (the same projection emits the gate)
//   k_proj  h -> nkv*hd,  v_proj h -> nkv*hd
//   o_proj  nh*hd -> h
// multiply-adds per token = h*(nh*hd*(1+gate) + 2*nkv*hd + nh*hd)
int128 full_attention_projection_macs(const text_spec& t) {
  const int128 q = int128{t.num_attention_heads} * t.head_dim * (t.attn_output_gate ? 2 : 1);
  const int128 kv = 2 * int128{t.num_key_value_heads} * t.head_dim;
  const int128 o = int128{t.num_attention_heads} * t.head_dim;
  return t.hidden_size * (q + kv + o);
}

// Decoder, per token, one Gated DeltaNet layer, with Megatron-LM's approximation for the delta rule.
//   in_proj_qkv h -> 2*Hk*dk + Hv*dv;  in_proj_z h -> Hv*dv;  in_proj_a, in_proj_b h -> Hv each
//   depthwise causal conv1d: kernel multiply-adds per channel over the 2*Hk*dk + Hv*dv qkv channels
//   chunked delta rule: Megatron bills 4 matmul-like products per value head of size dk x dv per token
//     (K K^T, V K^T, the state update S(a(I - b K K^T)), and S Q)
//   out_proj Hv*dv -> h
int128 gated_deltanet_macs(const text_spec& t) {
  const int128 qk_dim = int128{t.linear_num_key_heads} * t.linear_key_head_dim;
  const int128 v_dim = int128{t.linear_num_value_heads} * t.linear_value_head_dim;
  const int128 in_proj = t.hidden_size * (2 * qk_dim + v_dim + v_dim + 2 * int128{t.linear_num_value_heads});
  const int128 conv = t.linear_conv_kernel_dim * (2 * qk_dim + v_dim);
  const int128 delta_rule = 4 * int128{t.linear_num_value_heads} * t.linear_key_head_dim * t.linear_value_head_dim;
  const int128 out_proj = v_dim * t.hidden_size;
  return in_proj + conv + delta_rule + out_proj;
}

// Decoder, per token: SwiGLU MLP, gate and up h -> I, down I -> h.
int128 swiglu_macs(const text_spec& t) { return 3 * int128{t.hidden_size} * t.intermediate_size; }

// Decoder, per token: the LM head h -> vocab (tied or not, the matmul runs).
int128 logits_macs(const text_spec& t) { return int128{t.hidden_size} * t.vocab_size; }

// Attention per (query, key) pair in one full-attention layer: QK^T is nh*hd multiply-adds, and the
// probabilities times V another nh*hd.
int128 attention_pair_macs(const text_spec& t) { return 2 * int128{t.num_attention_heads} * t.head_dim; }

// ViT block, per patch: fused qkv hv -> 3hv, proj hv -> hv, MLP hv -> Iv -> hv (GELU, not gated).
int128 vit_block_macs(const vision_spec& v) {
  return 4 * int128{v.hidden_size} * v.hidden_size + 2 * int128{v.hidden_size} * v.intermediate_size;
}

// One merger per merged token: it concatenates spatial_merge_size^2 = m patches (width m*hv), then
// m*hv -> m*hv, GELU, m*hv -> out_hidden_size.
int128 merger_macs(const vision_spec& v) {
  const int128 width = int128{v.spatial_merge_size} * v.spatial_merge_size * v.hidden_size;
  return width * width + width * v.out_hidden_size;
}

}  // namespace

const char* to_string(flop_scope scope) { return scope == flop_scope::seed ? "seed" : "complete"; }

flop_scope parse_flop_scope(const std::string& text, const std::string& where) {
  if (text == "seed") return flop_scope::seed;
  if (text == "complete") return flop_scope::complete;
  throw error(where + ": unknown FLOP scope '" + text + "' (expected \"seed\" or \"complete\")");
}

coefficients compute_coefficients(const model_spec& spec) {
  const text_spec& t = spec.text;
  coefficients c;

  // dense_per_token = 6 * (sum over layers of the token mixer's projections + SwiGLU) + 6 * logits.
  int128 layer_macs = 0;
  for (const layer_kind kind : t.layer_types) {
    layer_macs += (kind == layer_kind::full_attention ? full_attention_projection_macs(t) : gated_deltanet_macs(t));
    layer_macs += swiglu_macs(t);
  }
  c.dense_per_token = to_coefficient(kTrain * (layer_macs + logits_macs(t)), "dense_per_token");

  // text_attn_pair = 6 * 2*nh*hd per full-attention layer. A document of L tokens has L(L+1)/2 causal pairs
  // (token i attends to keys 0..i). Gated DeltaNet layers have no pairwise term: their cost is linear.
  c.text_attn_pair = to_coefficient(kTrain * attention_pair_macs(t) * t.num_full_attention_layers(), "text_attn_pair");

  if (spec.vision) {
    const vision_spec& v = *spec.vision;
    // vision_per_patch = 6 * depth * (4hv^2 + 2hv*Iv); vision_attn_pair = 6 * depth * 2*hv (QK^T and AV
    // over num_heads heads of hv/num_heads each). ViT attention is bidirectional: an item of P patches has
    // P^2 pairs (the reference bills P = t*h*w; the model attends within each temporal patch: t*(h*w)^2).
    c.vision_per_patch = to_coefficient(kTrain * v.depth * vit_block_macs(v), "vision_per_patch");
    c.vision_attn_pair = to_coefficient(kTrain * v.depth * 2 * v.hidden_size, "vision_attn_pair");
    // The patch embedding is a Conv3d with stride = kernel, i.e. a linear map of
    // in_channels * temporal_patch_size * patch_size^2 inputs to hv, once per patch. Its input is pixels,
    // which need no gradient: backward runs only the weight-gradient GEMM, so training costs
    // forward + wgrad = 2 GEMMs, 4 FLOPs per multiply-add (measured by the example's FLOP test).
    c.patch_embed_per_patch =
        to_coefficient(kForwardAndWeightGradient * v.patch_input_size() * v.hidden_size, "patch_embed_per_patch");
    // The final merger plus one DeepStack merger per index (Qwen3-VL), each per merged token.
    c.merger_per_merged_token = to_coefficient(kTrain * v.num_mergers() * merger_macs(v), "merger_per_merged_token");
    c.patches_per_merged_token = v.spatial_merge_size * v.spatial_merge_size;
  }

  if (spec.train_mtp_layers && t.mtp_num_hidden_layers > 0) {
    // Each trained MTP layer (Qwen3-Next / Qwen3.5 style) per token: eh_proj 2h -> h over the concatenated
    // [embedding; hidden], one full-attention decoder layer with its SwiGLU MLP, and its own pass through the
    // shared LM head. Its attention is causal over the same document: the same L(L+1)/2 pairs.
    const int128 per_layer = 2 * int128{t.hidden_size} * t.hidden_size + full_attention_projection_macs(t) +
                                   swiglu_macs(t) + logits_macs(t);
    c.mtp_per_token = to_coefficient(kTrain * t.mtp_num_hidden_layers * per_layer, "mtp_per_token");
    c.mtp_attn_pair = to_coefficient(kTrain * t.mtp_num_hidden_layers * attention_pair_macs(t), "mtp_attn_pair");
  }
  return c;
}

batch_counts& batch_counts::operator+=(const batch_counts& o) {
  real_tokens = checked_add(real_tokens, o.real_tokens, "real token count");
  padding_tokens = checked_add(padding_tokens, o.padding_tokens, "padding token count");
  checked_add(real_tokens, padding_tokens, "device token count");
  documents = checked_add(documents, o.documents, "document count");
  causal_pairs = checked_add(causal_pairs, o.causal_pairs, "causal pair count");
  items = checked_add(items, o.items, "image count");
  patches = checked_add(patches, o.patches, "patch count");
  merged_tokens = checked_add(merged_tokens, o.merged_tokens, "merged token count");
  vision_pairs_per_frame = checked_add(vision_pairs_per_frame, o.vision_pairs_per_frame, "vision pair count");
  vision_pairs_whole = checked_add(vision_pairs_whole, o.vision_pairs_whole, "vision pair count");
  return *this;
}

bool operator==(const batch_counts& a, const batch_counts& b) {
  return a.real_tokens == b.real_tokens && a.padding_tokens == b.padding_tokens && a.documents == b.documents &&
         a.causal_pairs == b.causal_pairs && a.items == b.items && a.patches == b.patches &&
         a.merged_tokens == b.merged_tokens && a.vision_pairs_per_frame == b.vision_pairs_per_frame &&
         a.vision_pairs_whole == b.vision_pairs_whole;
}

vision_geometry geometry_of(const model_spec& spec) {
  vision_geometry g;
  if (spec.vision) {
    g.has_vision = true;
    g.spatial_merge_size = spec.vision->spatial_merge_size;
  }
  return g;
}

namespace {

void check_padding(std::int64_t padding_tokens) {
  if (padding_tokens < 0) {
    throw error("flopmeter: padding_tokens must be >= 0 (got " + std::to_string(padding_tokens) + ")");
  }
}

// Sets the padding once the documents are counted; real + padding (the device tokens) must fit too.
void set_padding(batch_counts& counts, std::int64_t padding_tokens) {
  std::int64_t device_tokens = 0;
  if (__builtin_add_overflow(counts.real_tokens, padding_tokens, &device_tokens)) {
    throw error("flopmeter: real tokens + padding_tokens overflows a 64-bit count");
  }
  counts.padding_tokens = padding_tokens;
}

// Adds one document of `length` tokens: L tokens, L(L+1)/2 causal pairs. The hot path allocates nothing:
// messages are built only on the error path.
[[noreturn]] void document_error(const char* source, std::size_t index, std::int64_t length, const char* what) {
  throw error(std::string("flopmeter: ") + source + "[" + std::to_string(index) + "] = " + std::to_string(length) +
              ": " + what);
}

void add_document(batch_counts& counts, std::int64_t length, std::size_t index, const char* source) {
  if (length < 0) {
    throw error(std::string("flopmeter: ") + source + "[" + std::to_string(index) +
                "]: document length must be >= 0 (got " + std::to_string(length) + ")");
  }
  // L(L+1)/2 overflows int64 for L > ~4.3e9; check exactly rather than guess a limit.
  std::int64_t next = 0, twice_pairs = 0;
  if (__builtin_add_overflow(length, 1, &next) || __builtin_mul_overflow(length, next, &twice_pairs)) {
    document_error(source, index, length, "causal pair count overflows a 64-bit count");
  }
  if (__builtin_add_overflow(counts.real_tokens, length, &counts.real_tokens) ||
      __builtin_add_overflow(counts.causal_pairs, twice_pairs / 2, &counts.causal_pairs)) {
    document_error(source, index, length, "the batch's token or pair count overflows a 64-bit count");
  }
  counts.documents += 1;
}

}  // namespace

void add_grids(batch_counts& counts, array_view<image_grid> grids, const vision_geometry& geometry) {
  if (!grids.empty() && !geometry.has_vision) {
    throw error("flopmeter: the batch has " + std::to_string(grids.size()) +
                " image grid(s) but the model has no vision tower");
  }
  const std::int64_t m = geometry.spatial_merge_size;
  for (std::size_t i = 0; i < grids.size(); ++i) {
    const image_grid& g = grids[i];
    // Built only on the error path, so a valid batch allocates nothing.
    const auto fail = [&](const char* what) {
      throw error("flopmeter: image_grids[" + std::to_string(i) + "] = (" + std::to_string(g.t) + ", " +
                  std::to_string(g.h) + ", " + std::to_string(g.w) + "): " + what);
    };
    if (g.t < 1 || g.h < 1 || g.w < 1) fail("t, h and w must be >= 1");
    if (g.h % m != 0 || g.w % m != 0) {
      throw error("flopmeter: image_grids[" + std::to_string(i) + "] = (" + std::to_string(g.t) + ", " +
                  std::to_string(g.h) + ", " + std::to_string(g.w) +
                  "): h and w must be multiples of spatial_merge_size " + std::to_string(m));
    }
    std::int64_t frame = 0, patches = 0, frame_squared = 0, per_frame_pairs = 0, whole_pairs = 0;
    if (__builtin_mul_overflow(g.h, g.w, &frame) || __builtin_mul_overflow(g.t, frame, &patches) ||
        __builtin_mul_overflow(frame, frame, &frame_squared) ||
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
    counts.items += 1;
  }
}

batch_counts count_from_lengths(array_view<std::int64_t> document_lengths, std::int64_t padding_tokens,
                                array_view<image_grid> grids, const vision_geometry& geometry) {
  check_padding(padding_tokens);
  batch_counts counts;
  for (std::size_t i = 0; i < document_lengths.size(); ++i) add_document(counts, document_lengths[i], i, "document_lengths");
  set_padding(counts, padding_tokens);
  add_grids(counts, grids, geometry);
  return counts;
}

batch_counts count_from_cu_seqlens(array_view<std::int64_t> cu_seqlens, std::int64_t padding_tokens,
                                   array_view<image_grid> grids, const vision_geometry& geometry) {
  check_padding(padding_tokens);
  batch_counts counts;
  if (!cu_seqlens.empty() && cu_seqlens[0] != 0) {
    throw error("flopmeter: cu_seqlens[0] must be 0 (got " + std::to_string(cu_seqlens[0]) + ")");
  }
  for (std::size_t i = 1; i < cu_seqlens.size(); ++i) {
    if (cu_seqlens[i] < cu_seqlens[i - 1]) {
      throw error("flopmeter: cu_seqlens[" + std::to_string(i) + "] = " + std::to_string(cu_seqlens[i]) +
                  " is less than cu_seqlens[" + std::to_string(i - 1) + "] = " + std::to_string(cu_seqlens[i - 1]) +
                  " (cu_seqlens must be non-decreasing)");
    }
    std::int64_t length = 0;
    if (__builtin_sub_overflow(cu_seqlens[i], cu_seqlens[i - 1], &length)) {
      throw error("flopmeter: cu_seqlens[" + std::to_string(i) + "]: document length overflows a 64-bit count");
    }
    add_document(counts, length, i - 1, "cu_seqlens document");
  }
  set_padding(counts, padding_tokens);
  add_grids(counts, grids, geometry);
  return counts;
}

namespace {
// Positions are scanned in core/positions_scan.cpp (one entry per token, so it runs at memory speed).
template <class T>
batch_counts count_positions(array_view<T> positions, std::int64_t padding_tokens, array_view<image_grid> grids,
                             const vision_geometry& geometry) {
  check_padding(padding_tokens);
  const detail::positions_totals totals = detail::scan_positions(positions);
  batch_counts counts;
  counts.real_tokens = totals.tokens;
  counts.documents = totals.documents;
  counts.causal_pairs = totals.causal_pairs;
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

double flop_breakdown::total() const {
  return text_dense + text_attention + vision_dense + vision_attention + patch_embed + merger + mtp;
}

flop_breakdown compute_flops(const coefficients& c, const batch_counts& n, flop_scope scope) {
  flop_breakdown f;
  // Padding tokens run through every projection and the MLP (the device computes them), so they cost dense
  // FLOPs; they belong to no document, so they add no attention pairs.
  f.text_dense = exact_product(c.dense_per_token, n.device_tokens());
  f.text_attention = exact_product(c.text_attn_pair, n.causal_pairs);
  f.vision_dense = exact_product(c.vision_per_patch, n.patches);
  if (scope == flop_scope::seed) {
    f.vision_attention = exact_product(c.vision_attn_pair, n.vision_pairs_whole);
    return f;
  }
  f.vision_attention = exact_product(c.vision_attn_pair, n.vision_pairs_per_frame);
  f.patch_embed = exact_product(c.patch_embed_per_patch, n.patches);
  f.merger = exact_product(c.merger_per_merged_token, n.merged_tokens);
  f.mtp = exact_product(c.mtp_per_token, n.device_tokens()) + exact_product(c.mtp_attn_pair, n.causal_pairs);
  return f;
}

}  // namespace flopmeter
