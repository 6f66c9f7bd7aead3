// plugin/core/flop_terms.cpp — the multiply-adds of each GEMM family and the saturating arithmetic they are
// formed in (see flop_terms.h). Conventions used by every formula below and by the coefficients built from them:
//   - A matmul [n x k] @ [k x m] costs 2*n*k*m FLOPs (one multiply-add = 2 FLOPs).
//   - Training costs 3x the forward matmul work: forward, backward w.r.t. activations (dgrad), backward w.r.t.
//     weights (wgrad), each the same size. Hence the factor kTrain = 3 * 2 = 6 per multiply-add.
//   - Only matmul work is counted. Norms, activations, softmax, RoPE, residual adds, the loss and the
//     optimizer are O(tokens * hidden) element-wise work and are left out, as in Megatron and the reference.

#include "core/flop_terms.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "flopmeter/error.h"
#include "flopmeter/flop_model.h"

namespace flopmeter {
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

// The exception every coefficient that does not fit throws (to_coefficient, check_sum_fits below).
coefficient_overflow::coefficient_overflow(const std::string& coefficient, std::vector<std::string> fields)
    : error(overflow_message(coefficient, distinct(fields))),
      coefficient_(coefficient),
      fields_(distinct(std::move(fields))) {}

}  // namespace flopmeter

namespace flopmeter::detail {
namespace {

int128 saturating_multiply(int128 a, int128 b) {
  if (a == 0 || b == 0) return 0;
  if (a >= kSaturated || b >= kSaturated || a > kSaturated / b) return kSaturated;
  return a * b;
}

std::vector<std::string> field_names(const term& t) { return {t.fields.begin(), t.fields.end()}; }

}  // namespace

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

std::int64_t to_coefficient(const term& macs, int128 passes, const char* name) {
  const term flops = macs * factor{passes, nullptr};
  if (flops.value > static_cast<int128>(INT64_MAX)) throw coefficient_overflow(name, field_names(flops));
  return static_cast<std::int64_t>(flops.value);
}

void check_sum_fits(std::int64_t a, const term& a_macs, std::int64_t b, const term& b_macs, const char* name) {
  std::int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) throw coefficient_overflow(name, field_names(a_macs + b_macs));
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
  const term kv =
      product({{2, nullptr}, {t.num_key_value_heads, "text.num_key_value_heads"}, {t.head_dim, "text.head_dim"}});
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
  const term qk = product(
      {{t.linear_num_key_heads, "text.linear_num_key_heads"}, {t.linear_key_head_dim, "text.linear_key_head_dim"}});
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
  return product({{4, nullptr}, hv, hv}) +
         product({{2, nullptr}, hv, {v.intermediate_size, "vision.intermediate_size"}});
}

// ViT attention per (query, key) pair, summed over the blocks: QK^T and AV over num_heads heads of
// hv/num_heads each, 2*hv multiply-adds per block. ViT attention is bidirectional: an item of P patches has
// P^2 pairs (the reference bills P = t*h*w; the model attends within each temporal patch: t*(h*w)^2).
term vit_attention_pair_macs(const vision_spec& v) {
  return product({{v.depth, "vision.depth"}, {2, nullptr}, {v.hidden_size, "vision.hidden_size"}});
}

// The patch embedding is a Conv3d with stride = kernel, i.e. a linear map of
// in_channels * temporal_patch_size * patch_size^2 inputs to hv, once per patch.
term patch_embed_macs(const vision_spec& v) {
  return product({{v.in_channels, "vision.in_channels"},
                  {v.temporal_patch_size, "vision.temporal_patch_size"},
                  {v.patch_size, "vision.patch_size"},
                  {v.patch_size, "vision.patch_size"},
                  {v.hidden_size, "vision.hidden_size"}});
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

}  // namespace flopmeter::detail
