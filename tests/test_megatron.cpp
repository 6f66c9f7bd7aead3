// Tests of the Megatron per-token constant and the term-by-term sanity check.
#include "flopmeter/megatron.h"

#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "flopmeter/error.h"
#include "flopmeter/model_config.h"
#include "support/error_message.h"

namespace flopmeter {
namespace {

model_spec load_shipped(const std::string& stem) {
  return load_model_spec(std::string(FLOPMETER_SOURCE_DIR) + "/model_configs/" + stem + ".toml");
}

TEST(megatron_constant, qwen3_vl_2b_by_hand) {
  // Megatron per token at S = 4096, qwen3_vl_2b (h=2048, L=28, q=nh*hd=2048, kv=nkv*hd=1024, I=6144, V=151936):
  //   token-linear = 6*[28*(h*(q + 2kv) + q*h) + 28*3*h*I + h*V]
  //                = 6*[28*(2048*4096 + 2048*2048) + 28*37,748,736 + 311,164,928]
  //                = 6*[28*12,582,912 + 1,056,964,608 + 311,164,928] = 6*1,720,451,072 = 10,322,706,432
  //   attention    = 6*28*(q * S/2 * 2) = 6*28*2048*4096 = 1,409,286,144
  //   ViT (depth 24, hv 1024, Iv 4096): 12*24*1024^2*((1+1) + 4096/1024) = 12*24*1,048,576*6 = 1,811,939,328
  //   ViT attention 12*24*1024^2*(4096/1024/2) = 12*24*1,048,576*2 = 603,979,776
  const megatron_constant k = compute_megatron_constant(load_shipped("qwen3_vl_2b"), 4096);
  EXPECT_DOUBLE_EQ(k.text_linear_per_token, 10322706432.0);
  EXPECT_DOUBLE_EQ(k.text_attention_per_token, 1409286144.0);
  EXPECT_DOUBLE_EQ(k.text_per_token(), 11731992576.0);
  EXPECT_DOUBLE_EQ(k.vision_linear_per_token, 1811939328.0);
  EXPECT_DOUBLE_EQ(k.vision_attention_per_token, 603979776.0);
}

TEST(megatron_constant, qwen3_5_0_8b_by_hand) {
  // qwen3_5_0_8b at S = 8192: 6 full-attention layers with the output gate, 18 Gated DeltaNet layers.
  //   full attention projections h*(q + kv + v + gate) + q*h = 1024*(2048 + 512 + 512 + 2048) + 2048*1024 = 7,340,032
  //   DeltaNet (Megatron): h*(2*2048 + 2*2048 + 2*16) + 4*(2*2048 + 2048) + 16*128^2*4 + h*2048 = 11,591,680
  //   MLP 24*3*1024*3584 = 264,241,152; logits 1024*248320 = 254,279,680
  //   token-linear = 6*(6*7,340,032 + 18*11,591,680 + 264,241,152 + 254,279,680) = 6*771,211,264 = 4,627,267,584
  //   attention = 6*6*(2048 * 8192/2 * 2) = 36*16,777,216 = 603,979,776
  const megatron_constant k = compute_megatron_constant(load_shipped("qwen3_5_0_8b"), 8192);
  EXPECT_DOUBLE_EQ(k.text_linear_per_token, 4627267584.0);
  EXPECT_DOUBLE_EQ(k.text_attention_per_token, 603979776.0);
}

class shipped_check : public ::testing::TestWithParam<std::tuple<const char*, std::int64_t>> {};

TEST_P(shipped_check, passes_term_by_term) {
  const auto [config, seq_len] = GetParam();
  const check_report report = run_sanity_check(load_shipped(config), seq_len);
  EXPECT_TRUE(report.pass);
  // Text: 2 per-token rows + 2 whole-row rows; vision adds 4.
  EXPECT_EQ(report.rows.size(), 8u);
  for (const check_row& row : report.rows) EXPECT_TRUE(row.pass) << row.term << " ratio " << row.ratio;
  // The whole-row attention rows carry the explained ratios.
  const double s = static_cast<double>(seq_len);
  EXPECT_DOUBLE_EQ(report.rows[2].expected_ratio, (s + 1.0) / s);
  EXPECT_DOUBLE_EQ(report.rows[6].expected_ratio, 2.0);
}

INSTANTIATE_TEST_SUITE_P(all_configs, shipped_check,
                         ::testing::Combine(::testing::Values("qwen3_vl_2b", "qwen3_vl_4b", "qwen3_5_0_8b",
                                                              "qwen3_5_2b", "qwen3_5_9b", "qwen3_vl_8b",
                                                              "qwen3_vl_32b", "qwen3_5_27b"),
                                            ::testing::Values(4096, 8192, 32768)));

// Megatron-LM's num_floating_point_operations (megatron/training/training.py, transformer_flops, read at
// commit 001b00c) bills per MoE layer 6*h*(moe_ffn_hidden_size * topk * 3 + shared_expert_size * 3): routed
// experts and shared expert, no router and no shared-expert gate.
//
// qwen3_5_35b_a3b (h=2048, 40 MoE layers, E=256, k=8, I_moe=512, I_shared=512), per token:
//   routed  6*2048*(512*8*3)*40 = 6,039,797,760;  shared 6*2048*(512*3)*40 = 754,974,720
//   not in Megatron: router 6*2048*256*40 = 125,829,120 + gate 6*2048*1*40 = 491,520 = 126,320,640
//   Megatron's token-linear = flopmeter's dense_per_token 18,055,004,160 - 126,320,640 = 17,928,683,520
//   expected ratio of the dense row = 18,055,004,160 / 17,928,683,520
TEST(megatron_constant, qwen3_5_35b_a3b_moe_terms_by_hand) {
  const megatron_constant k = compute_megatron_constant(load_shipped("qwen3_5_35b_a3b"), 4096);
  EXPECT_DOUBLE_EQ(k.text_moe_routed_per_token, 6039797760.0);
  EXPECT_DOUBLE_EQ(k.text_moe_shared_per_token, 754974720.0);
  EXPECT_DOUBLE_EQ(k.text_moe_unbilled_per_token, 126320640.0);
  EXPECT_DOUBLE_EQ(k.text_linear_per_token, 17928683520.0);
}

// qwen3_vl_30b_a3b (h=2048, 48 MoE layers, E=128, k=8, I_moe=768, no shared expert):
//   routed 6*2048*768*8*3*48 = 10,871,635,968; router 6*2048*128*48 = 75,497,472 (no gate)
//   Megatron's token-linear = 18,249,940,992 - 75,497,472 = 18,174,443,520
TEST(megatron_constant, qwen3_vl_30b_a3b_moe_terms_by_hand) {
  const megatron_constant k = compute_megatron_constant(load_shipped("qwen3_vl_30b_a3b"), 4096);
  EXPECT_DOUBLE_EQ(k.text_moe_routed_per_token, 10871635968.0);
  EXPECT_DOUBLE_EQ(k.text_moe_shared_per_token, 0.0);
  EXPECT_DOUBLE_EQ(k.text_moe_unbilled_per_token, 75497472.0);
  EXPECT_DOUBLE_EQ(k.text_linear_per_token, 18174443520.0);
}

class moe_check : public ::testing::TestWithParam<std::tuple<const char*, bool>> {};

TEST_P(moe_check, compares_experts_term_by_term_and_states_router_and_gate) {
  const auto [config, train_mtp] = GetParam();
  model_spec spec = load_shipped(config);
  spec.train_mtp_layers = train_mtp;
  const check_report report = run_sanity_check(spec, 4096);
  EXPECT_TRUE(report.pass);
  for (const check_row& row : report.rows) EXPECT_TRUE(row.pass) << row.term << " ratio " << row.ratio;
  // Row 0: dense vs Megatron's token-linear part, expected ratio 1 + (router + gate) / constant > 1.
  const double unbilled = report.constant.text_moe_unbilled_per_token;
  EXPECT_GT(unbilled, 0.0);
  EXPECT_DOUBLE_EQ(report.rows[0].expected_ratio, 1.0 + unbilled / report.constant.text_linear_per_token);
  EXPECT_EQ(report.rows[1].term, "MoE routed experts (x top-k) = constant's routed-expert term");
  const bool shared = spec.text.shared_expert_intermediate_size > 0;
  if (shared) {
    EXPECT_EQ(report.rows[2].term, "MoE shared expert = constant's shared-expert term");
  }
  EXPECT_EQ(report.rows[shared ? 3 : 2].term,
            "MoE router + shared-expert gate = the documented difference (not in the constant)");
}

INSTANTIATE_TEST_SUITE_P(moe_configs, moe_check,
                         ::testing::Combine(::testing::Values("qwen3_vl_30b_a3b", "qwen3_5_35b_a3b",
                                                              "qwen3_vl_235b_a22b", "qwen3_5_122b_a10b",
                                                              "qwen3_5_397b_a17b"),
                                            ::testing::Bool()));

// check --seq-len: the whole-row counts must fit int64; a too-large S is a user-facing error, and the largest
// S that fits is accepted (S(S+1)/2 is formed without forming S(S+1)).
TEST(sanity_check, longest_seq_len_whose_counts_fit) {
  model_spec text_only = load_shipped("qwen3_vl_2b");
  text_only.vision.reset();
  EXPECT_TRUE(run_sanity_check(text_only, 4294967295).pass);  // 2^32 - 1
  EXPECT_EQ(testing::error_message_of([&] { (void)run_sanity_check(text_only, 4294967296); }),
            "seq_len 4294967296 is too large: one document of that many tokens has "
            "S(S+1)/2 causal pairs, more than a 64-bit count holds (largest seq_len: 4294967295)");
  const model_spec vlm = load_shipped("qwen3_vl_2b");
  EXPECT_TRUE(run_sanity_check(vlm, 3037000499).pass);  // floor(sqrt(2^63 - 1))
  EXPECT_EQ(testing::error_message_of([&] { (void)run_sanity_check(vlm, 3037000500); }),
            "seq_len 3037000500 is too large for a model with a vision tower: one image "
            "of that many patches has S^2 attention pairs, more than a 64-bit count holds (largest "
            "seq_len: 3037000499)");
}

TEST(sanity_check, passes_with_trained_mtp) {
  model_spec spec = load_shipped("qwen3_5_2b");
  spec.train_mtp_layers = true;
  EXPECT_TRUE(run_sanity_check(spec, 4096).pass);
}

TEST(sanity_check, detects_a_disagreement) {
  // Megatron bills the delta rule as 4 * Hv * dv^2; the exact model uses 4 * Hv * dk * dv. With dk != dv
  // the two derivations disagree, and the check must say so in the text dense row and nowhere else.
  model_spec spec = load_shipped("qwen3_5_0_8b");
  spec.text.linear_key_head_dim = 64;
  const check_report report = run_sanity_check(spec, 4096);
  EXPECT_FALSE(report.pass);
  EXPECT_FALSE(report.rows[0].pass);
  EXPECT_TRUE(report.rows[1].pass);
}

TEST(sanity_check, rejects_non_positive_seq_len) {
  EXPECT_THROW(run_sanity_check(load_shipped("qwen3_vl_2b"), 0), error);
}

}  // namespace
}  // namespace flopmeter
