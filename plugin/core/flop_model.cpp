// plugin/core/flop_model.cpp — the full-training coefficients of a model_spec (compute_coefficients(spec),
// flopmeter/flop_model.h): each GEMM family's multiply-adds (flop_terms.cpp, where the conventions and every
// per-GEMM derivation are) times its layer count and the 6 FLOPs per multiply-add of training. The other parts
// of the FLOP model: the per-batch counts (batch_counts.cpp), the FLOPs of counts (flop_totals.cpp) and the
// coefficients of a training regime with frozen parts or LoRA (training_regime.cpp).
#include "flopmeter/flop_model.h"

#include <cstdint>
#include <string>

#include "core/flop_terms.h"
#include "flopmeter/error.h"

namespace flopmeter {

using namespace detail;  // the term arithmetic and the GEMM families of flop_terms.h

namespace {

// Sets one dense_per_token part (6 x count x per-layer macs) and returns its multiply-adds for the total.
term dense_part(std::int64_t& out, const term& per_layer, std::int64_t layers, const char* layers_field,
                const char* name) {
  const term macs = per_layer * factor{layers, layers_field};
  out = to_coefficient(macs, kTrain, name);
  return macs;
}

}  // namespace

const char* to_string(flop_scope scope) { return scope == flop_scope::seed ? "seed" : "complete"; }

flop_scope parse_flop_scope(const std::string& text, const error_location& where) {
  if (text == "seed") return flop_scope::seed;
  if (text == "complete") return flop_scope::complete;
  throw error(where, "unknown FLOP scope '" + text + "' (expected \"seed\" or \"complete\")");
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
    c.vision_attn_pair = to_coefficient(vit_attention_pair_macs(v), kTrain, "vision_attn_pair");
    // The patch embedding (a linear map of in_channels * temporal_patch_size * patch_size^2 inputs to hv per
    // patch): its input is pixels, which need no gradient: backward runs only the weight-gradient GEMM, so
    // training costs forward + wgrad = 2 GEMMs, 4 FLOPs per multiply-add (measured by the example's FLOP test).
    c.patch_embed_per_patch = to_coefficient(patch_embed_macs(v), kForwardAndWeightGradient, "patch_embed_per_patch");
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

}  // namespace flopmeter
