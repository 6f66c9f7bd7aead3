// Activation recomputation (training_regime::recompute): the re-executed forward each policy bills, derived by
// hand on one dense and one mixture-of-experts model, the layer selections (recompute_layers per pipeline
// stage, recompute_every), the autograd rule (a layer no gradient crosses recomputes nothing), hardware FLOPs
// beside model FLOPs, and the refused settings. The policies and the rule: plugin/arch/training_regime.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "flopmeter/error.h"
#include "flopmeter/flop_model.h"
#include "flopmeter/model_config.h"
#include "support/small_models.h"

namespace flopmeter {
namespace {

using testing::small_vlm;

// small_vlm, per token in multiply-adds (tests/support/small_models.h): per layer q 8*8 = 64, k 8*4 = 32,
// v 32, o 64 (attention projections 192); gate, up, down 8*16 = 128 each (SwiGLU 384); 2 layers; the
// attention core 2*nh*hd = 16 per pair and layer. ViT (depth 1): qkv 3*4*4 = 48, proj 16, fc1 4*8 = 32,
// fc2 32 per patch; core 2*hv = 8 per pair. A recomputed product runs one forward: 2 FLOPs per multiply-add.
training_regime with_policy(recompute_policy policy, bool vision = false) {
  training_regime r;
  r.recompute.policy = policy;
  r.recompute.vision = vision;
  return r;
}

struct expected_recompute {
  recompute_policy policy;
  std::int64_t attention_projections, dense_mlp, text_attn_pair, vision_per_patch, vision_attn_pair;
};

// Full training, every layer checkpointed, recompute_vision on:
//   full             2 layers x 2 x 192 = 768; 2 x 2 x 384 = 1536; 2 x 2 x 16 = 64; ViT 2 x 128 = 256, 2 x 8 = 16
//   full_early_stop  the MLP's down projection (final) is cut: 2 x 2 x 256 = 1024; ViT fc2 cut: 2 x 96 = 192
//   selective        the attention cores only: 64 per pair; ViT 16 per pair
//   op               matmuls q1 k2 v3 o4 gate5 up6 down7: k + o = 96, up = 128 -> 2 x 2 x 96 = 384, 2 x 2 x 128
//                    = 512; cores saved. ViT qkv1 proj2 fc1 3 fc2 4 (final, cut): proj 2 x 16 = 32
const expected_recompute kDense[] = {
    {recompute_policy::none, 0, 0, 0, 0, 0},
    {recompute_policy::full, 768, 1536, 64, 256, 16},
    {recompute_policy::full_early_stop, 768, 1024, 64, 192, 16},
    {recompute_policy::selective, 0, 0, 64, 0, 16},
    {recompute_policy::op, 384, 512, 0, 32, 0},
};

TEST(recompute, each_policy_on_a_dense_model_bills_the_products_it_runs_again) {
  for (const expected_recompute& e : kDense) {
    const regime_coefficients rc =
        compute_coefficients(small_vlm(), with_policy(e.policy, e.policy != recompute_policy::none));
    for (const coefficients* c : {&rc.with_items, &rc.without_items}) {
      SCOPED_TRACE(to_string(e.policy));
      EXPECT_EQ(c->recompute.dense.attention_projections, e.attention_projections);
      EXPECT_EQ(c->recompute.dense.dense_mlp, e.dense_mlp);
      EXPECT_EQ(c->recompute.dense.logits, 0);  // the LM head is in no checkpointed layer
      EXPECT_EQ(c->recompute.text_per_token, e.attention_projections + e.dense_mlp);
      EXPECT_EQ(c->recompute.text_attn_pair, e.text_attn_pair);
      EXPECT_EQ(c->recompute.vision_per_patch, e.vision_per_patch);
      EXPECT_EQ(c->recompute.vision_attn_pair, e.vision_attn_pair);
      // Model FLOPs are unchanged: MFU ignores the recomputed forward.
      EXPECT_EQ(c->dense_per_token, 7392);
      EXPECT_EQ(c->text_attn_pair, 192);
      EXPECT_EQ(c->vision_per_patch, 768);
    }
  }
}

// small_vlm's decoder with MoE MLPs: 4 experts, top-2, expert width 4, a shared expert of width 8 and its gate.
// Per token and layer: router 8*4 = 32; routed experts 2 x (gate, up, down 8*4 = 32 each) = 192; shared expert
// gate, up, down 8*8 = 64 each (192); shared-expert gate 8.
model_spec small_moe() {
  model_spec s = testing::small_text_model();
  s.model_type = "qwen3_5_moe";
  s.text.num_experts = 4;
  s.text.num_experts_per_tok = 2;
  s.text.moe_intermediate_size = 4;
  s.text.shared_expert_intermediate_size = 8;
  s.text.decoder_sparse_step = 1;
  return s;
}

// Every layer MoE, full training, all layers checkpointed (2 layers, 2 FLOPs per multiply-add: x 4):
//   full, full_early_stop (an MoE block has no cut final GEMM: its expert outputs are weighted, a saved product)
//     attention 4 x 192 = 768, router 4 x 32 = 128, routed 4 x 192 = 768, shared 4 x 192 = 768, gate 4 x 8 = 32
//   op: q1 k2 v3 o4 router5 experts' gate6 up7 down8, shared gate9 up10 down11, shared-expert gate12:
//     attention k + o = 4 x 96 = 384; router 0; routed gate + down, 2 experts x (32 + 32) = 128 per layer:
//     4 x 128 = 512; shared up 4 x 64 = 256; shared-expert gate 4 x 8 = 32
//   selective: the cores only, 4 x 16 = 64 per pair
struct expected_moe {
  recompute_policy policy;
  std::int64_t attention, router, routed, shared, gate, pair;
};
const expected_moe kMoe[] = {
    {recompute_policy::full, 768, 128, 768, 768, 32, 64},
    {recompute_policy::full_early_stop, 768, 128, 768, 768, 32, 64},
    {recompute_policy::selective, 0, 0, 0, 0, 0, 64},
    {recompute_policy::op, 384, 0, 512, 256, 32, 0},
};

TEST(recompute, each_policy_on_a_moe_model_bills_the_products_it_runs_again) {
  for (const expected_moe& e : kMoe) {
    SCOPED_TRACE(to_string(e.policy));
    const coefficients c = compute_coefficients(small_moe(), with_policy(e.policy)).with_items;
    EXPECT_EQ(c.recompute.dense.attention_projections, e.attention);
    EXPECT_EQ(c.recompute.dense.moe_router, e.router);
    EXPECT_EQ(c.recompute.dense.moe_routed_experts, e.routed);
    EXPECT_EQ(c.recompute.dense.moe_shared_expert, e.shared);
    EXPECT_EQ(c.recompute.dense.moe_shared_expert_gate, e.gate);
    EXPECT_EQ(c.recompute.dense.dense_mlp, 0);
    EXPECT_EQ(c.recompute.text_per_token, e.attention + e.router + e.routed + e.shared + e.gate);
    EXPECT_EQ(c.recompute.text_attn_pair, e.pair);
  }
}

// mlp_only_layers = [0]: layer 0 has a dense SwiGLU (384 per token), layer 1 the MoE block. Full policy:
//   every 2 (layer 1 only): attention 2 x 192 = 384, MoE 2 x (32 + 192 + 192 + 8), dense MLP 0
//   recompute_layers 1 (layer 0 only): attention 384, dense MLP 2 x 384 = 768, MoE 0
//   op, layers 1: k + o = 2 x 96 = 192, up 2 x 128 = 256
TEST(recompute, layer_selection_follows_each_layers_kind) {
  model_spec spec = small_moe();
  spec.text.mlp_only_layers = {0};
  training_regime every = with_policy(recompute_policy::full);
  every.recompute.every = 2;
  const coefficients e = compute_coefficients(spec, every).with_items;
  EXPECT_EQ(e.recompute.dense.attention_projections, 384);
  EXPECT_EQ(e.recompute.dense.moe_router, 64);
  EXPECT_EQ(e.recompute.dense.moe_routed_experts, 384);
  EXPECT_EQ(e.recompute.dense.moe_shared_expert, 384);
  EXPECT_EQ(e.recompute.dense.moe_shared_expert_gate, 16);
  EXPECT_EQ(e.recompute.dense.dense_mlp, 0);
  EXPECT_EQ(e.recompute.text_attn_pair, 32);
  training_regime first = with_policy(recompute_policy::full);
  first.recompute.layers = 1;
  const coefficients f = compute_coefficients(spec, first).with_items;
  EXPECT_EQ(f.recompute.dense.attention_projections, 384);
  EXPECT_EQ(f.recompute.dense.dense_mlp, 768);
  EXPECT_EQ(f.recompute.dense.moe_routed_experts, 0);
  first.recompute.policy = recompute_policy::op;
  const coefficients o = compute_coefficients(spec, first).with_items;
  EXPECT_EQ(o.recompute.dense.attention_projections, 192);
  EXPECT_EQ(o.recompute.dense.dense_mlp, 256);
  // Two pipeline stages of one layer each: the first layer of each, i.e. both.
  training_regime staged = with_policy(recompute_policy::full);
  staged.recompute.layers = 1;
  staged.recompute.pipeline_stages = 2;
  EXPECT_EQ(compute_coefficients(spec, staged).with_items.recompute.text_attn_pair, 64);
}

// With full training, "full" on every layer re-runs each decoder layer's forward once: exactly a third of each
// decoder family's training coefficient (6 -> 2 FLOPs per multiply-add), for every shipped family (hybrid
// Gated DeltaNet layers, MoE, DeepStack VL). recompute_every = 2 on qwen3_5_2b (24 layers, every 4th full
// attention): layers 1, 3, ..., 23 (12) of which all 6 full-attention layers and 6 of the 18 Gated DeltaNet
// layers: attention a third of the model's, Gated DeltaNet a ninth, the MLP half of a third.
TEST(recompute, full_on_every_layer_is_a_third_of_each_decoder_family) {
  for (const char* stem : {"qwen3_vl_2b", "qwen3_vl_30b_a3b", "qwen3_5_2b", "qwen3_5_35b_a3b"}) {
    SCOPED_TRACE(stem);
    const model_spec spec = load_model_spec(std::string(FLOPMETER_SOURCE_DIR) + "/model_configs/" + stem + ".toml");
    const coefficients m = compute_coefficients(spec);
    const coefficients c = compute_coefficients(spec, with_policy(recompute_policy::full, true)).with_items;
    EXPECT_EQ(c.recompute.dense.attention_projections * 3, m.dense.attention_projections);
    EXPECT_EQ(c.recompute.dense.linear_attention * 3, m.dense.linear_attention);
    EXPECT_EQ(c.recompute.dense.dense_mlp * 3, m.dense.dense_mlp);
    EXPECT_EQ(c.recompute.dense.moe_router * 3, m.dense.moe_router);
    EXPECT_EQ(c.recompute.dense.moe_routed_experts * 3, m.dense.moe_routed_experts);
    EXPECT_EQ(c.recompute.dense.moe_shared_expert * 3, m.dense.moe_shared_expert);
    EXPECT_EQ(c.recompute.dense.moe_shared_expert_gate * 3, m.dense.moe_shared_expert_gate);
    EXPECT_EQ(c.recompute.text_attn_pair * 3, m.text_attn_pair);
    EXPECT_EQ(c.recompute.vision_per_patch * 3, m.vision_per_patch);
    EXPECT_EQ(c.recompute.vision_attn_pair * 3, m.vision_attn_pair);
  }
  const model_spec spec = load_model_spec(std::string(FLOPMETER_SOURCE_DIR) + "/model_configs/qwen3_5_2b.toml");
  const coefficients m = compute_coefficients(spec);
  training_regime every = with_policy(recompute_policy::full);
  every.recompute.every = 2;
  const coefficients c = compute_coefficients(spec, every).with_items;
  EXPECT_EQ(c.recompute.dense.attention_projections * 3, m.dense.attention_projections);
  EXPECT_EQ(c.recompute.dense.linear_attention * 9, m.dense.linear_attention);
  EXPECT_EQ(c.recompute.dense.dense_mlp * 6, m.dense.dense_mlp);
  EXPECT_EQ(c.recompute.text_attn_pair * 3, m.text_attn_pair);
}

// The autograd rule: a frozen ViT (no weight trains, its input is pixels) runs no backward and recomputes
// nothing whatever the policy; a frozen decoder recomputes only in micro-batches with images (the gradient to
// the vision side crosses it), none in text-only ones.
TEST(recompute, parts_no_gradient_crosses_recompute_nothing) {
  training_regime r = with_policy(recompute_policy::full, true);
  r.vision_frozen = true;
  const regime_coefficients frozen_vision = compute_coefficients(small_vlm(), r);
  EXPECT_EQ(frozen_vision.with_items.recompute.vision_per_patch, 0);
  EXPECT_EQ(frozen_vision.with_items.recompute.vision_attn_pair, 0);
  EXPECT_EQ(frozen_vision.with_items.recompute.text_per_token, 2304);
  training_regime text = with_policy(recompute_policy::full, true);
  text.text_frozen = true;
  const regime_coefficients frozen_text = compute_coefficients(small_vlm(), text);
  EXPECT_EQ(frozen_text.with_items.recompute.text_per_token, 2304);
  EXPECT_EQ(frozen_text.with_items.recompute.vision_per_patch, 256);
  EXPECT_EQ(frozen_text.without_items.recompute.text_per_token, 0);
  EXPECT_EQ(frozen_text.without_items.recompute.text_attn_pair, 0);
}

// LoRA rank 2 on q_proj and v_proj with the vision side frozen: layer 0's input needs no gradient, but its
// adapters train, so its backward runs and the whole layer re-runs (a checkpoint re-runs the layer's forward,
// not the gradient-needing products alone). Adapters per layer: q A 8*2 = 16, B 2*8 = 16; v A 16, B 2*4 = 8.
//   full: projections 768, MLP 1536, adapters 2 x 2 x 56 = 224; cores 64 (q needs a gradient in both layers)
//   op: q1 qA2 qB3 k4 v5 vA6 vB7 o8 gate9 up10 down11: qA + vA = 32, k + o = 96, up 128 per layer ->
//       adapters 128, projections 384, MLP 512
// LoRA on down_proj only, full_early_stop: the base down and A run again, B (added last) does not:
//   MLP 2 x 2 x 384 = 1536, adapters 2 x 2 x (16*2) = 128.
TEST(recompute, lora_layers_recompute_their_adapters_in_forward_order) {
  training_regime r = with_policy(recompute_policy::full);
  r.vision_frozen = r.merger_frozen = true;
  r.lora_rank = 2;
  r.lora_targets = {lora_target::q_proj, lora_target::v_proj};
  const coefficients full = compute_coefficients(small_vlm(), r).with_items;
  EXPECT_EQ(full.recompute.dense.attention_projections, 768);
  EXPECT_EQ(full.recompute.dense.dense_mlp, 1536);
  EXPECT_EQ(full.recompute.dense.lora_adapters, 224);
  EXPECT_EQ(full.recompute.text_attn_pair, 64);
  r.recompute.policy = recompute_policy::op;
  const coefficients op = compute_coefficients(small_vlm(), r).with_items;
  EXPECT_EQ(op.recompute.dense.lora_adapters, 128);
  EXPECT_EQ(op.recompute.dense.attention_projections, 384);
  EXPECT_EQ(op.recompute.dense.dense_mlp, 512);
  r.recompute.policy = recompute_policy::full_early_stop;
  r.lora_targets = {lora_target::down_proj};
  const coefficients early = compute_coefficients(small_vlm(), r).with_items;
  EXPECT_EQ(early.recompute.dense.dense_mlp, 1536);
  EXPECT_EQ(early.recompute.dense.lora_adapters, 128);
  // selective with LoRA on the MLP only: layer 0's core has no gradient (q, k, v need none), layer 1's has.
  r.recompute.policy = recompute_policy::selective;
  r.lora_targets = {lora_target::up_proj};
  EXPECT_EQ(compute_coefficients(small_vlm(), r).with_items.recompute.text_attn_pair, 32);
}

// Hardware FLOPs = model FLOPs + the re-executed forward over the same counts. One document of 4 tokens (10
// causal pairs) and one 1 x 2 x 2 image (4 patches, 16 pairs, 1 merged token) under "full" with the ViT:
//   model 7392*4 + 192*10 + 768*4 + 48*16 + 64*4 + 2304*1 = 37888 (small_models.h)
//   recompute: text 2304*4 = 9216, pairs 64*10 = 640, ViT 256*4 = 1024, 16*16 = 256: 11136
TEST(recompute, hardware_flops_add_the_recomputed_forward_to_the_model_flops) {
  const model_spec spec = small_vlm();
  const std::int64_t lengths[] = {4};
  const image_grid grids[] = {{1, 2, 2}};
  const batch_counts n = count_from_lengths(lengths, 0, grids, geometry_of(spec));
  const flop_breakdown f =
      compute_flops(compute_coefficients(spec, with_policy(recompute_policy::full, true)), n, flop_scope::complete);
  EXPECT_EQ(f.total(), 37888);
  EXPECT_EQ(f.recompute.text_dense, 9216);
  EXPECT_EQ(f.recompute.text_attention, 640);
  EXPECT_EQ(f.recompute.vision_dense, 1024);
  EXPECT_EQ(f.recompute.vision_attention, 256);
  EXPECT_EQ(f.hardware_total(), 37888 + 11136);
  const flop_breakdown none = compute_flops(compute_coefficients(spec, training_regime{}), n, flop_scope::complete);
  EXPECT_EQ(none.hardware_total(), none.total());
}

void expect_refused(const training_regime& r, const std::string& part) {
  try {
    compute_coefficients(small_vlm(), r);
    ADD_FAILURE() << "accepted; expected an error containing: " << part;
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(recompute, refused_settings_say_why) {
  training_regime r;
  r.recompute.every = 2;
  expect_refused(r, "training.recompute_every without a recompute policy");
  r = with_policy(recompute_policy::full);
  r.recompute.every = 2;
  r.recompute.layers = 1;
  expect_refused(r, "both set");
  r.recompute.layers = 0;
  r.recompute.every = 3;
  expect_refused(r, "training.recompute_every = 3 checkpoints no layer of model 'small' (2 decoder layers)");
  r.recompute.every = 0;
  r.recompute.layers = 3;
  expect_refused(r, "training.recompute_layers = 3 exceeds the 2 decoder layers of each pipeline stage");
  r.recompute.layers = 1;
  r.recompute.pipeline_stages = 3;
  expect_refused(r, "pipeline stages (pp) must be in [1, num_hidden_layers = 2] (got 3)");
  r.recompute.layers = -1;
  r.recompute.pipeline_stages = 1;
  expect_refused(r, "training.recompute_layers must be >= 0 (got -1)");
  training_regime vision = with_policy(recompute_policy::full, true);
  try {
    compute_coefficients(testing::small_text_model(), vision);
    ADD_FAILURE() << "recompute_vision on a text-only model was accepted";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("training.recompute_vision: model 'small' has no vision tower"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(parse_recompute_policy("full_early_stop", "--recompute"), recompute_policy::full_early_stop);
  try {
    parse_recompute_policy("block", "--recompute");
    ADD_FAILURE();
  } catch (const error& e) {
    EXPECT_EQ(std::string(e.what()),
              "--recompute: unknown recompute policy 'block' (expected one of \"none\", \"full\", "
              "\"full_early_stop\", \"selective\", \"op\")");
  }
}

}  // namespace
}  // namespace flopmeter
