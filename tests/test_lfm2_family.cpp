// Tests of the LFM2 family (lfm2): LFM2's gated short convolution (in_proj h -> 3h, a depthwise causal conv of
// conv_L_cache taps over h channels, out_proj h -> h), the MLP width's auto-adjust rule, the layer layouts, the
// Megatron check naming the term it lacks, and the hostile inputs refused with FILE:LINE:COL and the key.
// Conventions: a GEMM d_in -> d_out costs d_in*d_out multiply-adds per token, training 6 FLOPs per multiply-add.

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "flopmeter/error.h"
#include "flopmeter/flop_model.h"
#include "flopmeter/megatron.h"
#include "flopmeter/model_config.h"
#include "flopmeter/model_spec.h"

namespace flopmeter {
namespace {

model_spec from_json(const std::string& text) { return parse_hf_config(text, "cfg.json"); }

std::string error_of(const std::string& json_text) {
  try {
    (void)from_json(json_text);
  } catch (const error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string at(const std::string& text, const std::string& marker, const std::string& key) {
  const std::size_t col = text.find(marker) + marker.size() + 1;
  return "cfg.json:1:" + std::to_string(col) + ": key '" + key + "': ";
}

// h = 64, 4 query heads, 2 kv heads (head_dim 16): attention 12,288 per layer; LM head 64*100 = 6,400. The conv
// layer: in_proj 64*192 = 12,288, conv 3*64 = 192, out_proj 64*64 = 4,096: 16,576.
std::string lfm2(const std::string& fields) {
  return R"({"model_type": "lfm2", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, )"
         R"("vocab_size": 100, "num_hidden_layers": 2, "conv_L_cache": 3, )" +
         fields + "}";
}

// block_ff_dim 96 auto-adjusted: int(2*96/3) = 64, x 1.0, rounded up to 16: 64, a SwiGLU 3*64*64 = 12,288.
// 6 * (16,576 + 12,288 + 2*12,288 + 6,400) = 6 * 59,840 = 359,040. With multiplier 1.5: int(1.5*64) = 96, a SwiGLU
// of 18,432: 6 * (16,576 + 12,288 + 2*18,432 + 6,400) = 6 * 72,128 = 432,768; without the auto-adjust 96 as
// written: the same. full_attn_idxs [1] gives layer_types' layout.
TEST(lfm2, short_conv_and_the_mlp_width) {
  const std::string layers = R"("layer_types": ["conv", "full_attention"], )";
  const model_spec spec = from_json(lfm2(layers + R"("block_ff_dim": 96, "intermediate_size": 8, )"
                                                  R"("block_multiple_of": 16, "block_ffn_dim_multiplier": 1.0)"));
  const coefficients c = compute_coefficients(spec);
  EXPECT_EQ(spec.text.intermediate_size, 64);
  EXPECT_EQ(c.dense_per_token, 359040);
  EXPECT_EQ(c.dense.linear_attention, 6 * 16576);
  EXPECT_EQ(c.text_attn_pair, 6 * 128);
  EXPECT_EQ(compute_coefficients(from_json(lfm2(layers + R"("block_ff_dim": 96, "block_multiple_of": 16, )"
                                                         R"("block_ffn_dim_multiplier": 1.5)")))
                .dense_per_token,
            432768);
  EXPECT_EQ(
      compute_coefficients(from_json(lfm2(layers + R"("intermediate_size": 96, "block_auto_adjust_ff_dim": false)")))
          .dense_per_token,
      432768);
  EXPECT_EQ(
      compute_coefficients(from_json(lfm2(R"("full_attn_idxs": [1], "block_ff_dim": 96, "block_multiple_of": 16)")))
          .dense_per_token,
      359040);
  // Neither list: every layer attention, no conv.
  EXPECT_EQ(from_json(lfm2(R"("block_ff_dim": 96)")).text.short_conv_kernel, 0);
}

// LFM2-1.2B by hand: 6 attention layers of q, o 2048*2048 + k, v 2048*512 = 10,485,760; 10 conv layers of in_proj
// 2048*6144 = 12,582,912 + conv 3*2048 = 6,144 + out_proj 2048*2048 = 4,194,304 = 16,783,360; 16 SwiGLUs of
// 3*2048*8192 = 50,331,648 (block_ff_dim 12288 auto-adjusted); LM head 2048*65,536 = 134,217,728.
// 6 * (62,914,560 + 167,833,600 + 805,306,368 + 134,217,728) = 6 * 1,170,272,256 = 7,021,633,536.
TEST(lfm2, lfm2_1_2b_by_hand_and_check) {
  const model_spec spec = load_model_spec(std::string(FLOPMETER_SOURCE_DIR) + "/model_configs/lfm2_1_2b.toml");
  EXPECT_EQ(compute_coefficients(spec).dense_per_token, 7021633536);
  const check_report report = run_sanity_check(spec, 4096);
  EXPECT_TRUE(report.pass);
  bool found = false;
  for (const check_row& row : report.rows) {
    if (row.term.find("short-conv layers") == std::string::npos) continue;
    found = true;
    EXPECT_DOUBLE_EQ(row.exact, 6.0 * 10 * 16783360);
    EXPECT_NE(row.explanation.find("Megatron has no term for LFM2's gated short convolution"), std::string::npos);
  }
  EXPECT_TRUE(found);
}

TEST(lfm2_bad_input, layer_types_indexes_and_multiplier) {
  const std::string kind = lfm2(R"("block_ff_dim": 96, "layer_types": ["conv", "mamba"])");
  EXPECT_EQ(error_of(kind), at(kind, "\"layer_types\": [\"conv\", ", "layer_types[1]") +
                                "unknown layer type \"mamba\" (expected \"conv\" or \"full_attention\")");
  const std::string index = lfm2(R"("block_ff_dim": 96, "full_attn_idxs": [2])");
  EXPECT_EQ(error_of(index), at(index, "\"full_attn_idxs\": [", "full_attn_idxs[0]") +
                                 "must be a layer index in [0, num_hidden_layers = 2) (got 2)");
  const std::string zero = lfm2(R"("block_ff_dim": 96, "block_ffn_dim_multiplier": 0)");
  EXPECT_EQ(error_of(zero), at(zero, "\"block_ffn_dim_multiplier\": ", "block_ffn_dim_multiplier") +
                                "must be a number in (0, 2^31] (got 0.000000)");
  EXPECT_EQ(error_of(lfm2(R"("layer_types": ["conv", "conv"])")),
            "cfg.json:1:1: required key 'block_ff_dim' is missing");
}

}  // namespace
}  // namespace flopmeter
