// Tests of the Megatron per-token constant and the term-by-term sanity check.
#include "flopmeter/megatron.h"

#include <gtest/gtest.h>

#include <string>

#include "flopmeter/error.h"
#include "flopmeter/model_config.h"

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
                                                              "qwen3_5_2b", "qwen3_5_9b"),
                                            ::testing::Values(4096, 8192, 32768)));

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
