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
#include <iterator>
#include <optional>
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

namespace {

// The slow path of batch_counts::operator+=: which count overflows, in a fixed order (the first checked_add
// that overflows throws, naming it).
[[noreturn]] void throw_count_overflow(const batch_counts& a, const batch_counts& o) {
  const std::int64_t real = checked_add(a.real_tokens, o.real_tokens, "real token count");
  const std::int64_t padding = checked_add(a.padding_tokens, o.padding_tokens, "padding token count");
  checked_add(real, padding, "device token count");
  checked_add(a.documents, o.documents, "document count");
  checked_add(a.causal_pairs, o.causal_pairs, "causal pair count");
  checked_add(a.items, o.items, "image count");
  checked_add(a.patches, o.patches, "patch count");
  checked_add(a.merged_tokens, o.merged_tokens, "merged token count");
  checked_add(a.vision_pairs_per_frame, o.vision_pairs_per_frame, "vision pair count");
  checked_add(a.vision_pairs_whole, o.vision_pairs_whole, "vision pair count");
  checked_add(a.itemless_device_tokens, o.itemless_device_tokens, "device token count");
  checked_add(a.itemless_causal_pairs, o.itemless_causal_pairs, "causal pair count");
  throw error("a batch count overflows a 64-bit count");  // not reached: one of the sums above overflows
}

}  // namespace

batch_counts& batch_counts::operator+=(const batch_counts& o) {
  // The hot path (on_microbatch adds every batch): the sums into a copy, leaving at the first overflow for the
  // slow path, which names the count; *this is unchanged then.
  batch_counts sum = *this;
  std::int64_t device = 0;
  if (__builtin_add_overflow(sum.real_tokens, o.real_tokens, &sum.real_tokens) ||
      __builtin_add_overflow(sum.padding_tokens, o.padding_tokens, &sum.padding_tokens) ||
      __builtin_add_overflow(sum.real_tokens, sum.padding_tokens, &device) ||
      __builtin_add_overflow(sum.documents, o.documents, &sum.documents) ||
      __builtin_add_overflow(sum.causal_pairs, o.causal_pairs, &sum.causal_pairs) ||
      __builtin_add_overflow(sum.items, o.items, &sum.items) ||
      __builtin_add_overflow(sum.patches, o.patches, &sum.patches) ||
      __builtin_add_overflow(sum.merged_tokens, o.merged_tokens, &sum.merged_tokens) ||
      __builtin_add_overflow(sum.vision_pairs_per_frame, o.vision_pairs_per_frame, &sum.vision_pairs_per_frame) ||
      __builtin_add_overflow(sum.vision_pairs_whole, o.vision_pairs_whole, &sum.vision_pairs_whole) ||
      __builtin_add_overflow(sum.itemless_device_tokens, o.itemless_device_tokens, &sum.itemless_device_tokens) ||
      __builtin_add_overflow(sum.itemless_causal_pairs, o.itemless_causal_pairs, &sum.itemless_causal_pairs)) {
    throw_count_overflow(*this, o);
  }
  *this = sum;
  return *this;
}

