// The exact FLOP model. Conventions used by every formula below:
//   - A matmul [n x k] @ [k x m] costs 2*n*k*m FLOPs (one multiply-add = 2 FLOPs).
//   - Training costs 3x the forward matmul work: forward, backward w.r.t. activations (dgrad), backward w.r.t.
//     weights (wgrad), each the same size. Hence the factor kTrain = 3 * 2 = 6 per multiply-add.
//   - Only matmul work is counted. Norms, activations, softmax, RoPE, residual adds, the loss and the
//     optimizer are O(tokens * hidden) element-wise work and are left out, as in Megatron and the reference.
#include "flopmeter/flop_model.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "core/positions_scan.h"
#include "flopmeter/error.h"

namespace flopmeter {
namespace {

__extension__ typedef __int128 int128;
__extension__ typedef unsigned __int128 uint128;

// fwd + dgrad + wgrad (3) x FLOPs per multiply-add (2).
constexpr int128 kTrain = 3 * 2;
// A layer whose input needs no gradient (the first one, on pixels): fwd + wgrad (2) x 2.
constexpr int128 kForwardAndWeightGradient = 2 * 2;

// ---------------------------------------------------------------------------------------------------------
// Saturating arithmetic with provenance. Sizes are capped at 2^31 by the loader, but products of several
// (the merger's (m^2 * hv)^2 is up to 2^186) and layer counts times per-layer work can exceed even 128 bits.
// A `term` saturates at kSaturated (2^120, far above any int64) instead of wrapping, and remembers the
// model_spec fields it was formed from, so an overflow says which sizes are to blame. A sum keeps the fields
// of its largest part: the part that made it too large.

constexpr int128 kSaturated = int128{1} << 120;

struct term {
  int128 value = 0;
  std::vector<const char*> fields;
};

int128 saturating_multiply(int128 a, int128 b) {
  if (a == 0 || b == 0) return 0;
  if (a >= kSaturated || b >= kSaturated || a > kSaturated / b) return kSaturated;
  return a * b;
}

// A product of sizes (each >= 0); `field` is nullptr for a constant factor.
struct factor {
  int128 value;
  const char* field;
};
term product(std::initializer_list<factor> factors) {
  term t;
  t.value = 1;
  for (const factor& f : factors) {
    t.value = saturating_multiply(t.value, f.value);
    if (f.field != nullptr && f.value > 1) t.fields.push_back(f.field);  // a factor of 1 cannot be to blame
  }
  return t;
}

term operator*(term t, const factor& f) {
  t.value = saturating_multiply(t.value, f.value);
  if (f.field != nullptr && f.value > 1) t.fields.push_back(f.field);
  return t;
}

term operator+(const term& a, const term& b) {
  term sum;
  sum.value = std::min(a.value + b.value, kSaturated);  // both <= 2^120: no wrap
  sum.fields = a.value >= b.value ? a.fields : b.fields;
  return sum;
}

std::vector<std::string> field_names(const term& t) { return {t.fields.begin(), t.fields.end()}; }

// Training FLOPs of a per-unit multiply-add count, as int64; coefficient_overflow names the fields otherwise.
std::int64_t to_coefficient(const term& macs, int128 passes, const char* name) {
  const term flops = macs * factor{passes, nullptr};
  if (flops.value > static_cast<int128>(INT64_MAX)) throw coefficient_overflow(name, field_names(flops));
  return static_cast<std::int64_t>(flops.value);
}

// Reports add some coefficients (dense_per_token + mtp_per_token in `check`, the text + MTP pair terms): the
// sums must fit too.
void check_sum_fits(std::int64_t a, const term& a_macs, std::int64_t b, const term& b_macs, const char* name) {
  std::int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) throw coefficient_overflow(name, field_names(a_macs + b_macs));
}

// Exact a*b rounded once to double (a, b are exact int64 counts / coefficients).
double exact_product(std::int64_t a, std::int64_t b) {
  const int128 product = static_cast<int128>(a) * static_cast<int128>(b);
  return static_cast<double>(product);
}

std::int64_t checked_add(std::int64_t a, std::int64_t b, const char* what) {
  std::int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) {
    throw error(std::string(what) + " overflows a 64-bit count");
  }
  return sum;
}

