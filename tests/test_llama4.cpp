// Tests of the Llama 4 text decoder (model type llama4_text): chunked attention on the RoPE layers and full attention
// on the NoPE ones, MoE on moe_layers (top-1 and a shared expert), intermediate_size_mlp on the dense layers; pair
// counts of packed rows with documents shorter than, equal to and longer than the chunk (lengths, cu_seqlens and the
// positions scan); the shipped Scout config and its Megatron check; hostile values refused with the key.
//
// Conventions: a GEMM d_in -> d_out costs d_in*d_out multiply-adds per token, training 6 FLOPs per multiply-add;
// attention heads*(qk + v) multiply-adds per (query, key) pair and layer, x6.

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "flopmeter/error.h"
#include "flopmeter/flop_model.h"
#include "flopmeter/megatron.h"
#include "flopmeter/model_config.h"
#include "flopmeter/model_spec.h"

namespace flopmeter {
namespace {

model_spec from_json(const std::string& text) { return parse_hf_config(text, "cfg.json"); }

std::string error_of(const std::string& text) {
  try {
    (void)from_json(text);
  } catch (const error& e) {
    return e.what();
  }
  return "(accepted)";
}

// h = 64, 4 heads of 16, 2 kv heads, 4 layers, experts of 32, dense MLP of 96, vocab 100, chunks of 4.
// Per layer: q 64*64 + k 64*32 + v 64*32 + o 64*64 = 12,288. Dense layers 0 and 2: 3*64*96 = 18,432. MoE layers
// 1 and 3: router 64*4 = 256, the top-1 expert 3*64*32 = 6,144, the shared expert 6,144: 12,544. LM head 6,400.
// dense_per_token 6 * (4*12,288 + 2*18,432 + 2*12,544 + 6,400) = 6 * 117,504 = 705,024. Per pair and layer
// 4*(16 + 16) = 128: the NoPE layer 3 attends fully, 6*128 = 768; layers 0-2 in chunks, 6*3*128 = 2,304.
std::string llama4_json(const std::string& layout) {
  return R"({"model_type": "llama4_text", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, )"
         R"("head_dim": 16, "intermediate_size": 32, "intermediate_size_mlp": 96, "vocab_size": 100, )"
         R"("num_hidden_layers": 4, "num_local_experts": 4, "num_experts_per_tok": 1, )" +
         layout + R"("attention_chunk_size": 4})";
}
const std::string kListed = R"("moe_layers": [1, 3], "no_rope_layers": [1, 1, 1, 0], )";
const std::string kByRule = R"("interleave_moe_layer_step": 2, )";  // no_rope_layer_interval 4 by default

TEST(llama4, coefficients_by_hand_from_the_lists_and_the_rules) {
  for (const std::string& layout : {kListed, kByRule}) {
    const model_spec spec = from_json(llama4_json(layout));
    const coefficients c = compute_coefficients(spec);
    EXPECT_EQ(c.dense_per_token, 705024) << layout;
    EXPECT_EQ(c.dense.dense_mlp, 6 * 2 * 18432);
    EXPECT_EQ(c.dense.moe_routed_experts, 6 * 2 * 6144);
    EXPECT_EQ(c.dense.moe_shared_expert, 6 * 2 * 6144);
    EXPECT_EQ(c.dense.moe_shared_expert_gate, 0);  // the shared expert is added ungated
    EXPECT_EQ(c.text_attn_pair, 768);
    EXPECT_EQ(c.window_attn_pair[0], 2304);
    const vision_geometry g = geometry_of(spec);
    ASSERT_EQ(g.window_count, 1);
    EXPECT_EQ(g.windows[0].kind, window_kind::chunked);
    EXPECT_EQ(g.windows[0].size, 4);
  }
  // attention_chunk_size null: every layer attends fully (4 * 768 per pair).
  std::string unchunked = llama4_json(kListed);
  unchunked.replace(unchunked.find(R"("attention_chunk_size": 4)"), 25, R"("attention_chunk_size": null)");
  EXPECT_EQ(compute_coefficients(from_json(unchunked)).text_attn_pair, 4 * 768);
}

// A packed row of documents of 3, 4 and 6 tokens (shorter than, equal to and longer than the chunk of 4) and one
// padding token, chunks starting at each document: 3: 1+2+3 = 6; 4: 10; 6: a full chunk 10 and a chunk of 2, 3:
// 13. Chunked pairs 29; causal pairs 6 + 10 + 21 = 37. FLOPs 705,024 x 14 + 768 x 37 + 2,304 x 29.
TEST(llama4, chunk_pairs_of_a_packed_row_by_hand_every_description) {
  const model_spec spec = from_json(llama4_json(kListed));
  const vision_geometry g = geometry_of(spec);
  const std::vector<std::int64_t> lengths = {3, 4, 6};
  const std::vector<std::int64_t> cu = {0, 3, 7, 13};
  const std::vector<std::int64_t> positions = {0, 1, 2, 0, 1, 2, 3, 0, 1, 2, 3, 4, 5};
  const batch_counts a = count_from_lengths(lengths, 1, {}, g);
  EXPECT_EQ(a.causal_pairs, 37);
  EXPECT_EQ(a.window_pairs_0, 29);
  EXPECT_EQ(count_from_cu_seqlens(cu, 1, {}, g), a);
  EXPECT_EQ(count_from_positions(positions, 1, {}, g), a);
  const flop_breakdown f = compute_flops(compute_coefficients(spec), a, flop_scope::complete);
  EXPECT_EQ(f.text_dense, 705024.0 * 14);
  EXPECT_EQ(f.text_attention, 768.0 * 37 + 2304.0 * 29);
}

TEST(llama4, hostile_values_refused_with_the_key) {
  const std::string short_list = error_of(llama4_json(R"("no_rope_layers": [1, 1, 0], )"));
  EXPECT_NE(short_list.find("no_rope_layers"), std::string::npos) << short_list;
  EXPECT_NE(short_list.find("has 3 entries but num_hidden_layers = 4"), std::string::npos) << short_list;
  const std::string bad_value = error_of(llama4_json(R"("no_rope_layers": [1, 2, 1, 0], )"));
  EXPECT_NE(bad_value.find("no_rope_layers[1]"), std::string::npos) << bad_value;
  const std::string out_of_range = error_of(llama4_json(R"("moe_layers": [1, 4], )"));
  EXPECT_NE(out_of_range.find("moe_layers[1]"), std::string::npos) << out_of_range;
  EXPECT_NE(out_of_range.find("(got 4)"), std::string::npos) << out_of_range;
  const std::string twice = error_of(llama4_json(R"("moe_layers": [1, 1], )"));
  EXPECT_NE(twice.find("duplicate layer index 1"), std::string::npos) << twice;
  std::string zero = llama4_json(kListed);
  zero.replace(zero.find(R"("attention_chunk_size": 4)"), 25, R"("attention_chunk_size": 0)");
  const std::string chunk = error_of(zero);
  EXPECT_NE(chunk.find("cfg.json:1:"), std::string::npos) << chunk;
  EXPECT_NE(chunk.find("attention_chunk_size"), std::string::npos) << chunk;
  EXPECT_NE(chunk.find("must be > 0 (got 0)"), std::string::npos) << chunk;
}

// Scout by hand: per layer q 5120*5120 + k, v 5120*1024 + o 5120*5120 = 62,914,560; the top-1 expert and the
// shared expert 3*5120*8192 = 125,829,120 each; router 5120*16 = 81,920; 48 MoE layers; LM head 5120*202,048 =
// 1,034,485,760. dense_per_token 6 * (48*(62,914,560 + 2*125,829,120 + 81,920) + 1,034,485,760) = 96,827,473,920.
// Per pair and layer 40*256 = 10,240: 12 NoPE layers 737,280, 36 chunked layers 2,211,840.
TEST(llama4, scout_by_hand_and_check) {
  const model_spec spec =
      load_model_spec(std::string(FLOPMETER_SOURCE_DIR) + "/model_configs/llama_4_scout_17b_16e_text.toml");
  const coefficients c = compute_coefficients(spec);
  EXPECT_EQ(c.dense_per_token, 96827473920);
  EXPECT_EQ(c.text_attn_pair, 737280);
  EXPECT_EQ(c.window_attn_pair[0], 2211840);
  for (const std::int64_t s : {4096, 8192, 32768}) EXPECT_TRUE(run_sanity_check(spec, s).pass) << s;
}

}  // namespace
}  // namespace flopmeter