bool operator==(const batch_counts& a, const batch_counts& b) {
  return a.real_tokens == b.real_tokens && a.padding_tokens == b.padding_tokens && a.documents == b.documents &&
         a.causal_pairs == b.causal_pairs && a.items == b.items && a.patches == b.patches &&
         a.merged_tokens == b.merged_tokens && a.vision_pairs_per_frame == b.vision_pairs_per_frame &&
         a.vision_pairs_whole == b.vision_pairs_whole && a.itemless_device_tokens == b.itemless_device_tokens &&
         a.itemless_causal_pairs == b.itemless_causal_pairs;
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
  // A micro-batch without images or videos: all of its text work is itemless (regime_coefficients).
  if (counts.items == 0) {
    counts.itemless_device_tokens = counts.real_tokens + counts.padding_tokens;  // checked by set_padding
    counts.itemless_causal_pairs = counts.causal_pairs;
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

// ---------------------------------------------------------------------------------------------------------
// What trains: frozen parts and LoRA adapters.
//
// The rule, per GEMM y = x W (x: [tokens x d_in], W: [d_in x d_out]), in multiply-adds of the forward:
//   forward                1 pass   (always)
//   input gradient dx      1 pass   when x needs a gradient: something trainable lies upstream of x
//   weight gradient dW     1 pass   when W trains
// and a weightless product (attention core QK^T and PV, the delta rule's products) runs its backward, 2 passes
// (the gradients of both of its operands), when a gradient flows through it, i.e. when any of its inputs needs
// one. A pass is 2 FLOPs per multiply-add. Autograd computes exactly these: a gradient is formed only for a
// tensor that requires one (measured in tests/test_example_flops.cpp, every regime, forward and backward).
//
// Which inputs need a gradient follows the data flow, part by part (V, M, T: vision, merger, text trains):
//   patch embedding  input pixels: never. 1 + V.
//   ViT blocks       their LayerNorms train with V, so every GEMM's input needs a gradient iff V: 1 + 2V;
//                    ViT attention core: 1 + 2V.
//   merger           its input (the ViT's output) needs a gradient iff V; its LayerNorm's weight trains with M, so
//                    its first GEMM's input needs one iff V or M: 1 + (V or M) + M for both of its GEMMs.
//   decoder          its input (the embeddings with the merged vision tokens written in) needs a gradient iff T
//                    (trainable embeddings and norms), or V or M and the micro-batch has an image or video. Then
//                    every decoder GEMM runs 1 + 1 + T, its attention core and delta rule 3, and the LM head
//                    1 + 1 + T. A micro-batch without items under a frozen decoder (T = 0) and no LoRA has no
//                    trainable parameter upstream of its loss: forward only, 1 for everything.
//   LoRA             base weights frozen (T = 0). An adapted projection d_in -> d_out adds x A (d_in x r) and
//                    (x A) B (r x d_out): A runs forward + weight gradient + input gradient when x needs one;
//                    B's input x A always needs one (A trains): 3 passes. The base projection runs forward + input
//                    gradient when x needs one. The first decoder layer's input needs no gradient unless the
//                    vision side trains and the micro-batch has items: in a text-only LoRA run that layer's base
//                    input projections run forward only, and so does every layer before the first adapted one.
//                    After the first adapted layer every input needs a gradient (the residual stream carries it).
//
// Inside one decoder layer (x: the layer's input, g: x needs a gradient, T: base weights train):
//   full attention   q, k, v: base 1 + g + T, their outputs need a gradient iff g, T or adapted; the core runs
//                    its backward iff any of q, k, v needs one; o_proj's input needs one iff the core's output
//                    does. Adapters on only some of q, k, v still bill the whole core backward (a fused
//                    attention kernel computes dq, dk and dv together).
//   Gated DeltaNet   in_proj_qkv, in_proj_z, in_proj_a, in_proj_b: base 1 + g + T; the conv's input (the qkv
//                    output) needs a gradient iff qkv's does, its weight trains with T; the delta rule runs its
//                    backward iff the conv's output needs a gradient; out_proj's input (norm(core) * silu(z))
//                    needs one iff the core's or z's does.
//   dense SwiGLU     gate, up: base 1 + g' + T (g': the layer's hidden after the mixer needs a gradient); down's
//                    input needs one iff g', T or gate or up adapted.
//   MoE block        router, experts, shared expert, gate: 1 + g' + T (no adapters: refused).
// MTP layers are decoder layers (their eh_proj input is the decoder's output) with the same rule.

namespace {

// Passes of one GEMM (1 forward + 1 per gradient it computes) and of a weightless product.
int128 gemm_passes(bool input_needs_gradient, bool weight_trains) {
  return 1 + (input_needs_gradient ? 1 : 0) + (weight_trains ? 1 : 0);
}
int128 core_passes(bool gradient_flows) { return gradient_flows ? 3 : 1; }

// Pass-weighted multiply-adds per token (or per pair) of the decoder, by dense_terms family.
struct text_work {
  term attention_projections, linear_attention, dense_mlp, moe_router, moe_routed_experts, moe_shared_expert,
      moe_shared_expert_gate, logits, lora_adapters, attention_pairs;
};

struct text_rule {
  const text_spec& t;
  bool weights_train;  // T
  const training_regime& regime;
  factor rank() const { return {regime.lora_rank, "training.lora_rank"}; }

  // One projection d_in -> d_out over `layers` layers into `family`: the base GEMM and, when adapted, its A and
  // B. Returns whether its output needs a gradient.
  bool projection(text_work& w, term& family, const factor& d_in, const factor& d_out,
                  std::optional<lora_target> target, bool input_gradient, const factor& layers) const {
    const bool adapted = target && regime.adapts(*target);
    family = family + product({d_in, d_out, layers}) * factor{gemm_passes(input_gradient, weights_train), nullptr};
    if (adapted) {
      w.lora_adapters = w.lora_adapters +
                        product({d_in, rank(), layers}) * factor{gemm_passes(input_gradient, true), nullptr} +
                        product({rank(), d_out, layers}) * factor{gemm_passes(true, true), nullptr};
    }
    return input_gradient || weights_train || adapted;
  }

  // A full-attention mixer; returns whether its output needs a gradient.
  bool full_attention(text_work& w, bool g, const factor& layers) const {
    const factor h{t.hidden_size, "text.hidden_size"};
    const term q_width = product({{t.num_attention_heads, "text.num_attention_heads"},
                                  {t.head_dim, "text.head_dim"},
                                  {t.attn_output_gate ? 2 : 1, nullptr}});
    const term kv_width = product({{t.num_key_value_heads, "text.num_key_value_heads"}, {t.head_dim, "text.head_dim"}});
    const term o_width = product({{t.num_attention_heads, "text.num_attention_heads"}, {t.head_dim, "text.head_dim"}});
    const bool q = projection(w, w.attention_projections, h, as_factor(q_width), lora_target::q_proj, g, layers);
    const bool k = projection(w, w.attention_projections, h, as_factor(kv_width), lora_target::k_proj, g, layers);
    const bool v = projection(w, w.attention_projections, h, as_factor(kv_width), lora_target::v_proj, g, layers);
    const bool core = q || k || v;
    w.attention_pairs = w.attention_pairs + attention_pair_macs(t) * layers * factor{core_passes(core), nullptr};
    const bool o = projection(w, w.attention_projections, as_factor(o_width), h, lora_target::o_proj, core, layers);
    return g || o;
  }

  // A Gated DeltaNet mixer (the same parts as gated_deltanet_macs).
  bool gated_deltanet(text_work& w, bool g, const factor& layers) const {
    const factor h{t.hidden_size, "text.hidden_size"};
    const term qk = product(
        {{t.linear_num_key_heads, "text.linear_num_key_heads"}, {t.linear_key_head_dim, "text.linear_key_head_dim"}});
    const term v = product({{t.linear_num_value_heads, "text.linear_num_value_heads"},
                            {t.linear_value_head_dim, "text.linear_value_head_dim"}});
    const term qkv = qk * factor{2, nullptr} + v;
    const factor heads{t.linear_num_value_heads, "text.linear_num_value_heads"};
    term& family = w.linear_attention;
    const bool qkv_gradient = projection(w, family, h, as_factor(qkv), lora_target::in_proj_qkv, g, layers);
    const bool z_gradient = projection(w, family, h, as_factor(v), lora_target::in_proj_z, g, layers);
    projection(w, family, h, heads, std::nullopt, g, layers);  // in_proj_a
    projection(w, family, h, heads, std::nullopt, g, layers);  // in_proj_b
    // The depthwise conv over the qkv channels: a GEMM-like product with a weight.
    family = family + qkv * factor{t.linear_conv_kernel_dim, "text.linear_conv_kernel_dim"} * layers *
                          factor{gemm_passes(qkv_gradient, weights_train), nullptr};
    const term delta_rule = product({{4, nullptr},
                                     {t.linear_num_value_heads, "text.linear_num_value_heads"},
                                     {t.linear_key_head_dim, "text.linear_key_head_dim"},
                                     {t.linear_value_head_dim, "text.linear_value_head_dim"}});
    family = family + delta_rule * layers * factor{core_passes(qkv_gradient), nullptr};
    const bool out = projection(w, family, as_factor(v), h, lora_target::out_proj, qkv_gradient || z_gradient, layers);
    return g || out;
  }

  // A dense SwiGLU MLP of intermediate_size; returns whether its output needs a gradient.
  bool swiglu(text_work& w, bool g, const factor& layers) const {
    const factor h{t.hidden_size, "text.hidden_size"};
    const factor width{t.intermediate_size, "text.intermediate_size"};
    const bool gate = projection(w, w.dense_mlp, h, width, lora_target::gate_proj, g, layers);
    const bool up = projection(w, w.dense_mlp, h, width, lora_target::up_proj, g, layers);
    const bool down = projection(w, w.dense_mlp, width, h, lora_target::down_proj, gate || up, layers);
    return g || down;
  }

  // An MoE block: every GEMM 1 + g + T (validate_training_regime refuses adapters on its experts).
  bool moe(text_work& w, bool g, const factor& layers) const {
    const moe_block_macs m = moe_macs(t);
    const factor passes{gemm_passes(g, weights_train), nullptr};
    w.moe_router = w.moe_router + m.router * layers * passes;
    w.moe_routed_experts = w.moe_routed_experts + m.routed_experts * layers * passes;
    w.moe_shared_expert = w.moe_shared_expert + m.shared_expert * layers * passes;
    w.moe_shared_expert_gate = w.moe_shared_expert_gate + m.shared_expert_gate * layers * passes;
    return g || weights_train;
  }

  bool mixer(text_work& w, layer_kind kind, bool g, const factor& layers) const {
    return kind == layer_kind::full_attention ? full_attention(w, g, layers) : gated_deltanet(w, g, layers);
  }
  bool mlp(text_work& w, bool moe_block, bool g, const factor& layers) const {
    return moe_block ? moe(w, g, layers) : swiglu(w, g, layers);
  }

  static factor as_factor(const term& width) {
    return {width.value, width.fields.empty() ? nullptr : width.fields.front()};
  }
};

// Layers [0, k) of each kind, counted as text_spec counts them.
std::int64_t full_attention_layers_before(const text_spec& t, std::int64_t k) {
  text_spec prefix = t;
  prefix.num_hidden_layers = k;
  return prefix.num_full_attention_layers();
}
std::int64_t moe_layers_before(const text_spec& t, std::int64_t k) {
  text_spec prefix = t;
  prefix.num_hidden_layers = k;
  return prefix.num_moe_layers();
}
bool is_moe_layer(const text_spec& t, std::int64_t i) { return moe_layers_before(t, i + 1) > moe_layers_before(t, i); }

bool adapts_any(const training_regime& r, std::initializer_list<lora_target> targets) {
  for (const lora_target target : targets) {
    if (r.adapts(target)) return true;
  }
  return false;
}

// The first decoder layer with an adapter, or num_hidden_layers when none has one.
std::int64_t first_adapted_layer(const text_spec& t, const training_regime& r) {
  std::int64_t first = t.num_hidden_layers;
  if (adapts_any(r, {lora_target::gate_proj, lora_target::up_proj, lora_target::down_proj})) return 0;
  const bool full = adapts_any(r, {lora_target::q_proj, lora_target::k_proj, lora_target::v_proj, lora_target::o_proj});
  const bool linear = adapts_any(r, {lora_target::in_proj_qkv, lora_target::in_proj_z, lora_target::out_proj});
  const bool has_linear = t.num_linear_attention_layers() > 0;
  if (full && t.num_full_attention_layers() > 0) {
    first = std::min(first, t.full_attention_interval <= 0 ? std::int64_t{0} : t.full_attention_interval - 1);
  }
  if (linear && has_linear) first = std::min<std::int64_t>(first, 0);  // layer 0 is linear when any layer is
  return first;
}

// The decoder layers of one kind in [from, to), each with input gradient `g`.
void add_layer_range(const text_rule& rule, text_work& w, std::int64_t from, std::int64_t to, bool g) {
  const text_spec& t = rule.t;
  if (to <= from) return;
  const std::int64_t full = full_attention_layers_before(t, to) - full_attention_layers_before(t, from);
  const std::int64_t moe = moe_layers_before(t, to) - moe_layers_before(t, from);
  const char* layers_field = "text.num_hidden_layers";
  if (full > 0) rule.mixer(w, layer_kind::full_attention, g, {full, layers_field});
  if (to - from - full > 0) rule.mixer(w, layer_kind::linear_attention, g, {to - from - full, layers_field});
  if (to - from - moe > 0) rule.mlp(w, false, g, {to - from - moe, layers_field});
  if (moe > 0) rule.mlp(w, true, g, {moe, layers_field});
}

// The decoder's pass-weighted work; `input_gradient`: the first layer's input needs a gradient. Returns whether
// the last layer's output needs one.
bool decoder_work(const text_rule& rule, text_work& w, bool input_gradient) {
  const text_spec& t = rule.t;
  const std::int64_t n = t.num_hidden_layers;
  if (input_gradient || rule.weights_train) {
    add_layer_range(rule, w, 0, n, true);
    return true;
  }
  const std::int64_t f = first_adapted_layer(t, rule.regime);
  add_layer_range(rule, w, 0, f, false);  // nothing trainable upstream: forward only
  if (f >= n) return false;
  const factor one{1, nullptr};
  const bool hidden = rule.mixer(w, t.layer_type(f), false, one);
  rule.mlp(w, is_moe_layer(t, f), hidden, one);
  add_layer_range(rule, w, f + 1, n, true);
  return true;
}

// The text coefficients of one kind of micro-batch into `c`: dense_per_token and its parts, text_attn_pair,
// MTP. `input_gradient`: the decoder's input needs a gradient (trainable embeddings, or images from a trainable
// vision side).
void text_coefficients(const model_spec& spec, const training_regime& regime, bool input_gradient, coefficients& c) {
  const text_spec& t = spec.text;
  const bool weights_train = !regime.text_frozen && regime.lora_rank == 0;
  const text_rule rule{t, weights_train, regime};
  text_work w;
  const bool output_gradient = decoder_work(rule, w, input_gradient);
  w.logits = logits_macs(t) * factor{gemm_passes(output_gradient, weights_train), nullptr};
  constexpr int128 kFlopsPerPass = 2;
  dense_terms& d = c.dense;
  // In the order of compute_coefficients(spec), so that the same part overflows first.
  const std::pair<std::int64_t*, std::pair<const term*, const char*>> parts[] = {
      {&d.attention_projections, {&w.attention_projections, "dense_per_token (attention projections)"}},
      {&d.linear_attention, {&w.linear_attention, "dense_per_token (Gated DeltaNet)"}},
      {&d.dense_mlp, {&w.dense_mlp, "dense_per_token (dense MLP)"}},
      {&d.moe_router, {&w.moe_router, "dense_per_token (MoE router)"}},
      {&d.moe_routed_experts, {&w.moe_routed_experts, "dense_per_token (MoE routed experts)"}},
      {&d.moe_shared_expert, {&w.moe_shared_expert, "dense_per_token (MoE shared expert)"}},
      {&d.moe_shared_expert_gate, {&w.moe_shared_expert_gate, "dense_per_token (MoE shared-expert gate)"}},
      {&d.logits, {&w.logits, "dense_per_token (logits)"}},
      {&d.lora_adapters, {&w.lora_adapters, "dense_per_token (LoRA adapters)"}},
  };
  term total;
  for (const auto& [out, part] : parts) {
    *out = to_coefficient(*part.first, kFlopsPerPass, part.second);
    total = total + *part.first;
  }
  c.dense_per_token = to_coefficient(total, kFlopsPerPass, "dense_per_token");
  c.text_attn_pair = to_coefficient(w.attention_pairs, kFlopsPerPass, "text_attn_pair");

  c.mtp_per_token = 0;
  c.mtp_attn_pair = 0;
  if (spec.train_mtp_layers && t.mtp_num_hidden_layers > 0) {
    // Each MTP layer: eh_proj over [embedding; the decoder's output], one full-attention layer with the MLP of
    // the model's layers, and the shared LM head; adapters by name like a decoder layer.
    const factor layers{t.mtp_num_hidden_layers, "text.mtp_num_hidden_layers"};
    const factor h{t.hidden_size, "text.hidden_size"};
    const bool g = output_gradient || weights_train;
    text_work m;
    term eh_proj = product({{2, nullptr}, h, h, layers}) * factor{gemm_passes(g, weights_train), nullptr};
    const bool hidden = rule.full_attention(m, g, layers);
    const bool out = rule.mlp(m, t.is_moe(), hidden, layers);
    const term logits = logits_macs(t) * layers * factor{gemm_passes(out, weights_train), nullptr};
    const term mtp = eh_proj + m.attention_projections + m.linear_attention + m.dense_mlp + m.moe_router +
                     m.moe_routed_experts + m.moe_shared_expert + m.moe_shared_expert_gate + m.lora_adapters + logits;
    c.mtp_per_token = to_coefficient(mtp, kFlopsPerPass, "mtp_per_token");
    c.mtp_attn_pair = to_coefficient(m.attention_pairs, kFlopsPerPass, "mtp_attn_pair");
    check_sum_fits(c.dense_per_token, total, c.mtp_per_token, mtp, "dense_per_token + mtp_per_token");
    check_sum_fits(c.text_attn_pair, w.attention_pairs, c.mtp_attn_pair, m.attention_pairs,
                   "text_attn_pair + mtp_attn_pair");
  }
}

const char* const kLoraTargetNames[] = {"q_proj",  "k_proj",    "v_proj",      "o_proj",    "gate_proj",
                                        "up_proj", "down_proj", "in_proj_qkv", "in_proj_z", "out_proj"};

}  // namespace

const char* to_string(lora_target target) { return kLoraTargetNames[static_cast<unsigned>(target)]; }

lora_target parse_lora_target(const std::string& name, const std::string& where) {
  std::string known;
  for (unsigned i = 0; i < std::size(kLoraTargetNames); ++i) {
    if (name == kLoraTargetNames[i]) return static_cast<lora_target>(i);
    known += std::string(i == 0 ? "" : ", ") + kLoraTargetNames[i];
  }
  throw error(where + ": unknown LoRA target '" + name + "' (expected one of " + known + ")");
}

bool training_regime::adapts(lora_target target) const {
  return lora_rank > 0 && std::find(lora_targets.begin(), lora_targets.end(), target) != lora_targets.end();
}

std::string frozen_list(const training_regime& regime) {
  std::string out;
  const auto add = [&out](bool frozen, const char* part) {
    if (frozen) out += std::string(out.empty() ? "" : ",") + part;
  };
  add(regime.vision_frozen, "vision");
  add(regime.merger_frozen, "merger");
  add(regime.text_frozen, "text");
  return out;
}

void add_frozen_part(training_regime& regime, const std::string& part, const std::string& where) {
  bool* flag = part == "vision"   ? &regime.vision_frozen
               : part == "merger" ? &regime.merger_frozen
               : part == "text"   ? &regime.text_frozen
                                  : nullptr;
  if (flag == nullptr) {
    throw error(where + ": unknown part '" + part + "' (expected \"vision\", \"merger\" or \"text\")");
  }
  if (*flag) throw error(where + ": part '" + part + "' is named twice");
  *flag = true;
}

namespace {

// "q_proj, v_proj" and "vision\", \"text" (inside the quotes of a TOML array), for messages.
std::string target_names(const training_regime& regime) {
  std::string names;
  for (const lora_target target : regime.lora_targets)
    names += (names.empty() ? "" : ", ") + std::string(to_string(target));
  return names;
}
std::string quoted_parts(const training_regime& regime) {
  std::string quoted;
  for (const char c : frozen_list(regime)) quoted += c == ',' ? std::string("\", \"") : std::string(1, c);
  return quoted;
}

}  // namespace

void validate_training_regime(const model_spec& spec, const training_regime& regime) {
  const text_spec& t = spec.text;
  if (regime.lora_rank < 0 || regime.lora_rank > (std::int64_t{1} << 20)) {
    throw error("training.lora_rank must be in [0, 1048576] (got " + std::to_string(regime.lora_rank) + ")");
  }
  if (regime.lora_rank > 0 && regime.lora_targets.empty()) {
    throw error("training.lora_rank " + std::to_string(regime.lora_rank) +
                " without lora_targets: name the adapted projections, e.g. [\"q_proj\", \"k_proj\", \"v_proj\", "
                "\"o_proj\"]");
  }
  if (regime.lora_rank == 0 && !regime.lora_targets.empty()) {
    throw error(std::string("training.lora_targets without a lora_rank: set lora_rank = R (> 0), the adapters' rank"));
  }
  for (std::size_t i = 0; i < regime.lora_targets.size(); ++i) {
    if (std::find(regime.lora_targets.begin(), regime.lora_targets.begin() + static_cast<std::ptrdiff_t>(i),
                  regime.lora_targets[i]) != regime.lora_targets.begin() + static_cast<std::ptrdiff_t>(i)) {
      throw error(std::string("training.lora_targets: '") + to_string(regime.lora_targets[i]) + "' is named twice");
    }
  }
  if (t.is_moe() && adapts_any(regime, {lora_target::gate_proj, lora_target::up_proj, lora_target::down_proj})) {
    throw error("training.lora_targets: gate_proj, up_proj and down_proj would adapt the experts of model '" +
                spec.name +
                "', a mixture-of-experts model; LoRA on MoE experts is not billed (out of scope): "
                "adapt the attention projections only");
  }
  if (regime.lora_rank > 0 && first_adapted_layer(t, regime) >= t.num_hidden_layers) {
    throw error("training.lora_targets: model '" + spec.name + "' has none of these projections (" +
                target_names(regime) +
                "); in_proj_qkv, in_proj_z and out_proj exist only in Gated DeltaNet layers, q_proj, k_proj, v_proj "
                "and o_proj only in full-attention layers");
  }
  const bool vision_side_trains = spec.vision && (!regime.vision_frozen || !regime.merger_frozen);
  if (regime.text_frozen && regime.lora_rank == 0 && !vision_side_trains) {
    throw error("training.frozen = [\"" + quoted_parts(regime) + "\"] freezes every part of model '" + spec.name +
                "': nothing trains, so there is no training work to report");
  }
}

regime_coefficients compute_coefficients(const model_spec& spec, const training_regime& regime) {
  validate_training_regime(spec, regime);
  regime_coefficients rc;
  coefficients c = compute_coefficients(spec);  // the vision terms' sizes (and the full-training overflow checks)
  if (spec.vision) {
    const vision_spec& v = *spec.vision;
    const bool vision = !regime.vision_frozen, merger = !regime.merger_frozen;
    const factor depth{v.depth, "vision.depth"};
    c.vision_per_patch = to_coefficient(vit_block_macs(v) * depth, 2 * gemm_passes(vision, vision), "vision_per_patch");
    c.vision_attn_pair = to_coefficient(product({depth, {2, nullptr}, {v.hidden_size, "vision.hidden_size"}}),
                                        2 * core_passes(vision), "vision_attn_pair");
    const term patch_embed = product({{v.in_channels, "vision.in_channels"},
                                      {v.temporal_patch_size, "vision.temporal_patch_size"},
                                      {v.patch_size, "vision.patch_size"},
                                      {v.patch_size, "vision.patch_size"},
                                      {v.hidden_size, "vision.hidden_size"}});
    c.patch_embed_per_patch = to_coefficient(patch_embed, 2 * gemm_passes(false, vision), "patch_embed_per_patch");
    c.merger_per_merged_token =
        to_coefficient(merger_macs(v) * factor{v.num_mergers(), "vision.deepstack_visual_indexes"},
                       2 * gemm_passes(vision || merger, merger), "merger_per_merged_token");
  }
  const bool vision_side_trains = spec.vision && (!regime.vision_frozen || !regime.merger_frozen);
  rc.with_items = c;
  rc.without_items = c;
  const bool embeddings_train = !regime.text_frozen && regime.lora_rank == 0;
  text_coefficients(spec, regime, embeddings_train || vision_side_trains, rc.with_items);
  text_coefficients(spec, regime, embeddings_train, rc.without_items);
  return rc;
}

flop_breakdown compute_flops(const regime_coefficients& rc, const batch_counts& n, flop_scope scope) {
  flop_breakdown f = compute_flops(rc.with_items, n, scope);
  const coefficients& with = rc.with_items;
  const coefficients& without = rc.without_items;
  // One set for every micro-batch (every regime but a frozen decoder): exactly compute_flops(with_items, ...),
  // bit for bit (two rounded products would not always sum to the one rounded product above 2^53).
  const bool same = with.dense_per_token == without.dense_per_token && with.text_attn_pair == without.text_attn_pair &&
                    with.mtp_per_token == without.mtp_per_token && with.mtp_attn_pair == without.mtp_attn_pair;
  if (same || (n.itemless_device_tokens == 0 && n.itemless_causal_pairs == 0)) return f;
  // Text terms: with_items over the tokens and pairs of micro-batches with items, without_items over the rest.
  const std::int64_t device = n.device_tokens() - n.itemless_device_tokens;
  const std::int64_t pairs = n.causal_pairs - n.itemless_causal_pairs;
  f.text_dense =
      exact_product(with.dense_per_token, device) + exact_product(without.dense_per_token, n.itemless_device_tokens);
  f.text_attention =
      exact_product(with.text_attn_pair, pairs) + exact_product(without.text_attn_pair, n.itemless_causal_pairs);
  if (scope == flop_scope::complete) {
    f.mtp = exact_product(with.mtp_per_token, device) + exact_product(with.mtp_attn_pair, pairs) +
            exact_product(without.mtp_per_token, n.itemless_device_tokens) +
            exact_product(without.mtp_attn_pair, n.itemless_causal_pairs);
  }
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