// ---------------------------------------------------------------------------------------------------------
// Per-token multiply-adds of each GEMM family. Field names are model_spec paths.

// Decoder, per token, one full-attention layer: the four projections.
//   q_proj  h -> nh*hd, doubled when the Qwen3.5 output gate is on (the same projection emits the gate)
//   k_proj  h -> nkv*hd,  v_proj h -> nkv*hd
//   o_proj  nh*hd -> h
// multiply-adds per token = h*(nh*hd*(1+gate) + 2*nkv*hd + nh*hd)
term full_attention_projection_macs(const text_spec& t) {
  const term q = product({{t.num_attention_heads, "text.num_attention_heads"},
                          {t.head_dim, "text.head_dim"},
                          {t.attn_output_gate ? 2 : 1, nullptr}});
  const term kv = product({{2, nullptr}, {t.num_key_value_heads, "text.num_key_value_heads"}, {t.head_dim, "text.head_dim"}});
  const term o = product({{t.num_attention_heads, "text.num_attention_heads"}, {t.head_dim, "text.head_dim"}});
  return (q + kv + o) * factor{t.hidden_size, "text.hidden_size"};
}

// Decoder, per token, one Gated DeltaNet layer, with Megatron-LM's approximation for the delta rule.
//   in_proj_qkv h -> 2*Hk*dk + Hv*dv;  in_proj_z h -> Hv*dv;  in_proj_a, in_proj_b h -> Hv each
//   depthwise causal conv1d: kernel multiply-adds per channel over the 2*Hk*dk + Hv*dv qkv channels
//   chunked delta rule: Megatron bills 4 matmul-like products per value head of size dk x dv per token
//     (K K^T, V K^T, the state update S(a(I - b K K^T)), and S Q)
//   out_proj Hv*dv -> h
term gated_deltanet_macs(const text_spec& t) {
  const factor h{t.hidden_size, "text.hidden_size"};
  const term qk = product({{t.linear_num_key_heads, "text.linear_num_key_heads"},
                           {t.linear_key_head_dim, "text.linear_key_head_dim"}});
  const term v = product({{t.linear_num_value_heads, "text.linear_num_value_heads"},
                          {t.linear_value_head_dim, "text.linear_value_head_dim"}});
  const term heads = product({{t.linear_num_value_heads, "text.linear_num_value_heads"}});
  const term in_proj = (qk * factor{2, nullptr} + v + v + heads * factor{2, nullptr}) * h;
  const term conv = (qk * factor{2, nullptr} + v) * factor{t.linear_conv_kernel_dim, "text.linear_conv_kernel_dim"};
  const term delta_rule = product({{4, nullptr},
                                   {t.linear_num_value_heads, "text.linear_num_value_heads"},
                                   {t.linear_key_head_dim, "text.linear_key_head_dim"},
                                   {t.linear_value_head_dim, "text.linear_value_head_dim"}});
  const term out_proj = v * h;
  return in_proj + conv + delta_rule + out_proj;
}

// Decoder, per token: SwiGLU MLP of width I: gate and up h -> I, down I -> h = 3*h*I.
term swiglu_macs(const text_spec& t, std::int64_t width, const char* width_field) {
  return product({{3, nullptr}, {t.hidden_size, "text.hidden_size"}, {width, width_field}});
}

