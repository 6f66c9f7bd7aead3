// Tests of the exact FLOP model: the coefficients of every shipped config against hand-derived values, the
// batch identities (lengths / cu_seqlens / positions), padding, video per temporal patch, scopes, errors and
// numeric range.
#include "flopmeter/flop_model.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "accounting/count_event.h"  // internal: count_event
#include "count/count_fields.h"      // internal: kCountFields
#include "count/exact_flops.h"       // internal: exact_model_flops, model_flop_weights
#include "flopmeter/error.h"
#include "flopmeter/model_config.h"
#include "support/error_message.h"
#include "support/small_models.h"

namespace flopmeter {
namespace {

using testing::small_vlm;

model_spec load_shipped(const std::string& stem) {
  return load_model_spec(std::string(FLOPMETER_SOURCE_DIR) + "/model_configs/" + stem + ".toml");
}

struct expected_coefficients {
  const char* config;
  std::int64_t dense_per_token;
  std::int64_t text_attn_pair;
  std::int64_t vision_per_patch;
  std::int64_t vision_attn_pair;
  std::int64_t patch_embed_per_patch;
  std::int64_t merger_per_merged_token;
};

// Derivations (6 = 3 passes x 2 FLOPs per multiply-add; every count below is multiply-adds per token):
//
// qwen3_vl_2b: h=2048, L=28 (all full attention), nh=16, nkv=8, hd=128, I=6144, V=151936, no gate.
//   attention projections h*(q + 2kv + o) = 2048*(2048 + 2048 + 2048)       = 12,582,912
//   SwiGLU 3*h*I = 3*2048*6144                                               = 37,748,736
//   logits h*V = 2048*151936                                                 = 311,164,928
//   dense = 6*(28*(12,582,912 + 37,748,736) + 311,164,928) = 6*1,720,451,072 = 10,322,706,432
//   pair  = 6 * 2*nh*hd * 28 = 6*4096*28                                      = 688,128
//   ViT: depth 24, hv 1024, Iv 4096: 6*24*(4*1024^2 + 2*1024*4096) = 144*12,582,912 = 1,811,939,328
//   ViT pair 6*24*2*1024 = 294,912; patch embed 4*1536*1024 = 6,291,456 (pixels need no gradient:
//   forward + weight gradient only, 2 GEMMs x 2 FLOPs)
//   mergers (1 + 3 deepstack), width 4*1024 = 4096: 6*4*(4096^2 + 4096*2048) = 24*25,165,824 = 603,979,776
//
// qwen3_vl_4b: h=2560, L=36, nh=32, nkv=8, hd=128, I=9728, V=151936.
//   attention 2560*(4096 + 2048 + 4096) = 26,214,400; SwiGLU 3*2560*9728 = 74,711,040; logits 2560*151936 = 388,956,160
//   dense = 6*(36*100,925,440 + 388,956,160) = 6*4,022,272,000 = 24,133,632,000
//   pair = 6*2*32*128*36 = 1,769,472; ViT as 2B (same tower) = 1,811,939,328, pair 294,912, embed 6,291,456
//   mergers 6*4*(4096^2 + 4096*2560) = 24*27,262,976 = 654,311,424
//
// qwen3_5_0_8b: h=1024, L=24 (6 full at i=3,7,..; 18 Gated DeltaNet), nh=8, nkv=2, hd=256, gate on, I=3584,
//   V=248320; DeltaNet dk=dv=128, Hk=16, Hv=16, kernel 4.
//   full attention: 1024*(2*2048 + 2*512 + 2048) = 1024*7168                           = 7,340,032
//   DeltaNet: qk=16*128=2048, v=2048: in_proj 1024*(2*2048 + 2*2048 + 2*16) = 8,421,376;
//     conv 4*(2*2048 + 2048) = 24,576; delta rule 4*16*128*128 = 1,048,576; out 2048*1024 = 2,097,152
//     total = 11,591,680
//   SwiGLU 3*1024*3584 = 11,010,048; logits 1024*248320 = 254,279,680
//   dense = 6*(6*7,340,032 + 18*11,591,680 + 24*11,010,048 + 254,279,680) = 6*771,211,264 = 4,627,267,584
//   pair = 6*2*8*256*6 = 147,456
//   ViT: depth 12, hv 768, Iv 3072: 6*12*(4*768^2 + 2*768*3072) = 72*7,077,888 = 509,607,936; pair 6*12*2*768 = 110,592
//   embed 4*1536*768 = 4,718,592; one merger, width 3072: 6*(3072^2 + 3072*1024) = 75,497,472
//
// qwen3_5_2b: h=2048, L=24 (6 full), nh=8, nkv=2, hd=256, gate, I=6144, V=248320; DeltaNet Hk=Hv=16.
//   full attention 2048*7168 = 14,680,064; DeltaNet: in_proj 2048*8224 = 16,842,752, conv 24,576,
//     delta 1,048,576, out 4,194,304 -> 22,110,208; SwiGLU 37,748,736; logits 2048*248320 = 508,559,360
//   dense = 6*(6*14,680,064 + 18*22,110,208 + 24*37,748,736 + 508,559,360) = 6*1,900,593,152 = 11,403,558,912
//   pair = 147,456; ViT (depth 24, hv 1024) 1,811,939,328, pair 294,912, embed 6,291,456
//   one merger, width 4096: 6*(4096^2 + 4096*2048) = 150,994,944
//
// qwen3_5_9b: h=4096, L=32 (8 full), nh=16, nkv=4, hd=256, gate, I=12288, V=248320; DeltaNet Hk=16, Hv=32.
//   full attention 4096*(2*4096 + 2*1024 + 4096) = 4096*14336 = 58,720,256
//   DeltaNet: qk=2048, v=4096: in_proj 4096*(4096 + 8192 + 64) = 50,593,792; conv 4*(4096 + 4096) = 32,768;
//     delta 4*32*128*128 = 2,097,152; out 4096*4096 = 16,777,216 -> 69,500,928
//   SwiGLU 3*4096*12288 = 150,994,944; logits 4096*248320 = 1,017,118,720
//   dense = 6*(8*58,720,256 + 24*69,500,928 + 32*150,994,944 + 1,017,118,720) = 6*7,986,741,248 = 47,920,447,488
//   pair = 6*2*16*256*8 = 393,216
//   ViT: depth 27, hv 1152, Iv 4304: 6*27*(4*1152^2 + 2*1152*4304) = 162*15,224,832 = 2,466,422,784
//   ViT pair 6*27*2*1152 = 373,248; embed 4*1536*1152 = 7,077,888
//   one merger, width 4608: 6*(4608^2 + 4608*4096) = 6*40,108,032 = 240,648,192
//
// The 27-block ViT (hv 1152, Iv 4304) of every config below: vision_per_patch 2,466,422,784, pair 373,248,
// embed 7,077,888 (as qwen3_5_9b); a merger of width 4608 costs 4608^2 + 4608*out multiply-adds.
//
// qwen3_vl_8b: h=4096, L=36, nh=32, nkv=8, hd=128, I=12288, V=151936.
//   attention 4096*(4096 + 2048 + 4096) = 41,943,040; SwiGLU 3*4096*12288 = 150,994,944; logits 4096*151936 = 622,329,856
//   dense = 6*(36*192,937,984 + 622,329,856) = 6*7,568,097,280 = 45,408,583,680;  pair 6*2*32*128*36 = 1,769,472
//   mergers (1 + 3 deepstack): 6*4*(4608^2 + 4608*4096) = 24*40,108,032 = 962,592,768
//
// qwen3_vl_32b: h=5120, L=64, nh=64, nkv=8, hd=128, I=25600, V=151936.
//   attention 5120*(8192 + 2048 + 8192) = 94,371,840; SwiGLU 3*5120*25600 = 393,216,000; logits 777,912,320
//   dense = 6*(64*487,587,840 + 777,912,320) = 6*31,983,534,080 = 191,901,204,480;  pair 6*2*64*128*64 = 6,291,456
//   mergers 6*4*(4608^2 + 4608*5120) = 24*44,826,624 = 1,075,838,976
//
// qwen3_5_27b: h=5120, L=64 (16 full, 48 Gated DeltaNet), nh=24, nkv=4, hd=256, gate, I=17408, V=248320;
//   DeltaNet Hk=16, Hv=48, dk=dv=128, kernel 4.
//   full attention 5120*(2*6144 + 2*1024 + 6144) = 5120*20480 = 104,857,600
//   DeltaNet: qk=2048, v=6144: in_proj 5120*(4096 + 12288 + 96) = 84,377,600; conv 4*(4096 + 6144) = 40,960;
//     delta 4*48*128*128 = 3,145,728; out 6144*5120 = 31,457,280 -> 119,021,568
//   SwiGLU 3*5120*17408 = 267,386,880; logits 5120*248320 = 1,271,398,400
//   dense = 6*(16*104,857,600 + 48*119,021,568 + 64*267,386,880 + 1,271,398,400) = 6*25,774,915,584
//         = 154,649,493,504;  pair 6*2*24*256*16 = 1,179,648;  one merger 6*44,826,624 = 268,959,744
//
// Mixture of experts (dropless routing; per MoE layer and token: router h*E, k routed SwiGLU experts
// 3*h*I_moe each, shared SwiGLU expert 3*h*I_shared and its gate h*1):
//
// qwen3_vl_30b_a3b: h=2048, L=48 (all full attention, all MoE), nh=32, nkv=4, hd=128, V=151936;
//   E=128, k=8, I_moe=768, no shared expert.
//   attention 2048*(4096 + 1024 + 4096) = 18,874,368      x48 x6 = 5,435,817,984
//   router 2048*128 = 262,144                             x48 x6 =    75,497,472
//   routed experts 8*3*2048*768 = 37,748,736              x48 x6 = 10,871,635,968
//   logits 2048*151936 = 311,164,928                          x6 =  1,866,989,568
//   dense = 18,249,940,992;  pair 6*2*32*128*48 = 2,359,296
//   mergers (1 + 3 deepstack) 6*4*(4608^2 + 4608*2048) = 24*30,670,848 = 736,100,352
//
// qwen3_5_35b_a3b: h=2048, L=40 (10 full, 30 Gated DeltaNet, all MoE), nh=16, nkv=2, hd=256, gate, V=248320;
//   DeltaNet Hk=16, Hv=32, dk=dv=128, kernel 4; E=256, k=8, I_moe=512, I_shared=512.
//   full attention 2048*(2*4096 + 2*512 + 4096) = 27,262,976          x10 x6 = 1,635,778,560
//   DeltaNet: qk=2048, v=4096: in_proj 2048*(4096 + 8192 + 64) = 25,296,896; conv 4*8192 = 32,768;
//     delta 4*32*128*128 = 2,097,152; out 4096*2048 = 8,388,608 -> 35,815,424   x30 x6 = 6,446,776,320
//   router 2048*256 = 524,288                                          x40 x6 =   125,829,120
//   routed experts 8*3*2048*512 = 25,165,824                           x40 x6 = 6,039,797,760
//   shared expert 3*2048*512 = 3,145,728                               x40 x6 =   754,974,720
//   shared-expert gate 2048                                            x40 x6 =       491,520
//   logits 2048*248320 = 508,559,360                                       x6 = 3,051,356,160
//   dense = 18,055,004,160;  pair 6*2*16*256*10 = 491,520;  one merger 6*30,670,848 = 184,025,088
//
// qwen3_vl_235b_a22b: h=4096, L=94 (all full attention, all MoE), nh=64, nkv=4, hd=128, V=151936;
//   E=128, k=8, I_moe=1536, no shared expert; vision tower as qwen3_vl_8b (out 4096, 3 deepstack mergers).
//   attention 4096*(8192 + 1024 + 8192) = 71,303,168      x94 x6 = 40,214,986,752
//   router 4096*128 = 524,288                             x94 x6 =    295,698,432
//   routed experts 8*3*4096*1536 = 150,994,944            x94 x6 = 85,161,148,416
//   logits 4096*151936 = 622,329,856                          x6 =  3,733,979,136
//   dense = 129,405,812,736;  pair 6*2*64*128*94 = 9,240,576
//   mergers (1 + 3 deepstack) 6*4*(4608^2 + 4608*4096) = 24*40,108,032 = 962,592,768
//
// qwen3_5_397b_a17b: h=4096, L=60 (15 full, 45 Gated DeltaNet, all MoE), nh=32, nkv=2, hd=256, gate, V=248320;
//   DeltaNet Hk=16, Hv=64, dk=dv=128, kernel 4; E=512, k=10, I_moe=1024, I_shared=1024.
//   full attention 4096*(2*8192 + 2*512 + 8192) = 104,857,600         x15 x6 =  9,437,184,000
//   DeltaNet: qk=2048, v=8192: in_proj 4096*(4096 + 8192 + 8192 + 128) = 84,410,368; conv 4*12288 = 49,152;
//     delta 4*64*128*128 = 4,194,304; out 8192*4096 = 33,554,432 -> 122,208,256   x45 x6 = 32,996,229,120
//   router 4096*512 = 2,097,152                                          x60 x6 =    754,974,720
//   routed experts 10*3*4096*1024 = 125,829,120                          x60 x6 = 45,298,483,200
//   shared expert 3*4096*1024 = 12,582,912                               x60 x6 =  4,529,848,320
//   shared-expert gate 4096                                              x60 x6 =      1,474,560
//   logits 4096*248320 = 1,017,118,720                                       x6 =  6,102,712,320
//   dense = 99,120,906,240;  pair 6*2*32*256*15 = 1,474,560;  one merger 6*40,108,032 = 240,648,192
//
// qwen3_5_122b_a10b: h=3072, L=48 (12 full, 36 Gated DeltaNet, all MoE), nh=32, nkv=2, hd=256, gate, V=248320;
//   DeltaNet Hk=16, Hv=64, dk=dv=128, kernel 4; E=256, k=8, I_moe=1024, I_shared=1024.
//   full attention 3072*(2*8192 + 2*512 + 8192) = 78,643,200           x12 x6 =  5,662,310,400
//   DeltaNet: qk=2048, v=8192: in_proj 3072*(4096 + 8192 + 8192 + 128) = 63,307,776; conv 4*12288 = 49,152;
//     delta 4*64*128*128 = 4,194,304; out 8192*3072 = 25,165,824 -> 92,717,056    x36 x6 = 20,026,884,096
//   router 3072*256 = 786,432                                            x48 x6 =    226,492,416
//   routed experts 8*3*3072*1024 = 75,497,472                            x48 x6 = 21,743,271,936
//   shared expert 3*3072*1024 = 9,437,184                                x48 x6 =  2,717,908,992
//   shared-expert gate 3072                                              x48 x6 =        884,736
//   logits 3072*248320 = 762,839,040                                         x6 =  4,577,034,240
//   dense = 54,954,786,816;  pair 6*2*32*256*12 = 1,179,648;  one merger 6*(4608^2 + 4608*3072) = 212,336,640
const expected_coefficients kShipped[] = {
    {"qwen3_vl_2b", 10322706432, 688128, 1811939328, 294912, 6291456, 603979776},
    {"qwen3_vl_4b", 24133632000, 1769472, 1811939328, 294912, 6291456, 654311424},
    {"qwen3_5_0_8b", 4627267584, 147456, 509607936, 110592, 4718592, 75497472},
    {"qwen3_5_2b", 11403558912, 147456, 1811939328, 294912, 6291456, 150994944},
    {"qwen3_5_9b", 47920447488, 393216, 2466422784, 373248, 7077888, 240648192},
    {"qwen3_vl_8b", 45408583680, 1769472, 2466422784, 373248, 7077888, 962592768},
    {"qwen3_vl_32b", 191901204480, 6291456, 2466422784, 373248, 7077888, 1075838976},
    {"qwen3_5_27b", 154649493504, 1179648, 2466422784, 373248, 7077888, 268959744},
    {"qwen3_vl_30b_a3b", 18249940992, 2359296, 2466422784, 373248, 7077888, 736100352},
    {"qwen3_5_35b_a3b", 18055004160, 491520, 2466422784, 373248, 7077888, 184025088},
    {"qwen3_vl_235b_a22b", 129405812736, 9240576, 2466422784, 373248, 7077888, 962592768},
    {"qwen3_5_397b_a17b", 99120906240, 1474560, 2466422784, 373248, 7077888, 240648192},
    {"qwen3_5_122b_a10b", 54954786816, 1179648, 2466422784, 373248, 7077888, 212336640},
};

class shipped_coefficients : public ::testing::TestWithParam<expected_coefficients> {};

TEST_P(shipped_coefficients, match_hand_derivation) {
  const expected_coefficients& e = GetParam();
  const coefficients c = compute_coefficients(load_shipped(e.config));
  EXPECT_EQ(c.dense_per_token, e.dense_per_token);
  EXPECT_EQ(c.text_attn_pair, e.text_attn_pair);
  EXPECT_EQ(c.vision_per_patch, e.vision_per_patch);
  EXPECT_EQ(c.vision_attn_pair, e.vision_attn_pair);
  EXPECT_EQ(c.patch_embed_per_patch, e.patch_embed_per_patch);
  EXPECT_EQ(c.merger_per_merged_token, e.merger_per_merged_token);
  EXPECT_EQ(c.patches_per_merged_token, 4);
  // MTP layers are not trained by default, so they cost nothing.
  EXPECT_EQ(c.mtp_per_token, 0);
  EXPECT_EQ(c.mtp_attn_pair, 0);
  // The breakdown sums to dense_per_token.
  const dense_terms& d = c.dense;
  EXPECT_EQ(d.attention_projections + d.linear_attention + d.dense_mlp + d.moe_router + d.moe_routed_experts +
                d.moe_shared_expert + d.moe_shared_expert_gate + d.logits,
            c.dense_per_token);
}

// The MoE parts one by one (derivations above the table).
TEST(moe, qwen3_vl_30b_a3b_breakdown) {
  const dense_terms d = compute_coefficients(load_shipped("qwen3_vl_30b_a3b")).dense;
  EXPECT_EQ(d.attention_projections, 5435817984);
  EXPECT_EQ(d.linear_attention, 0);
  EXPECT_EQ(d.dense_mlp, 0);  // every layer is MoE: intermediate_size (6144) is unused
  EXPECT_EQ(d.moe_router, 75497472);
  EXPECT_EQ(d.moe_routed_experts, 10871635968);
  EXPECT_EQ(d.moe_shared_expert, 0);
  EXPECT_EQ(d.moe_shared_expert_gate, 0);
  EXPECT_EQ(d.logits, 1866989568);
}

TEST(moe, qwen3_5_35b_a3b_breakdown) {
  const dense_terms d = compute_coefficients(load_shipped("qwen3_5_35b_a3b")).dense;
  EXPECT_EQ(d.attention_projections, 1635778560);
  EXPECT_EQ(d.linear_attention, 6446776320);
  EXPECT_EQ(d.dense_mlp, 0);
  EXPECT_EQ(d.moe_router, 125829120);
  EXPECT_EQ(d.moe_routed_experts, 6039797760);
  EXPECT_EQ(d.moe_shared_expert, 754974720);
  EXPECT_EQ(d.moe_shared_expert_gate, 491520);
  EXPECT_EQ(d.logits, 3051356160);
}

TEST(moe, trained_mtp_layer_of_an_moe_model_is_an_moe_layer) {
  model_spec spec = load_shipped("qwen3_5_35b_a3b");
  spec.train_mtp_layers = true;
  const coefficients c = compute_coefficients(spec);
  // One MTP layer: eh_proj 2*2048^2 = 8,388,608; full attention 27,262,976; MoE block = router 524,288 +
  // routed 25,165,824 + shared 3,145,728 + gate 2048 = 28,837,888; logits 508,559,360.
  // Sum 573,048,832, x6 = 3,438,292,992 (a SwiGLU of intermediate_size would give a different number: the
  // model has none).
  EXPECT_EQ(c.mtp_per_token, 3438292992);
  EXPECT_EQ(c.mtp_attn_pair, 6 * 2 * 16 * 256);
}

// Dense SwiGLU layers of an MoE model: off the decoder_sparse_step stride or in mlp_only_layers.
TEST(moe, sparse_step_and_mlp_only_layers_make_dense_layers) {
  model_spec spec = testing::small_text_model();  // h=8, L=2, attention 192, logits 80 (small_models.h)
  spec.model_type = "qwen3_vl_moe";
  spec.text.num_hidden_layers = 4;
  spec.text.num_experts = 4;
  spec.text.num_experts_per_tok = 2;
  spec.text.moe_intermediate_size = 2;
  spec.text.decoder_sparse_step = 2;  // layers 1 and 3 are MoE ...
  spec.text.mlp_only_layers = {3};    // ... but 3 is forced dense: 1 MoE layer, 3 dense
  validate_model_spec(spec);
  const dense_terms d = compute_coefficients(spec).dense;
  EXPECT_EQ(d.dense_mlp, 6 * 3 * (3 * 8 * 16));      // 3 layers x SwiGLU 3*h*I = 384
  EXPECT_EQ(d.moe_router, 6 * 1 * (8 * 4));          // h*E = 32
  EXPECT_EQ(d.moe_routed_experts, 6 * 1 * (2 * 3 * 8 * 2));  // k * 3*h*I_moe = 96
  EXPECT_EQ(d.attention_projections, 6 * 4 * 192);
}

// Before, cost grew with num_hidden_layers (a per-layer vector). Layer kinds are counted, so a near-maximal
// layer count is as cheap as a small one, and the coefficients follow from the counts.
TEST(range, layer_count_near_its_bound_costs_nothing_per_layer) {
  model_spec spec = load_shipped("qwen3_5_0_8b");
  spec.text.num_hidden_layers = std::int64_t{1} << 31;  // 2^31 layers: 2^29 full attention, 3*2^29 DeltaNet
  spec.vision.reset();
  const coefficients c = compute_coefficients(spec);
  // 6*(2^29*7,340,032 + 3*2^29*11,591,680 + 2^31*11,010,048 + 254,279,680) (per-layer figures of qwen3_5_0_8b):
  //   7*2^49 + 4245*2^42 + 21*2^50 + 254,279,680 = 46,254,255,411,560,448; x6 = 277,525,532,469,362,688.
  EXPECT_EQ(c.dense_per_token, 277525532469362688);
  EXPECT_EQ(c.text_attn_pair, 6 * 2 * 8 * 256 * (std::int64_t{1} << 29));
}

// Before, the merger coefficient wrapped in 128-bit arithmetic ((m^2 hv)^2 with a large spatial_merge_size),
// giving a negative, zero or garbage coefficient. Now it saturates and names the fields.
TEST(overflow, merger_coefficient_does_not_wrap_and_names_the_fields) {
  model_spec spec = testing::small_vlm();
  spec.vision->spatial_merge_size = std::int64_t{1} << 31;  // width m^2 * hv = 2^64: width^2 = 2^128 wraps to 0
  try {
    (void)compute_coefficients(spec);
    FAIL() << "no coefficient_overflow";
  } catch (const coefficient_overflow& e) {
    EXPECT_EQ(e.coefficient(), "merger_per_merged_token");
    EXPECT_EQ(e.fields(), (std::vector<std::string>{"vision.spatial_merge_size", "vision.hidden_size"}));
    EXPECT_STREQ(e.what(), "coefficient merger_per_merged_token exceeds 2^63 FLOPs: the product of "
                           "vision.spatial_merge_size, vision.hidden_size is too large");
  }
}

// Before, dense_per_token + mtp_per_token passed 2^63 and `check` printed a wrapped int64. Each fits; the sum
// does not: refused.
TEST(overflow, dense_plus_mtp_must_fit_together) {
  model_spec spec = testing::small_text_model();
  spec.model_type = "qwen3_5";
  spec.text.num_hidden_layers = 1;
  spec.text.full_attention_interval = 1;
  spec.text.intermediate_size = 1;
  spec.text.vocab_size = std::int64_t{1} << 31;
  spec.text.hidden_size = 400000000;  // logits 6*h*V = 5.15e18 < 2^63 = 9.22e18
  spec.text.num_attention_heads = 1;
  spec.text.num_key_value_heads = 1;
  spec.text.head_dim = 1;
  // MTP: 6*(2h^2 + ... + h*V) = 7.07e18 < 2^63 on its own, but dense + MTP = 1.22e19 > 2^63.
  spec.text.mtp_num_hidden_layers = 1;
  spec.train_mtp_layers = false;
  EXPECT_NO_THROW((void)compute_coefficients(spec));
  spec.train_mtp_layers = true;
  try {
    (void)compute_coefficients(spec);
    FAIL() << "no coefficient_overflow";
  } catch (const coefficient_overflow& e) {
    EXPECT_EQ(e.coefficient(), "dense_per_token + mtp_per_token");
    EXPECT_EQ(e.fields(), (std::vector<std::string>{"text.hidden_size", "text.vocab_size"}));
  }
}

// Before, documents of 3,037,000,500 to 4,294,967,295 tokens were refused although L(L+1)/2 fits.
TEST(range, longest_document_whose_pair_count_fits) {
  const vision_geometry none;
  // 3,037,000,500 (first L whose L(L+1) overflows): pairs = 1,518,500,250 * 3,037,000,501.
  const std::int64_t first[] = {3037000500};
  EXPECT_EQ(count_from_lengths(first, 0, {}, none).causal_pairs, std::int64_t{1518500250} * 3037000501);
  // 2^32 - 1: pairs = (2^32 - 1) * 2^31 = 9,223,372,034,707,292,160 <= 2^63 - 1.
  const std::int64_t last[] = {4294967295};
  EXPECT_EQ(count_from_lengths(last, 0, {}, none).causal_pairs, std::int64_t{4294967295} * (std::int64_t{1} << 31));
  // 2^32: 2^31 * (2^32 + 1) > 2^63 - 1: refused, naming the entry.
  const std::int64_t too_long[] = {4294967296};
  EXPECT_EQ(testing::error_message_of([&] { (void)count_from_lengths(too_long, 0, {}, none); }),
            "document_lengths[0] = 4294967296: causal pair count overflows a 64-bit count");
}

INSTANTIATE_TEST_SUITE_P(all_configs, shipped_coefficients, ::testing::ValuesIn(kShipped),
                         [](const ::testing::TestParamInfo<expected_coefficients>& param_info) {
                           return std::string(param_info.param.config);
                         });

TEST(mtp, trained_mtp_layer_costs_a_full_attention_layer_plus_projection_and_logits) {
  model_spec spec = load_shipped("qwen3_5_0_8b");
  spec.train_mtp_layers = true;
  const coefficients c = compute_coefficients(spec);
  // One MTP layer of qwen3_5_0_8b: eh_proj 2*1024*1024 = 2,097,152; full attention 7,340,032;
  // SwiGLU 11,010,048; logits 254,279,680. Sum 274,726,912, x6 = 1,648,361,472.
  EXPECT_EQ(c.mtp_per_token, 1648361472);
  // Attention per pair as one more full-attention layer: 6*2*8*256 = 24,576.
  EXPECT_EQ(c.mtp_attn_pair, 24576);
  // The reference's four are unchanged.
  EXPECT_EQ(c.dense_per_token, 4627267584);
}


TEST(coefficients, small_model_by_hand) {
  const coefficients c = compute_coefficients(small_vlm());
  // attention h*(q + 2kv + o) = 8*(8 + 8 + 8) = 192; SwiGLU 3*8*16 = 384; logits 8*10 = 80.
  // dense = 6*(2*(192 + 384) + 80) = 6*1232 = 7392.  pair = 6*2*2*4*2 = 192.
  EXPECT_EQ(c.dense_per_token, 7392);
  EXPECT_EQ(c.text_attn_pair, 192);
  // ViT: 6*1*(4*16 + 2*4*8) = 6*128 = 768; pair 6*1*2*4 = 48; embed 4*(1*1*4)*4 = 64 (no input gradient);
  // merger width 16: 6*(256 + 16*8) = 2304.
  EXPECT_EQ(c.vision_per_patch, 768);
  EXPECT_EQ(c.vision_attn_pair, 48);
  EXPECT_EQ(c.patch_embed_per_patch, 64);
  EXPECT_EQ(c.merger_per_merged_token, 2304);
}

TEST(batch, lengths_cu_seqlens_and_positions_agree) {
  const vision_geometry g = geometry_of(small_vlm());
  const std::vector<std::int64_t> lengths = {3, 1, 4, 0, 2};
  const std::vector<std::int64_t> cu = {0, 3, 4, 8, 8, 10};
  // A zero-length document has no positions, so the positions form has 4 documents.
  const std::vector<std::int64_t> positions = {0, 1, 2, 0, 0, 1, 2, 3, 0, 1};
  const std::vector<image_grid> grids = {{1, 2, 2}, {2, 4, 2}};
  const batch_counts a = count_from_lengths(lengths, 5, grids, g);
  const batch_counts b = count_from_cu_seqlens(cu, 5, grids, g);
  batch_counts c = count_from_positions(positions, 5, grids, g);
  EXPECT_EQ(a, b);
  // pairs: 3*4/2 + 1 + 4*5/2 + 0 + 2*3/2 = 6 + 1 + 10 + 0 + 3 = 20
  EXPECT_EQ(a.causal_pairs, 20);
  EXPECT_EQ(a.real_tokens, 10);
  EXPECT_EQ(a.padding_tokens, 5);
  EXPECT_EQ(a.documents, 5);
  EXPECT_EQ(c.documents, 4);
  c.documents = a.documents;
  EXPECT_EQ(a, c);
  // grids: patches 4 + 16 = 20; merged 1 + 4 = 5; per frame 1*4^2 + 2*8^2 = 16 + 128 = 144; whole 16 + 256 = 272
  EXPECT_EQ(a.items, 2);
  EXPECT_EQ(a.patches, 20);
  EXPECT_EQ(a.merged_tokens, 5);
  EXPECT_EQ(a.vision_pairs_per_frame, 144);
  EXPECT_EQ(a.vision_pairs_whole, 272);
}

TEST(batch, flops_by_term_and_scope) {
  const model_spec spec = small_vlm();
  const coefficients c = compute_coefficients(spec);
  const std::vector<std::int64_t> lengths = {3, 5};
  const std::vector<image_grid> video = {{2, 2, 2}};
  const batch_counts n = count_from_lengths(lengths, 2, video, geometry_of(spec));
  // tokens 8 real + 2 padding = 10; pairs 6 + 15 = 21; patches 8; merged 2; per frame 2*16 = 32; whole 64.
  const flop_breakdown complete = compute_flops(c, n, flop_scope::complete);
  EXPECT_EQ(complete.text_dense, 7392.0 * 10);
  EXPECT_EQ(complete.text_attention, 192.0 * 21);
  EXPECT_EQ(complete.vision_dense, 768.0 * 8);
  EXPECT_EQ(complete.vision_attention, 48.0 * 32);
  EXPECT_EQ(complete.patch_embed, 64.0 * 8);
  EXPECT_EQ(complete.merger, 2304.0 * 2);
  EXPECT_EQ(complete.mtp, 0.0);
  // 73920 + 4032 + 6144 + 1536 + 512 + 4608 = 90752
  EXPECT_EQ(complete.total(), 90752.0);
  const flop_breakdown seed = compute_flops(c, n, flop_scope::seed);
  // The reference bills the video's attention over all 8 patches at once (64 pairs) and leaves out the
  // patch embedding and mergers: 73920 + 4032 + 6144 + 48*64 = 87168.
  EXPECT_EQ(seed.vision_attention, 48.0 * 64);
  EXPECT_EQ(seed.patch_embed, 0.0);
  EXPECT_EQ(seed.merger, 0.0);
  EXPECT_EQ(seed.total(), 87168.0);
}

TEST(batch, padding_costs_dense_work_only) {
  const model_spec spec = small_vlm();
  const coefficients c = compute_coefficients(spec);
  const std::vector<std::int64_t> lengths = {4};
  const flop_breakdown without = compute_flops(c, count_from_lengths(lengths, 0, {}, geometry_of(spec)), flop_scope::complete);
  const flop_breakdown with = compute_flops(c, count_from_lengths(lengths, 6, {}, geometry_of(spec)), flop_scope::complete);
  EXPECT_EQ(with.text_dense - without.text_dense, 6.0 * 7392);
  EXPECT_EQ(with.text_attention, without.text_attention);
}

TEST(batch, counts_add_across_microbatches) {
  const vision_geometry g = geometry_of(small_vlm());
  const std::vector<std::int64_t> first = {3}, second = {5};
  batch_counts sum = count_from_lengths(first, 1, {}, g);
  sum += count_from_lengths(second, 2, {}, g);
  const std::vector<std::int64_t> both = {3, 5};
  EXPECT_EQ(sum, count_from_lengths(both, 3, {}, g));
}

TEST(range, million_token_row_and_hundred_thousand_patch_item_are_exact) {
  const model_spec spec = load_shipped("qwen3_5_9b");
  const coefficients c = compute_coefficients(spec);
  const std::vector<std::int64_t> row = {1000000};
  // 100k patches: 1 x 250 x 400 (both even). Per frame pairs (1e5)^2 = 1e10.
  const std::vector<image_grid> item = {{1, 250, 400}};
  const batch_counts n = count_from_lengths(row, 0, item, geometry_of(spec));
  EXPECT_EQ(n.causal_pairs, 500000500000);  // 1e6 * (1e6 + 1) / 2
  EXPECT_EQ(n.vision_pairs_per_frame, 10000000000);
  const flop_breakdown f = compute_flops(c, n, flop_scope::complete);
  // text attention = 393,216 * 500,000,500,000 = 196,608,196,608,000,000 (1.97e17): above 2^53, so the
  // double holds it to within one rounding (relative 2^-53).
  EXPECT_NEAR(f.text_attention / 196608196608000000.0, 1.0, 1.2e-16);
  EXPECT_EQ(f.text_dense, 47920447488.0 * 1e6);
}

TEST(range, hundred_thousand_documents) {
  const vision_geometry g;
  const std::vector<std::int64_t> lengths(100000, 10);
  const batch_counts n = count_from_lengths(lengths, 0, {}, g);
  EXPECT_EQ(n.documents, 100000);
  EXPECT_EQ(n.causal_pairs, 100000 * 55);
}

void expect_error(const std::function<void()>& call, const std::string& fragment) {
  try {
    call();
    ADD_FAILURE() << "expected a flopmeter::error containing '" << fragment << "'";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(bad_batch, each_error_names_the_entry) {
  const vision_geometry g = geometry_of(small_vlm());
  const vision_geometry text_only;
  const std::vector<std::int64_t> negative = {3, -1};
  expect_error([&] { count_from_lengths(negative, 0, {}, g); }, "document_lengths[1]: document length must be >= 0 (got -1)");
  const std::vector<std::int64_t> huge = {INT64_MAX};
  expect_error([&] { count_from_lengths(huge, 0, {}, g); }, "overflows a 64-bit count");
  // 5e9 tokens: L(L+1)/2 = 1.25e19 > 2^63.
  const std::vector<std::int64_t> too_long = {5000000000};
  expect_error([&] { count_from_lengths(too_long, 0, {}, g); }, "document_lengths[0] = 5000000000: causal pair count");
  // Two documents whose lengths fit but whose sum of tokens does not.
  const std::vector<std::int64_t> sum_overflow = {3000000000, INT64_MAX / 2};
  expect_error([&] { count_from_lengths(sum_overflow, 0, {}, g); }, "overflows");
  expect_error([&] { count_from_lengths({}, -3, {}, g); }, "padding_tokens must be >= 0 (got -3)");
  const std::vector<std::int64_t> one = {1};
  expect_error([&] { count_from_lengths(one, INT64_MAX, {}, g); }, "real tokens + padding_tokens overflows");
  const std::vector<image_grid> zero = {{1, 2, 2}, {1, 0, 2}};
  expect_error([&] { count_from_lengths({}, 0, zero, g); }, "grid_thw[1] = (1, 0, 2): t, h and w must be >= 1");
  const std::vector<image_grid> odd = {{1, 3, 2}};
  expect_error([&] { count_from_lengths({}, 0, odd, g); }, "multiples of spatial_merge_size 2");
  const std::vector<image_grid> fine = {{1, 2, 2}};
  expect_error([&] { count_from_lengths({}, 0, fine, text_only); }, "no vision tower");
  const std::vector<image_grid> enormous = {{1000000, 1000000, 1000000}};
  expect_error([&] { count_from_lengths({}, 0, enormous, g); }, "overflows a 64-bit count");
  const std::vector<std::int64_t> cu_start = {1, 3};
  expect_error([&] { count_from_cu_seqlens(cu_start, 0, {}, g); }, "cu_seqlens[0] must be 0 (got 1)");
  const std::vector<std::int64_t> cu_down = {0, 5, 4};
  expect_error([&] { count_from_cu_seqlens(cu_down, 0, {}, g); }, "cu_seqlens[2] = 4 is less than cu_seqlens[1] = 5");
  const std::vector<std::int64_t> pos_start = {1, 2};
  expect_error([&] { count_from_positions(pos_start, 0, {}, g); }, "positions[0] = 1: the first position must be 0");
  const std::vector<std::int64_t> pos_jump = {0, 1, 3};
  expect_error([&] { count_from_positions(pos_jump, 0, {}, g); }, "positions[2] = 3: expected 0 (a new document) or 2");
}

TEST(scope, parse_and_print) {
  EXPECT_EQ(parse_flop_scope("seed", error_location{}), flop_scope::seed);
  EXPECT_EQ(parse_flop_scope("complete", error_location{}), flop_scope::complete);
  EXPECT_STREQ(to_string(flop_scope::seed), "seed");
  expect_error(
      [] {
        parse_flop_scope("all", error_location{"cfg.toml", 3, 9, {}});
      },
      "cfg.toml:3:9: unknown FLOP scope 'all'");
}

// printable_text (flopmeter/error.h), by hand: ESC (0x1b) -> \u001b, BEL -> \u0007, DEL -> \u007f, CSI U+009B
// (bytes C2 9B) -> \u009b, newline -> \u000a; the lone byte 0xff is not UTF-8 -> \xff; U+00E9 (C3 A9),
// U+00A0 (C2 A0, just past the C1 range) and the backslash are kept. With keep_newlines '\n' and '\t' stay.
// Its output has nothing left to escape, so a second pass changes nothing.
TEST(printable, control_characters_and_invalid_utf8_are_escaped_and_the_rest_kept) {
  const std::string hostile = "a\x1b[2J\x07\x7f\xC2\x9B\xff\xC3\xA9\xC2\xA0\\n\n\t";
  const std::string shown = "a\\u001b[2J\\u0007\\u007f\\u009b\\xff\xC3\xA9\xC2\xA0\\n\\u000a\\u0009";
  EXPECT_EQ(printable_text(hostile), shown);
  EXPECT_EQ(printable_text(shown), shown);
  EXPECT_EQ(printable_text("x\ny\tz\r", true), "x\ny\tz\\u000d");
  EXPECT_EQ(printable_text(std::string("nul\0end", 7)), "nul\\u0000end");
}

// Every error is printable, whatever its parts: the file, key and problem from a hostile config cannot drive
// the terminal or log it is printed on. Lines of a multi-line problem stay lines. parse_flop_scope quotes the
// user's value: ESC comes back as \u001b.
TEST(printable, error_messages_escape_every_part) {
  const error e(error_location{"m\x1b]0;t\x07.toml", 3, 9, "model.\xC2\x9Bscope"}, "bad\x1b[2J value\nnext line");
  EXPECT_EQ(std::string(e.what()),
            "m\\u001b]0;t\\u0007.toml:3:9: key 'model.\\u009bscope': bad\\u001b[2J value\nnext line");
  EXPECT_EQ(e.description(), "bad\\u001b[2J value\nnext line");
  EXPECT_EQ(e.where().file, "m\x1b]0;t\x07.toml");  // the location stays as given: it is data
  EXPECT_EQ(std::string(e.in_file("other.toml").what()), std::string(e.what()));
  expect_error(
      [] {
        parse_flop_scope("\x1b[2J", error_location{"cfg.toml", 3, 9, {}});
      },
      "cfg.toml:3:9: unknown FLOP scope '\\u001b[2J'");
}

// ---- what trains: frozen parts and LoRA ---------------------------------------------------------------------
// small_vlm: h 8, 2 full-attention layers (q 8, k 4, v 4, o 8 wide), SwiGLU I 16, vocab 10; ViT hv 4, depth 1,
// Iv 8, merger width 16 -> 8, patch input 4. Per token in multiply-adds: attention projections 8*(8+4+4) + 8*8
// = 192 per layer, SwiGLU 3*8*16 = 384 per layer, logits 80; per pair 2*2*4 = 16 per layer. A pass is 2 FLOPs.

training_regime frozen_parts(std::initializer_list<const char*> parts) {
  training_regime r;
  for (const char* part : parts) add_frozen_part(r, part, "test");
  return r;
}

TEST(regime, full_training_equals_the_plain_coefficients_for_every_shipped_model) {
  for (const char* stem : {"qwen3_vl_2b", "qwen3_vl_30b_a3b", "qwen3_5_2b", "qwen3_5_35b_a3b"}) {
    model_spec spec = load_shipped(stem);
    spec.train_mtp_layers = true;
    const coefficients plain = compute_coefficients(spec);
    const regime_coefficients rc = compute_coefficients(spec, training_regime{});
    for (const coefficients* c : {&rc.with_items, &rc.without_items}) {
      EXPECT_EQ(c->dense_per_token, plain.dense_per_token) << stem;
      EXPECT_EQ(c->dense.linear_attention, plain.dense.linear_attention) << stem;
      EXPECT_EQ(c->dense.moe_router, plain.dense.moe_router) << stem;
      EXPECT_EQ(c->text_attn_pair, plain.text_attn_pair) << stem;
      EXPECT_EQ(c->mtp_per_token, plain.mtp_per_token) << stem;
      EXPECT_EQ(c->mtp_attn_pair, plain.mtp_attn_pair) << stem;
      EXPECT_EQ(c->vision_per_patch, plain.vision_per_patch) << stem;
      EXPECT_EQ(c->patch_embed_per_patch, plain.patch_embed_per_patch) << stem;
      EXPECT_EQ(c->merger_per_merged_token, plain.merger_per_merged_token) << stem;
    }
  }
}

TEST(regime, frozen_parts_by_hand) {
  const model_spec spec = small_vlm();
  // Text frozen, vision and merger train. With items the decoder's input needs a gradient: GEMMs 2 passes,
  // cores 3: dense 2*2*(2*(192 + 384) + 80) = 4928, pair 2*3*16*2 = 192. Without items nothing upstream
  // trains: 1 pass everywhere: 2464 and 64. The vision side keeps its full-training coefficients.
  const regime_coefficients text = compute_coefficients(spec, frozen_parts({"text"}));
  EXPECT_EQ(text.with_items.dense_per_token, 4928);
  EXPECT_EQ(text.with_items.text_attn_pair, 192);
  EXPECT_EQ(text.without_items.dense_per_token, 2464);
  EXPECT_EQ(text.without_items.text_attn_pair, 64);
  EXPECT_EQ(text.with_items.dense.logits, 2 * 2 * 80);  // the frozen LM head: forward + input gradient
  EXPECT_EQ(text.with_items.vision_per_patch, 768);
  EXPECT_EQ(text.with_items.merger_per_merged_token, 2304);
  // Vision frozen: ViT blocks 2*128 = 256, ViT pair 2*8 = 16, patch embedding 2*16 = 32 (forward only); the
  // merger trains and its LayerNorm's weight needs its first GEMM's input gradient: 6*384 = 2304.
  const regime_coefficients vision = compute_coefficients(spec, frozen_parts({"vision"}));
  EXPECT_EQ(vision.with_items.vision_per_patch, 256);
  EXPECT_EQ(vision.with_items.vision_attn_pair, 16);
  EXPECT_EQ(vision.with_items.patch_embed_per_patch, 32);
  EXPECT_EQ(vision.with_items.merger_per_merged_token, 2304);
  EXPECT_EQ(vision.with_items.dense_per_token, 7392);
  EXPECT_EQ(vision.without_items.dense_per_token, 7392);
  // Vision and merger frozen: the merger forward only, 2*384 = 768. Merger frozen alone: its input (the ViT's
  // output) needs a gradient, its weights none: 4*384 = 1536.
  EXPECT_EQ(compute_coefficients(spec, frozen_parts({"vision", "merger"})).with_items.merger_per_merged_token, 768);
  EXPECT_EQ(compute_coefficients(spec, frozen_parts({"merger"})).with_items.merger_per_merged_token, 1536);
  // Vision and text frozen, the merger trains: the decoder as under "text".
  const regime_coefficients merger_only = compute_coefficients(spec, frozen_parts({"vision", "text"}));
  EXPECT_EQ(merger_only.with_items.dense_per_token, 4928);
  EXPECT_EQ(merger_only.without_items.dense_per_token, 2464);
  EXPECT_EQ(merger_only.with_items.merger_per_merged_token, 2304);
}

TEST(regime, a_micro_batch_without_items_is_billed_with_the_itemless_coefficients) {
  const model_spec spec = small_vlm();
  const regime_coefficients text = compute_coefficients(spec, frozen_parts({"text"}));
  const std::int64_t docs[] = {3};
  const image_grid grids[] = {{1, 2, 2}};
  // One micro-batch of 3 tokens (6 pairs) with a 4-patch image, one of 3 tokens + 1 padding without.
  batch_counts n = count_from_lengths(docs, 0, grids, geometry_of(spec));
  EXPECT_EQ(n.itemless_device_tokens, 0);
  const batch_counts plain = count_from_lengths(docs, 1, {}, geometry_of(spec));
  EXPECT_EQ(plain.itemless_device_tokens, 4);
  EXPECT_EQ(plain.itemless_causal_pairs, 6);
  n += plain;
  const flop_breakdown f = compute_flops(text, n, flop_scope::complete);
  EXPECT_EQ(f.text_dense, 3 * 4928 + 4 * 2464);
  EXPECT_EQ(f.text_attention, 6 * 192 + 6 * 64);
  EXPECT_EQ(f.vision_dense, 4 * 768);
  // The exact integer (train/flops_seen's) bills the same split: below 2^53 it is compute_flops' total.
  const std::optional<detail::uint128> exact = detail::exact_model_flops(text, n, flop_scope::complete);
  ASSERT_TRUE(exact);
  EXPECT_EQ(static_cast<double>(*exact), f.total());
  EXPECT_GT(f.total(), 3 * 4928 + 4 * 2464 + 6 * 192 + 6 * 64 + 4 * 768);  // and the patch embed, merger
}

// The FLOPs one unit of each count adds (what a device multiplies its counts by, accounting/flops_seen.h), for
// small_vlm with the decoder frozen, complete scope. The coefficients (small_models.h, and the test above): with
// items dense 4928 per device token and 192 per causal pair, without items 2464 and 64; the vision side trains:
// 768 per patch and per CLS token, 64 patch embed per patch, 48 per pair per frame, 2304 per merged token.
//   real and padding tokens 4928; causal pairs 192; patches 768 + 64 = 832; merged tokens 2304;
//   vision pairs per frame 48; vision CLS tokens 768; the itemless counts are billed within their totals by
//   with_items and by without_items instead: device tokens 2464 - 4928 = -2464, causal pairs 64 - 192 = -128;
//   every other count (documents, items, whole-item pairs, the windows small_vlm lacks) 0.
// Linear: sum of weight x count is exact_model_flops for the mixed counts of the test above, and for counts near
// 2^53 in every field (itemless within their totals), where only 128-bit arithmetic holds the sums.
TEST(regime, flop_weights_are_the_flops_of_one_unit_of_each_count) {
  const model_spec spec = small_vlm();
  const regime_coefficients text = compute_coefficients(spec, frozen_parts({"text"}));
  const std::array<detail::int128, detail::kCountFieldCount> w = detail::model_flop_weights(text, flop_scope::complete);
  std::array<std::int64_t, detail::kCountFieldCount> expected{};
  const auto set = [&](std::int64_t batch_counts::*member, std::int64_t weight) {
    expected[detail::count_field_index(member)] = weight;
  };
  set(&batch_counts::real_tokens, 4928);
  set(&batch_counts::padding_tokens, 4928);
  set(&batch_counts::causal_pairs, 192);
  set(&batch_counts::patches, 832);
  set(&batch_counts::merged_tokens, 2304);
  set(&batch_counts::vision_pairs_per_frame, 48);
  set(&batch_counts::vision_cls_tokens, 768);
  set(&batch_counts::itemless_device_tokens, -2464);
  set(&batch_counts::itemless_causal_pairs, -128);
  for (std::size_t f = 0; f < detail::kCountFieldCount; ++f) {
    EXPECT_TRUE(w[f] == expected[f]) << detail::kCountFields[f].name << ": " << static_cast<double>(w[f]);
  }

  const auto weighted_sum = [&](const batch_counts& n) {
    detail::int128 sum = 0;
    detail::for_each_count_field(
        [&](auto f) { sum += w[f] * static_cast<detail::int128>(n.*detail::kCountMember<decltype(f)::value>); });
    return sum;
  };
  const std::int64_t docs[] = {3};
  const image_grid grids[] = {{1, 2, 2}};
  batch_counts mixed = count_from_lengths(docs, 0, grids, geometry_of(spec));
  mixed += count_from_lengths(docs, 1, {}, geometry_of(spec));
  EXPECT_TRUE(weighted_sum(mixed) ==
              static_cast<detail::int128>(*detail::exact_model_flops(text, mixed, flop_scope::complete)));
  batch_counts large;
  std::int64_t value = (std::int64_t{1} << 53) - 1;
  detail::for_each_count_field([&](auto f) { large.*detail::kCountMember<decltype(f)::value> = value--; });
  large.itemless_device_tokens = large.real_tokens / 3;  // within the device tokens, as count_event forms them
  large.itemless_causal_pairs = large.causal_pairs / 5;
  EXPECT_TRUE(weighted_sum(large) ==
              static_cast<detail::int128>(*detail::exact_model_flops(text, large, flop_scope::complete)));
}

// exact_model_flops keeps every product and the sum in 128 bits, where compute_flops rounds each product to
// double: a document of 2^31 - 1 tokens (2^61 - 2^30 causal pairs) in a full-training batch. Its exact value is
// exact_total_flops' decimal integer; the double of compute_flops is only its nearest.
TEST(regime, exact_model_flops_is_the_exact_integer_beyond_2_53) {
  const model_spec spec = small_vlm();
  const regime_coefficients full = compute_coefficients(spec, training_regime{});
  const std::int64_t docs[] = {(std::int64_t{1} << 31) - 1};
  const batch_counts n = count_from_lengths(docs, 7, {}, geometry_of(spec));
  const std::optional<detail::uint128> exact = detail::exact_model_flops(full, n, flop_scope::complete);
  ASSERT_TRUE(exact);
  std::string digits;
  for (detail::uint128 v = *exact; v != 0; v /= 10) digits.insert(digits.begin(), static_cast<char>('0' + v % 10));
  EXPECT_EQ(digits, exact_total_flops(full.with_items, n, flop_scope::complete));
  EXPECT_TRUE(*exact > (detail::uint128{1} << 64));  // far past 2^53, where a double rounds
}

// microbatch_event::image_grids, grid_thw's name before 0.3, still counts (a deprecation warning where a caller
// writes it); giving both names is refused rather than one silently ignored. One 3-token document and a 1 x 2 x 2
// grid: 1 item, 4 patches, 4 / 2^2 = 1 merged token either way.
TEST(batch, the_deprecated_image_grids_name_counts_like_grid_thw) {
  const model_spec spec = small_vlm();
  const std::int64_t docs[] = {3};
  const image_grid grids[] = {{1, 2, 2}};
  microbatch_event current, before;
  current.document_lengths = docs;
  current.grid_thw = grids;
  before.document_lengths = docs;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  before.image_grids = grids;
#pragma GCC diagnostic pop
  microbatch_event both = before;
  both.grid_thw = grids;
  for (const microbatch_event* e : {&current, &before}) {
    const batch_counts n = detail::count_event(*e, geometry_of(spec));
    EXPECT_EQ(n.items, 1);
    EXPECT_EQ(n.patches, 4);
    EXPECT_EQ(n.merged_tokens, 1);
    EXPECT_EQ(n.real_tokens, 3);
  }
  expect_error([&] { detail::count_event(both, geometry_of(spec)); },
               "a micro-batch gives both grid_thw and its deprecated name image_grids");
}

TEST(regime, lora_layer_zero_has_no_input_gradient_in_a_text_only_run) {
  training_regime r = frozen_parts({"vision", "merger"});
  r.lora_rank = 2;
  r.lora_targets = {lora_target::q_proj, lora_target::v_proj};
  const regime_coefficients c = compute_coefficients(small_vlm(), r);
  // Layer 0, input without gradient: q, k, v base forward only (64 + 32 + 32), o base forward + input gradient
  // 2*64 (the core's output needs one); A of q and v forward + weight gradient 2*(8*2), B of q 3*(2*8), of v
  // 3*(2*4); the core 3 passes; the MLP 2 passes (2*384). Layer 1: every base GEMM 2 passes (2*192), every A
  // and B 3 (3*(16 + 16 + 16 + 8)), MLP 2*384. LM head 2*80.
  //   attention projections 2*((64 + 32 + 32 + 128) + 384) = 1280   dense MLP 2*(768 + 768) = 3072
  //   adapters 2*((32 + 48 + 32 + 24) + 168) = 608                   logits 2*160 = 320      total 5280
  EXPECT_EQ(c.with_items.dense.attention_projections, 1280);
  EXPECT_EQ(c.with_items.dense.dense_mlp, 3072);
  EXPECT_EQ(c.with_items.dense.lora_adapters, 608);
  EXPECT_EQ(c.with_items.dense.logits, 320);
  EXPECT_EQ(c.with_items.dense_per_token, 5280);
  EXPECT_EQ(c.with_items.text_attn_pair, 192);
  EXPECT_EQ(c.without_items.dense_per_token, 5280);  // the vision side is frozen: items change nothing
  // With a trainable vision side and an image, layer 0's input needs a gradient too: its q, k, v base GEMMs
  // run 2 passes (+64 + 32 + 32) and A of q and v 3 (+16 + 16).
  training_regime with_vision = r;
  with_vision.vision_frozen = with_vision.merger_frozen = false;
  const regime_coefficients v = compute_coefficients(small_vlm(), with_vision);
  EXPECT_EQ(v.with_items.dense.attention_projections, 1280 + 2 * 128);
  EXPECT_EQ(v.with_items.dense.lora_adapters, 608 + 2 * 32);
  EXPECT_EQ(v.without_items.dense_per_token, 5280);
}

TEST(regime, refused_regimes_say_why) {
  const model_spec spec = small_vlm();
  EXPECT_THROW(compute_coefficients(spec, frozen_parts({"vision", "merger", "text"})), error);
  training_regime moe;
  moe.lora_rank = 8;
  moe.lora_targets = {lora_target::q_proj, lora_target::gate_proj};
  try {
    compute_coefficients(load_shipped("qwen3_vl_30b_a3b"), moe);
    ADD_FAILURE() << "LoRA on MoE experts was accepted";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("mixture-of-experts model; LoRA on MoE experts is not billed"),
              std::string::npos)
        << e.what();
  }
  training_regime missing;
  missing.lora_rank = 8;
  missing.lora_targets = {lora_target::in_proj_qkv};  // a Gated DeltaNet projection on an attention-only model
  EXPECT_THROW(compute_coefficients(spec, missing), error);
  training_regime no_rank;
  no_rank.lora_targets = {lora_target::q_proj};
  EXPECT_THROW(compute_coefficients(spec, no_rank), error);
  training_regime twice = frozen_parts({"vision"});
  EXPECT_THROW(add_frozen_part(twice, "vision", "--frozen"), error);
  EXPECT_THROW(add_frozen_part(twice, "decoder", "--frozen"), error);
  EXPECT_THROW(parse_lora_target("qkv", "--lora-targets"), error);
  EXPECT_EQ(frozen_list(frozen_parts({"text", "vision"})), "vision,text");
}

}  // namespace
}  // namespace flopmeter