// One MoE block, per token (Qwen3-VL MoE: Qwen3VLMoeTextSparseMoeBlock; Qwen3.5 MoE: the Qwen3-Next block):
//   router         h -> E logits (softmax, top-k, optional renormalisation: element-wise, not counted)
//   routed experts dropless: the token's hidden state goes through exactly k experts, each a SwiGLU of
//                  width moe_intermediate_size: k * 3*h*I_moe. Experts that receive no token cost nothing, and
//                  no token is dropped for capacity, so the work per token is the same for every batch.
//   shared expert  (Qwen3.5 MoE) a SwiGLU of width I_shared on every token: 3*h*I_shared, and its sigmoid
//                  gate h -> 1 that scales the shared expert's output.
// Weighting the expert outputs by the router probabilities and summing them is element-wise, not counted.
struct moe_block_macs {
  term router, routed_experts, shared_expert, shared_expert_gate;
  term total() const { return router + routed_experts + shared_expert + shared_expert_gate; }
};
moe_block_macs moe_macs(const text_spec& t) {
  moe_block_macs m;
  const factor h{t.hidden_size, "text.hidden_size"};
  m.router = product({h, {t.num_experts, "text.num_experts"}});
  m.routed_experts = swiglu_macs(t, t.moe_intermediate_size, "text.moe_intermediate_size") *
                     factor{t.num_experts_per_tok, "text.num_experts_per_tok"};
  if (t.shared_expert_intermediate_size > 0) {
    m.shared_expert = swiglu_macs(t, t.shared_expert_intermediate_size, "text.shared_expert_intermediate_size");
    m.shared_expert_gate = product({h});
  }
  return m;
}

// Decoder, per token: the LM head h -> vocab (tied or not, the matmul runs).
term logits_macs(const text_spec& t) {
  return product({{t.hidden_size, "text.hidden_size"}, {t.vocab_size, "text.vocab_size"}});
}

// Attention per (query, key) pair in one full-attention layer: QK^T is nh*hd multiply-adds, and the
// probabilities times V another nh*hd.
term attention_pair_macs(const text_spec& t) {
  return product({{2, nullptr}, {t.num_attention_heads, "text.num_attention_heads"}, {t.head_dim, "text.head_dim"}});
}

// ViT block, per patch: fused qkv hv -> 3hv, proj hv -> hv, MLP hv -> Iv -> hv (GELU, not gated).
term vit_block_macs(const vision_spec& v) {
  const factor hv{v.hidden_size, "vision.hidden_size"};
  return product({{4, nullptr}, hv, hv}) + product({{2, nullptr}, hv, {v.intermediate_size, "vision.intermediate_size"}});
}

// One merger per merged token: it concatenates spatial_merge_size^2 = m patches (width m*hv), then
// m*hv -> m*hv, GELU, m*hv -> out_hidden_size.
term merger_macs(const vision_spec& v) {
  const term width = product({{v.spatial_merge_size, "vision.spatial_merge_size"},
                              {v.spatial_merge_size, "vision.spatial_merge_size"},
                              {v.hidden_size, "vision.hidden_size"}});
  term square = width * factor{width.value, nullptr};
  square.fields.insert(square.fields.end(), width.fields.begin(), width.fields.end());
  return square + width * factor{v.out_hidden_size, "vision.out_hidden_size"};
}

// Sets one dense_per_token part (6 x count x per-layer macs) and returns its multiply-adds for the total.
term dense_part(std::int64_t& out, const term& per_layer, std::int64_t layers, const char* layers_field,
                const char* name) {
  const term macs = per_layer * factor{layers, layers_field};
  out = to_coefficient(macs, kTrain, name);
  return macs;
}

}  // namespace

namespace {

// The fields in order, each once (a size that enters a product twice is named once).
std::vector<std::string> distinct(std::vector<std::string> fields) {
  std::vector<std::string> out;
  for (std::string& field : fields) {
    if (std::find(out.begin(), out.end(), field) == out.end()) out.push_back(std::move(field));
  }
  return out;
}

std::string overflow_message(const std::string& coefficient, const std::vector<std::string>& fields) {
  std::string message = "coefficient " + coefficient + " exceeds 2^63 FLOPs";
  if (!fields.empty()) {
    message += ": the product of ";
    for (std::size_t i = 0; i < fields.size(); ++i) message += (i == 0 ? "" : ", ") + fields[i];
    message += " is too large";
  }
  return message;
}

}  // namespace

coefficient_overflow::coefficient_overflow(const std::string& coefficient, std::vector<std::string> fields)
    : error(overflow_message(coefficient, distinct(fields))), coefficient_(coefficient), fields_(distinct(std::move(fields))) {}

const char* to_string(flop_scope scope) { return scope == flop_scope::seed ? "seed" : "complete"; }

flop_scope parse_flop_scope(const std::string& text, const std::string& where) {
  if (text == "seed") return flop_scope::seed;
  if (text == "complete") return flop_scope::complete;
  throw error(where + ": unknown FLOP scope '" + text + "' (expected \"seed\" or \"complete\")");
}

coefficients compute_coefficients(const model_spec& spec) {
  const text_spec& t = spec.text;
  coefficients c;

  // dense_per_token = 6 * (full-attention projections x full layers + Gated DeltaNet x linear layers
  //                        + SwiGLU x dense-MLP layers + MoE block x MoE layers + logits).
  // Layer kinds are counted, not iterated: the cost does not grow with num_hidden_layers.
  dense_terms& d = c.dense;
  const moe_block_macs moe = moe_macs(t);
  const std::int64_t moe_layers = t.num_moe_layers();
  // One statement per part, so the first part that overflows is the one reported, in a fixed order.
  term total = dense_part(d.attention_projections, full_attention_projection_macs(t), t.num_full_attention_layers(),
                          "text.num_hidden_layers", "dense_per_token (attention projections)");
  total = total + dense_part(d.linear_attention,
                             t.num_linear_attention_layers() > 0 ? gated_deltanet_macs(t) : term{},
                             t.num_linear_attention_layers(), "text.num_hidden_layers",
                             "dense_per_token (Gated DeltaNet)");
  total = total + dense_part(d.dense_mlp, swiglu_macs(t, t.intermediate_size, "text.intermediate_size"),
                             t.num_dense_mlp_layers(), "text.num_hidden_layers", "dense_per_token (dense MLP)");
  total = total + dense_part(d.moe_router, moe.router, moe_layers, "text.num_hidden_layers",
                             "dense_per_token (MoE router)");
  total = total + dense_part(d.moe_routed_experts, moe.routed_experts, moe_layers, "text.num_hidden_layers",
                             "dense_per_token (MoE routed experts)");
  total = total + dense_part(d.moe_shared_expert, moe.shared_expert, moe_layers, "text.num_hidden_layers",
                             "dense_per_token (MoE shared expert)");
  total = total + dense_part(d.moe_shared_expert_gate, moe.shared_expert_gate, moe_layers, "text.num_hidden_layers",
                             "dense_per_token (MoE shared-expert gate)");
  total = total + dense_part(d.logits, logits_macs(t), 1, nullptr, "dense_per_token (logits)");
  c.dense_per_token = to_coefficient(total, kTrain, "dense_per_token");

  // text_attn_pair = 6 * 2*nh*hd per full-attention layer. A document of L tokens has L(L+1)/2 causal pairs
  // (token i attends to keys 0..i). Gated DeltaNet layers have no pairwise term: their cost is linear.
  const term attention_pairs = attention_pair_macs(t) * factor{t.num_full_attention_layers(), "text.num_hidden_layers"};
  c.text_attn_pair = to_coefficient(attention_pairs, kTrain, "text_attn_pair");

  if (spec.vision) {
    const vision_spec& v = *spec.vision;
    const factor depth{v.depth, "vision.depth"};
    // vision_per_patch = 6 * depth * (4hv^2 + 2hv*Iv); vision_attn_pair = 6 * depth * 2*hv (QK^T and AV
    // over num_heads heads of hv/num_heads each). ViT attention is bidirectional: an item of P patches has
    // P^2 pairs (the reference bills P = t*h*w; the model attends within each temporal patch: t*(h*w)^2).
    c.vision_per_patch = to_coefficient(vit_block_macs(v) * depth, kTrain, "vision_per_patch");
    c.vision_attn_pair =
        to_coefficient(product({depth, {2, nullptr}, {v.hidden_size, "vision.hidden_size"}}), kTrain, "vision_attn_pair");
    // The patch embedding is a Conv3d with stride = kernel, i.e. a linear map of
    // in_channels * temporal_patch_size * patch_size^2 inputs to hv, once per patch. Its input is pixels,
    // which need no gradient: backward runs only the weight-gradient GEMM, so training costs
    // forward + wgrad = 2 GEMMs, 4 FLOPs per multiply-add (measured by the example's FLOP test).
    const term patch_embed = product({{v.in_channels, "vision.in_channels"},
                                      {v.temporal_patch_size, "vision.temporal_patch_size"},
                                      {v.patch_size, "vision.patch_size"},
                                      {v.patch_size, "vision.patch_size"},
                                      {v.hidden_size, "vision.hidden_size"}});
    c.patch_embed_per_patch = to_coefficient(patch_embed, kForwardAndWeightGradient, "patch_embed_per_patch");
    // The final merger plus one DeepStack merger per index (Qwen3-VL), each per merged token.
    c.merger_per_merged_token = to_coefficient(
        merger_macs(v) * factor{v.num_mergers(), "vision.deepstack_visual_indexes"}, kTrain, "merger_per_merged_token");
    c.patches_per_merged_token = v.spatial_merge_size * v.spatial_merge_size;  // <= 2^62: sizes are <= 2^31
  }

  if (spec.train_mtp_layers && t.mtp_num_hidden_layers > 0) {
    // Each trained MTP layer (Qwen3-Next / Qwen3.5 style) per token: eh_proj 2h -> h over the concatenated
    // [embedding; hidden], one full-attention decoder layer, and its own pass through the shared LM head.
    // The layer's MLP is what the model's decoder layers have: a SwiGLU on a dense model, an MoE block (router,
    // routed experts, shared expert and gate) on an MoE model. Its attention is causal over the same document:
    // the same L(L+1)/2 pairs.
    const factor mtp_layers{t.mtp_num_hidden_layers, "text.mtp_num_hidden_layers"};
    const term mlp = t.is_moe() ? moe.total() : swiglu_macs(t, t.intermediate_size, "text.intermediate_size");
    const term per_layer = product({{2, nullptr}, {t.hidden_size, "text.hidden_size"}, {t.hidden_size, "text.hidden_size"}}) +
                           full_attention_projection_macs(t) + mlp + logits_macs(t);
    const term mtp = per_layer * mtp_layers;
    const term mtp_pairs = attention_pair_macs(t) * mtp_layers;
    c.mtp_per_token = to_coefficient(mtp, kTrain, "mtp_per_token");
    c.mtp_attn_pair = to_coefficient(mtp_pairs, kTrain, "mtp_attn_pair");
    check_sum_fits(c.dense_per_token, total, c.mtp_per_token, mtp, "dense_per_token + mtp_per_token");
    check_sum_fits(c.text_attn_pair, attention_pairs, c.mtp_attn_pair, mtp_pairs, "text_attn_pair + mtp_attn_pair");
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

// Adds the grids' counts to `counts` (shared by the three count_from_* functions).
void add_grids(batch_counts& counts, array_view<image_grid> grids, const vision_geometry& geometry) {
  if (!grids.empty() && !geometry.has_vision) {
    throw error("the batch has " + std::to_string(grids.size()) + " image grid(s) but the model has no vision tower");
  }
  const std::int64_t m = geometry.spatial_merge_size;
  for (std::size_t i = 0; i < grids.size(); ++i) {
    const image_grid& g = grids[i];
    // Built only on the error path, so a valid batch allocates nothing.
    const auto fail = [&](const std::string& what) {
      throw error("image_grids[" + std::to_string(i) + "] = (" + std::to_string(g.t) + ", " + std::to_string(g.h) +
                  ", " + std::to_string(g.w) + "): " + what);
    };
    if (g.t < 1 || g.h < 1 || g.w < 1) fail("t, h and w must be >= 1");
    if (g.h % m != 0 || g.w % m != 0) fail("h and w must be multiples of spatial_merge_size " + std::to_string(m));
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

}  // namespace

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

namespace {

// The products of one micro-batch, term by term: compute_flops rounds each once to double, exact_total_flops
// sums them exactly. One list, so that the two can never disagree on which coefficient meets which count.
struct flop_product {
  double flop_breakdown::*term;
  std::int64_t coefficient;
  std::int64_t count;
};

// At most 8 products (complete scope: 7 terms, mtp has two); `out` must hold that many. Returns how many.
std::size_t flop_products(const coefficients& c, const batch_counts& n, flop_scope scope, flop_product* out) {
  std::size_t k = 0;
  // Padding tokens run through every projection and the MLP (the device computes them), so they cost dense
  // FLOPs; they belong to no document, so they add no attention pairs.
  out[k++] = {&flop_breakdown::text_dense, c.dense_per_token, n.device_tokens()};
  out[k++] = {&flop_breakdown::text_attention, c.text_attn_pair, n.causal_pairs};
  out[k++] = {&flop_breakdown::vision_dense, c.vision_per_patch, n.patches};
  if (scope == flop_scope::seed) {
    out[k++] = {&flop_breakdown::vision_attention, c.vision_attn_pair, n.vision_pairs_whole};
    return k;
  }
  out[k++] = {&flop_breakdown::vision_attention, c.vision_attn_pair, n.vision_pairs_per_frame};
  out[k++] = {&flop_breakdown::patch_embed, c.patch_embed_per_patch, n.patches};
  out[k++] = {&flop_breakdown::merger, c.merger_per_merged_token, n.merged_tokens};
  out[k++] = {&flop_breakdown::mtp, c.mtp_per_token, n.device_tokens()};
  out[k++] = {&flop_breakdown::mtp, c.mtp_attn_pair, n.causal_pairs};
  return k;
}

constexpr std::size_t kMaxFlopProducts = 8;

}  // namespace

flop_breakdown compute_flops(const coefficients& c, const batch_counts& n, flop_scope scope) {
  flop_product products[kMaxFlopProducts];
  const std::size_t count = flop_products(c, n, scope, products);
  flop_breakdown f;
  for (std::size_t i = 0; i < count; ++i)
    f.*products[i].term += exact_product(products[i].coefficient, products[i].count);
  return f;
}

std::string exact_total_flops(const coefficients& c, const batch_counts& n, flop_scope scope) {
  flop_product products[kMaxFlopProducts];
  const std::size_t count = flop_products(c, n, scope, products);
  // Each product of two int64 fits in int128 with a bit to spare (|a*b| < 2^126); coefficients and counts are
  // >= 0, so 8 of them sum below 2^129: the sum is kept in unsigned 128 bits plus a carry count of 2^128s.
  uint128 low = 0;
  unsigned carries = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const uint128 product =
        static_cast<uint128>(static_cast<int128>(products[i].coefficient) * static_cast<int128>(products[i].count));
    if (low + product < low) ++carries;
    low += product;
  }
  // Decimal digits of carries * 2^128 + low, by long division of the two-limb number by 10.
  std::string digits;
  do {
    // (carries * 2^128 + low) / 10: carries < 10 here, so carries * 2^128 = q * 10 + r with the division done
    // on (r * 2^128 + low) via 2^128 = 10 * 34028236692093846346337460743176821145 + 6.
    const uint128 kTwo128Div10 = (~static_cast<uint128>(0)) / 10;  // floor((2^128 - 1) / 10)
    const unsigned kTwo128Mod10 = 6;                               // 2^128 mod 10
    const uint128 high_quotient = static_cast<uint128>(carries) * kTwo128Div10;
    const unsigned high_remainder = carries * kTwo128Mod10;  // < 60
    const uint128 low_quotient = low / 10;
    const unsigned low_remainder = static_cast<unsigned>(low % 10);
    const unsigned remainder = high_remainder + low_remainder;  // < 70
    uint128 quotient = high_quotient + low_quotient + remainder / 10;
    // high_quotient + low_quotient fits: the true quotient is below 2^129 / 10 < 2^128 for carries <= 1.
    digits.push_back(static_cast<char>('0' + remainder % 10));
    carries = 0;
    low = quotient;
  } while (low != 0);
  return std::string(digits.rbegin(), digits.rend());
}

}  // namespace flopmeter
