// Tests of the decoder families beyond Qwen3 (families/families.cpp): one small config.json per family with its
// coefficients derived by hand below, exact FLOPs of a packed batch with sliding windows, the TOML that
// `import` writes giving the same spec, the shipped configs loading and passing `check`, and a config that
// contradicts itself refused with FILE:LINE:COL, the key and the reason.
//
// Conventions of every derivation: a GEMM d_in -> d_out costs d_in*d_out multiply-adds per token, training
// 6 FLOPs per multiply-add (forward, input gradient, weight gradient); attention costs, per (query, key) pair
// and layer, heads*(qk_head_dim + v_head_dim) multiply-adds (QK^T and PV), x6.

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <unistd.h>

#include "families/families.h"
#include "arch/gemm_walk.h"
#include "flopmeter/error.h"
#include "flopmeter/flop_model.h"
#include "flopmeter/megatron.h"
#include "flopmeter/model_config.h"
#include "flopmeter/model_spec.h"

namespace flopmeter {
namespace {

namespace fs = std::filesystem;

model_spec from_json(const std::string& text) { return parse_hf_config(text, "cfg.json"); }

std::string error_of(const std::string& json_text) {
  try {
    (void)from_json(json_text);
  } catch (const error& e) {
    return e.what();
  }
  return "(no error)";
}

// "cfg.json:1:COL: key 'KEY': " for the value that follows `marker` on a one-line document.
std::string at(const std::string& text, const std::string& marker, const std::string& key) {
  const std::size_t col = text.find(marker) + marker.size() + 1;
  return "cfg.json:1:" + std::to_string(col) + ": key '" + key + "': ";
}

std::string config_path(const std::string& file) {
  return std::string(FLOPMETER_SOURCE_DIR) + "/model_configs/" + file;
}

// The shared decoder of the small configs: h = 64, 4 query heads, 2 kv heads, head_dim 16 (= 64 / 4 when absent),
// vocab 100. Attention projections per layer: q 64*64 + k 64*32 + v 64*32 + o 64*64 = 12,288 multiply-adds.
// Gated MLP of width 96: 3*64*96 = 18,432. LM head: 64*100 = 6,400. Attention per pair and layer:
// 4*(16 + 16) = 128.
const std::string kDecoder = R"("hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, )"
                             R"("intermediate_size": 96, "vocab_size": 100, )";

std::string json(const std::string& model_type, const std::string& fields) {
  return "{\"model_type\": \"" + model_type + "\", " + kDecoder + fields + "}";
}

// ---- one hand-derived config per family -------------------------------------------------------------------

TEST(family_coefficients, llama_head_dim_from_hidden_size) {
  // 2 layers: 6 * (2*(12,288 + 18,432) + 6,400) = 6 * 67,840 = 407,040; pairs 6 * 2 * 128 = 1,536.
  const model_spec spec = from_json(json("llama", R"("num_hidden_layers": 2)"));
  EXPECT_EQ(spec.text.head_dim, 16);
  const coefficients c = compute_coefficients(spec);
  EXPECT_EQ(c.dense_per_token, 407040);
  EXPECT_EQ(c.dense.attention_projections, 6 * 2 * 12288);
  EXPECT_EQ(c.dense.dense_mlp, 6 * 2 * 18432);
  EXPECT_EQ(c.text_attn_pair, 1536);
  EXPECT_EQ(c.window_attn_pair[0], 0);
  EXPECT_EQ(geometry_of(spec).window_count, 0);
}

// Qwen2: use_sliding_window with max_window_layers = 1 of 3 layers: layer 0 full, layers 1 and 2 slide (w = 8).
// Dense 6 * (3*30,720 + 6,400) = 591,360; full pairs 6 * 128 = 768; window pairs 6 * 2 * 128 = 1,536.
// Documents of 10 and 3 tokens: causal pairs 55 + 6 = 61; window 8: 8*9/2 + (10-8)*8 = 52 and 3*4/2 = 6, 58.
// FLOPs = 591,360*13 + 768*61 + 1,536*58 = 7,687,680 + 46,848 + 89,088 = 7,823,616.
TEST(family_coefficients, qwen2_slides_above_max_window_layers) {
  const model_spec spec = from_json(json(
      "qwen2", R"("num_hidden_layers": 3, "use_sliding_window": true, "sliding_window": 8, "max_window_layers": 1)"));
  const coefficients c = compute_coefficients(spec);
  EXPECT_EQ(c.dense_per_token, 591360);
  EXPECT_EQ(c.text_attn_pair, 768);
  EXPECT_EQ(c.window_attn_pair[0], 1536);
  const vision_geometry g = geometry_of(spec);
  ASSERT_EQ(g.window_count, 1);
  EXPECT_EQ(g.windows[0].kind, window_kind::sliding);
  EXPECT_EQ(g.windows[0].size, 8);
  const std::int64_t docs[] = {10, 3};
  const batch_counts n = count_from_lengths(docs, 0, {}, g);
  EXPECT_EQ(n.causal_pairs, 61);
  EXPECT_EQ(n.window_pairs_0, 58);
  EXPECT_EQ(exact_total_flops(c, n, flop_scope::complete), "7823616");
  EXPECT_EQ(compute_flops(c, n, flop_scope::complete).total(), 7823616.0);
}

TEST(family_coefficients, qwen2_released_configs_never_slide) {
  // use_sliding_window false: sliding_window (131072 in the released files) has no effect; every layer is full.
  const model_spec spec =
      from_json(json("qwen2", R"("num_hidden_layers": 3, "use_sliding_window": false, "sliding_window": 131072)"));
  EXPECT_EQ(compute_coefficients(spec).text_attn_pair, 6 * 3 * 128);
  EXPECT_EQ(geometry_of(spec).window_count, 0);
}

// Qwen2-MoE, 4 layers, decoder_sparse_step 2, mlp_only_layers [3]: (i+1) % 2 == 0 gives layers 1 and 3, layer 3
// is forced dense: one MoE layer, three dense. MoE block: router 64*8 = 512, 2 experts x 3*64*32 = 12,288, shared
// 3*64*48 = 9,216, its gate 64: 22,080. Dense 6 * (4*12,288 + 3*18,432 + 22,080 + 6,400) = 6 * 132,928 = 797,568.
TEST(family_coefficients, qwen2_moe_sparse_step_and_shared_gate) {
  const model_spec spec = from_json(json("qwen2_moe", R"("num_hidden_layers": 4, "num_experts": 8, )"
                                                      R"("num_experts_per_tok": 2, "moe_intermediate_size": 32, )"
                                                      R"("shared_expert_intermediate_size": 48, )"
                                                      R"("decoder_sparse_step": 2, "mlp_only_layers": [3])"));
  const coefficients c = compute_coefficients(spec);
  EXPECT_EQ(c.dense_per_token, 797568);
  EXPECT_EQ(c.dense.moe_router, 6 * 512);
  EXPECT_EQ(c.dense.moe_routed_experts, 6 * 12288);
  EXPECT_EQ(c.dense.moe_shared_expert, 6 * 9216);
  EXPECT_EQ(c.dense.moe_shared_expert_gate, 6 * 64);
  EXPECT_EQ(c.dense.dense_mlp, 6 * 3 * 18432);
}

// Qwen2-MoE's own window rule: with use_sliding_window, the even layers below max_window_layers slide (layers 0 and
// 2 of 4 with max_window_layers 3), not the layers above it as in Qwen2.
TEST(family_coefficients, qwen2_moe_slides_even_layers_below_max_window_layers) {
  const model_spec spec = from_json(json("qwen2_moe", R"("num_hidden_layers": 4, "num_experts": 8, )"
                                                      R"("num_experts_per_tok": 2, "moe_intermediate_size": 32, )"
                                                      R"("shared_expert_intermediate_size": 48, )"
                                                      R"("use_sliding_window": true, "sliding_window": 8, )"
                                                      R"("max_window_layers": 3)"));
  EXPECT_EQ(spec.text.layer_type(0), layer_kind::sliding_attention);
  EXPECT_EQ(spec.text.layer_type(1), layer_kind::full_attention);
  EXPECT_EQ(spec.text.layer_type(2), layer_kind::sliding_attention);
  EXPECT_EQ(spec.text.layer_type(3), layer_kind::full_attention);
  const coefficients c = compute_coefficients(spec);
  EXPECT_EQ(c.text_attn_pair, 6 * 2 * 128);
  EXPECT_EQ(c.window_attn_pair[0], 6 * 2 * 128);
}

// Mistral: a window on every layer. One document of 6 tokens, w = 4: 4*5/2 + (6-4)*4 = 18 pairs per layer, no
// full-attention pairs billed: attention FLOPs = 6 * 2 * 128 * 18 = 27,648.
TEST(family_coefficients, mistral_every_layer_slides) {
  const model_spec spec = from_json(json("mistral", R"("num_hidden_layers": 2, "sliding_window": 4)"));
  const coefficients c = compute_coefficients(spec);
  EXPECT_EQ(c.dense_per_token, 407040);  // as Llama: the window changes no projection
  EXPECT_EQ(c.text_attn_pair, 0);
  EXPECT_EQ(c.window_attn_pair[0], 1536);
  const std::int64_t doc[] = {6};
  const batch_counts n = count_from_lengths(doc, 0, {}, geometry_of(spec));
  EXPECT_EQ(n.window_pairs_0, 18);
  EXPECT_EQ(compute_flops(c, n, flop_scope::complete).text_attention, 27648.0);
  // sliding_window null: every layer attends fully.
  const model_spec full = from_json(json("mistral", R"("num_hidden_layers": 2, "sliding_window": null)"));
  EXPECT_EQ(compute_coefficients(full).text_attn_pair, 1536);
}

// Mixtral: every layer an MoE block of num_local_experts = 4 experts of intermediate_size 32, top 2, no shared
// expert: 6 * (2*12,288 + 2*64*4 + 2*2*3*64*32 + 6,400) = 6 * (24,576 + 512 + 24,576 + 6,400) = 336,384.
const std::string kMixtral = R"({"model_type": "mixtral", "hidden_size": 64, "num_attention_heads": 4, )"
                             R"("num_key_value_heads": 2, "intermediate_size": 32, "vocab_size": 100, )"
                             R"("num_hidden_layers": 2, "num_local_experts": 4, "num_experts_per_tok": 2, )"
                             R"("sliding_window": null})";

TEST(family_coefficients, mixtral_experts_are_intermediate_size_wide) {
  const coefficients c = compute_coefficients(from_json(kMixtral));
  EXPECT_EQ(c.dense_per_token, 336384);
  EXPECT_EQ(c.dense.moe_routed_experts, 6 * 24576);
  EXPECT_EQ(c.dense.moe_router, 6 * 512);
  EXPECT_EQ(c.dense.dense_mlp, 0);
  EXPECT_EQ(c.text_attn_pair, 1536);
}

// Gemma 3: head_dim 32 with 2 heads (query width 64 = h by chance), 1 kv head; sliding_window_pattern 2: layers 1
// and 3 full, 0 and 2 slide. Projections q 64*64 + k 64*32 + v 64*32 + o 64*64 = 12,288; dense 6 * (4*(12,288 +
// 18,432) + 6,400) = 775,680; per pair and layer 2*(32 + 32) = 128: full 6 * 2 * 128 = 1,536, window the same.
const std::string kGemma = R"({"model_type": "gemma3_text", "hidden_size": 64, "num_attention_heads": 2, )"
                           R"("num_key_value_heads": 1, "head_dim": 32, "intermediate_size": 96, "vocab_size": 100, )"
                           R"("num_hidden_layers": 4, "sliding_window": 4, "sliding_window_pattern": 2})";

TEST(family_coefficients, gemma3_pattern_and_layer_types_agree) {
  const model_spec spec = from_json(kGemma);
  const coefficients c = compute_coefficients(spec);
  EXPECT_EQ(c.dense_per_token, 775680);
  EXPECT_EQ(c.text_attn_pair, 1536);
  EXPECT_EQ(c.window_attn_pair[0], 1536);
  std::string listed = kGemma;
  listed.replace(listed.find(R"("sliding_window_pattern": 2)"), 27,
                 R"("layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"])");
  const coefficients d = compute_coefficients(from_json(listed));
  EXPECT_EQ(d.text_attn_pair, c.text_attn_pair);
  EXPECT_EQ(d.window_attn_pair[0], c.window_attn_pair[0]);
}

// Gemma3TextConfig's defaults (transformers' configuration_gemma3.py): vocab_size 262208, hidden_size 2304,
// intermediate_size 9216, num_hidden_layers 26, num_attention_heads 8, num_key_value_heads 4, head_dim 256,
// sliding_window 4096, sliding_window_pattern 6. A config.json that leaves them out is read with them, as
// transformers reads it: the same spec and coefficients as the document that writes them all out. Also the
// published Gemma 3 4B text_config's case, which gives its own sizes but leaves the heads and the vocabulary out.
TEST(family_coefficients, gemma3_text_absent_fields_take_transformers_defaults) {
  const std::string written =
      R"({"model_type": "gemma3_text", "vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, )"
      R"("num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, )"
      R"("sliding_window": 4096, "sliding_window_pattern": 6})";
  const std::string minimal = R"({"model_type": "gemma3_text"})";
  // The decoder sizes and every coefficient a gemma3_text decoder has, side by side.
  const auto facts = [](const model_spec& spec) {
    const text_spec& t = spec.text;
    const coefficients c = compute_coefficients(spec);
    return std::vector<std::int64_t>{
        t.hidden_size,     t.num_hidden_layers,           t.num_attention_heads, t.num_key_value_heads,
        t.head_dim,        t.intermediate_size,           t.vocab_size,          t.sliding_window,
        c.dense_per_token, c.dense.attention_projections, c.dense.dense_mlp,     c.dense.logits,
        c.text_attn_pair,  c.window_attn_pair[0],         c.window_attn_pair[1]};
  };
  const auto expect_same = [&](const model_spec& a, const model_spec& b) { EXPECT_EQ(facts(a), facts(b)); };
  const model_spec full = from_json(written);
  expect_same(from_json(minimal), full);
  // By hand from the defaults: q 2304*2048 + k 2304*1024 + v 2304*1024 + o 2048*2304 = 14,155,776 per layer;
  // MLP 3*2304*9216 = 63,700,992; LM head 2304*262,208 = 604,127,232. Training 6 per multiply-add:
  // 6 * (26*(14,155,776 + 63,700,992) + 604,127,232) = 15,770,419,200. Layers 5, 11, 17, 23 are full (4), the
  // other 22 slide over 4096 keys; per pair and layer 8*(256 + 256) = 4,096 multiply-adds: full 6*4*4,096 = 98,304,
  // window 6*22*4,096 = 540,672.
  const coefficients c = compute_coefficients(full);
  EXPECT_EQ(c.dense_per_token, 15770419200);
  EXPECT_EQ(c.text_attn_pair, 98304);
  EXPECT_EQ(c.window_attn_pair[0], 540672);
  // Gemma 3 4B's text_config sizes without its heads, head_dim and vocabulary: the defaults fill them in.
  const std::string sized = R"({"model_type": "gemma3_text", "hidden_size": 2560, "intermediate_size": 10240, )"
                            R"("num_hidden_layers": 34, "sliding_window": 1024})";
  const std::string sized_written =
      R"({"model_type": "gemma3_text", "hidden_size": 2560, "intermediate_size": 10240, "num_hidden_layers": 34, )"
      R"("sliding_window": 1024, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, )"
      R"("vocab_size": 262208, "sliding_window_pattern": 6})";
  expect_same(from_json(sized), from_json(sized_written));
}

// gpt-oss: head_dim 32 x 4 heads = 128 > h; the default layer_types alternate sliding (layer 0) and full (layer 1).
// Projections q 64*128 + k 64*64 + v 64*64 + o 128*64 = 24,576 per layer; router 64*4; experts 2 x 3*64*32;
// dense 6 * (2*24,576 + 2*256 + 2*12,288 + 6,400) = 6 * 80,640 = 483,840. Pair 4*(32 + 32) = 256 per layer: full
// 6 * 256 = 1,536, window 1,536. The attention sinks (a logit per head) and the biases are not billed.
TEST(family_coefficients, gpt_oss_alternates_by_default) {
  const model_spec spec =
      from_json(R"({"model_type": "gpt_oss", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, )"
                R"("head_dim": 32, "intermediate_size": 32, "vocab_size": 100, "num_hidden_layers": 2, )"
                R"("num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 4})");
  EXPECT_EQ(spec.text.layer_type(0), layer_kind::sliding_attention);
  EXPECT_EQ(spec.text.layer_type(1), layer_kind::full_attention);
  const coefficients c = compute_coefficients(spec);
  EXPECT_EQ(c.dense_per_token, 483840);
  EXPECT_EQ(c.text_attn_pair, 1536);
  EXPECT_EQ(c.window_attn_pair[0], 1536);
}

// DeepSeek-V3 (and Kimi-K2): MLA with q_lora_rank 16, kv_lora_rank 8, qk_nope 8, qk_rope 4, v 8, 4 heads:
//   q_a 64*16 = 1,024; q_b 16*4*12 = 768; kv_a 64*(8+4) = 768; kv_b 8*4*(8+8) = 512; o 4*8*64 = 2,048: 5,120.
// first_k_dense_replace 1: layer 0 dense (18,432), layers 1 and 2 MoE: router 64*8 = 512, 2 experts x 3*64*16 =
// 6,144, one ungated shared expert 3*64*16 = 3,072: 9,728. Dense 6 * (3*5,120 + 18,432 + 2*9,728 + 6,400) =
// 6 * 59,648 = 357,888. Pair 4*(8 + 4 + 8) = 80 per layer: 6 * 3 * 80 = 1,440.
// The MTP layer (trained): eh_proj 2*64*64 = 8,192 + MLA 5,120 + MoE 9,728 + its LM head 6,400 = 29,440, x6.
const std::string kDeepSeek =
    R"({"model_type": "deepseek_v3", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4, )"
    R"("intermediate_size": 96, "vocab_size": 100, "num_hidden_layers": 3, "q_lora_rank": 16, )"
    R"("kv_lora_rank": 8, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8, )"
    R"("moe_intermediate_size": 16, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1, )"
    R"("first_k_dense_replace": 1, "moe_layer_freq": 1, "num_nextn_predict_layers": 1})";

TEST(family_coefficients, deepseek_v3_mla_dense_prefix_and_mtp) {
  model_spec spec = from_json(kDeepSeek);
  coefficients c = compute_coefficients(spec);
  EXPECT_EQ(c.dense_per_token, 357888);
  EXPECT_EQ(c.dense.attention_projections, 6 * 3 * 5120);
  EXPECT_EQ(c.dense.moe_shared_expert, 6 * 2 * 3072);
  EXPECT_EQ(c.dense.moe_shared_expert_gate, 0);
  EXPECT_EQ(c.text_attn_pair, 1440);
  EXPECT_EQ(c.mtp_per_token, 0);  // not trained unless configured
  spec.train_mtp_layers = true;
  c = compute_coefficients(spec);
  EXPECT_EQ(c.mtp_per_token, 6 * 29440);
  EXPECT_EQ(c.mtp_attn_pair, 6 * 80);
  // Kimi-K2 declares the same architecture under its own model_type.
  std::string kimi = kDeepSeek;
  kimi.replace(kimi.find("deepseek_v3"), 11, "kimi_k2");
  EXPECT_EQ(compute_coefficients(from_json(kimi)).dense_per_token, 357888);
}

TEST(family_coefficients, deepseek_without_q_lora_rank_has_one_q_proj) {
  // q_lora_rank null: q_proj 64*4*12 = 3,072 replaces q_a + q_b (1,792): +1,280 per layer, x3 layers x6.
  std::string lite = kDeepSeek;
  lite.replace(lite.find(R"("q_lora_rank": 16)"), 17, R"("q_lora_rank": null)");
  EXPECT_EQ(compute_coefficients(from_json(lite)).dense_per_token, 357888 + 6 * 3 * 1280);
}

// LoRA on MLA, by the one GEMM rule (forward 2, + input gradient 2 where the input needs one, + weight gradient 2
// where the weight trains, per multiply-add), rank 2 on q_b_proj and kv_a_proj_with_mqa of the DeepSeek config
// above, text only (layer 0's input needs no gradient; base weights frozen). In passes of 2 FLOPs:
//   layer 0  q_a 1,024 x1 (input and weight without gradient); q_b 768 x1 (its input, q_a's output, has none);
//            q_b's A 16*2 = 32 x2 (forward + weight gradient), B 2*48 = 96 x3; kv_a 768 x1, its A 64*2 = 128 x2,
//            B 2*12 = 24 x3; kv_b 512 x2 (the latent needs a gradient: kv_a is adapted); o 2,048 x2; the core
//            80 per pair x3; the dense MLP 18,432 x2
//   layers 1, 2  every base GEMM x2 (5,120), every A and B x3 (280); the MoE blocks x2 (512 + 6,144 + 3,072)
//   LM head 6,400 x2
// attention projections 2*(1,024 + 768 + 768 + 2*512 + 2*2,048 + 2*2*5,120) = 56,320; adapters 2*(2*32 + 3*96 +
// 2*128 + 3*24 + 2*3*280) = 4,720; dense MLP 2*2*18,432 = 73,728; router 2*2*2*512 = 4,096; experts 2*2*2*6,144
// = 49,152; shared expert 2*2*2*3,072 = 24,576; logits 2*2*6,400 = 25,600: 238,192. Pairs 2*3*3*80 = 1,440.
TEST(family_coefficients, lora_on_mla_projections_follows_the_gemm_rule) {
  training_regime r;
  r.lora_rank = 2;
  r.lora_targets = {lora_target::q_b_proj, lora_target::kv_a_proj_with_mqa};
  const coefficients c = compute_coefficients(from_json(kDeepSeek), r).without_items;
  EXPECT_EQ(c.dense.attention_projections, 56320);
  EXPECT_EQ(c.dense.lora_adapters, 4720);
  EXPECT_EQ(c.dense.dense_mlp, 73728);
  EXPECT_EQ(c.dense.moe_router, 4096);
  EXPECT_EQ(c.dense.moe_routed_experts, 49152);
  EXPECT_EQ(c.dense.moe_shared_expert, 24576);
  EXPECT_EQ(c.dense.logits, 25600);
  EXPECT_EQ(c.dense_per_token, 238192);
  EXPECT_EQ(c.text_attn_pair, 1440);
  // Names MLA does not have: k_proj and v_proj; q_a_proj and q_b_proj without q_lora_rank; q_proj with it.
  std::string lite = kDeepSeek;
  lite.replace(lite.find(R"("q_lora_rank": 16)"), 17, R"("q_lora_rank": null)");
  for (const auto& [config, target] :
       {std::pair{kDeepSeek, lora_target::k_proj}, std::pair{kDeepSeek, lora_target::q_proj},
        std::pair{lite, lora_target::q_a_proj}}) {
    training_regime absent;
    absent.lora_rank = 2;
    absent.lora_targets = {target};
    EXPECT_THROW(compute_coefficients(from_json(config), absent), error) << to_string(target);
  }
  // q_proj on the lite model: 64*48 = 3,072 x1 in layer 0 (then x2), A 64*2 = 128 x2 then x3, B 2*48 = 96 x3.
  training_regime q;
  q.lora_rank = 2;
  q.lora_targets = {lora_target::q_proj};
  const coefficients d = compute_coefficients(from_json(lite), q).without_items;
  EXPECT_EQ(d.dense.lora_adapters, 2 * (2 * 128 + 3 * 96 + 2 * 3 * (128 + 96)));
  // o_proj (nh*v = 32 -> 64) alone: in layer 0 nothing upstream of it needs a gradient (the core's inputs come from
  // frozen projections of an input without one), so A 32*2 = 64 x2 and B 2*64 = 128 x3; layers 1, 2 both x3.
  training_regime o;
  o.lora_rank = 2;
  o.lora_targets = {lora_target::o_proj};
  const coefficients e = compute_coefficients(from_json(kDeepSeek), o).without_items;
  EXPECT_EQ(e.dense.lora_adapters, 2 * (2 * 64 + 3 * 128 + 2 * 3 * (64 + 128)));
}

// GLM-4.5: standard GQA (head_dim explicit) with the DeepSeek MoE layout: 6 * (3*12,288 + 18,432 + 2*9,728 +
// 6,400) = 6 * 81,152 = 486,912.
TEST(family_coefficients, glm4_moe_dense_prefix_and_shared_experts) {
  const model_spec spec = from_json(
      R"({"model_type": "glm4_moe", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, )"
      R"("head_dim": 16, "intermediate_size": 96, "vocab_size": 100, "num_hidden_layers": 3, )"
      R"("moe_intermediate_size": 16, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1, )"
      R"("first_k_dense_replace": 1, "partial_rotary_factor": 0.5, "use_qk_norm": true})");
  EXPECT_EQ(compute_coefficients(spec).dense_per_token, 486912);
}

// OLMo 3 without layer_types: Olmo3Config's default makes layer i full iff (i+1) % 4 == 0, so of 8 layers 3 and 7
// are full and the other 6 slide (window 16). The shared decoder (kDecoder): 6 * (8*(12,288 + 18,432) + 6,400) =
// 6 * 252,160 = 1,512,960. Per pair and layer 4*(16 + 16) = 128: full 6 * 2 * 128 = 1,536, window 6 * 6 * 128 =
// 4,608. Writing the same list out gives the same spec; the q/k norms are not billed.
TEST(family_coefficients, olmo3_three_sliding_layers_to_one_full) {
  const std::string text = json("olmo3", R"("num_hidden_layers": 8, "sliding_window": 16)");
  const model_spec spec = from_json(text);
  for (const std::int64_t layer : {0, 1, 2, 4, 5, 6}) {
    EXPECT_EQ(spec.text.layer_type(layer), layer_kind::sliding_attention) << layer;
  }
  EXPECT_EQ(spec.text.layer_type(3), layer_kind::full_attention);
  EXPECT_EQ(spec.text.layer_type(7), layer_kind::full_attention);
  const coefficients c = compute_coefficients(spec);
  EXPECT_EQ(c.dense_per_token, 1512960);
  EXPECT_EQ(c.text_attn_pair, 1536);
  EXPECT_EQ(c.window_attn_pair[0], 4608);
  std::string listed = text;
  listed.replace(listed.find(R"("sliding_window": 16)"), 20,
                 R"("sliding_window": 16, "layer_types": ["sliding_attention", "sliding_attention", )"
                 R"("sliding_attention", "full_attention", "sliding_attention", "sliding_attention", )"
                 R"("sliding_attention", "full_attention"])");
  const coefficients d = compute_coefficients(from_json(listed));
  EXPECT_EQ(d.text_attn_pair, c.text_attn_pair);
  EXPECT_EQ(d.window_attn_pair[0], c.window_attn_pair[0]);
}

// Seed-OSS: head_dim 32 written, so 4 heads x 32 = 128 > h = 64. Projections q 64*128 + k 64*64 + v 64*64 +
// o 128*64 = 24,576 per layer, SwiGLU 3*64*96 = 18,432, LM head 6,400: 6 * (2*(24,576 + 18,432) + 6,400) =
// 6 * 92,416 = 554,496. Pair 4*(32 + 32) = 256 per layer, full on both: 6 * 2 * 256 = 3,072. head_dim is required
// (SeedOssConfig's sizes are not the checkpoint's, so none is taken from the class), and so is num_key_value_heads.
TEST(family_coefficients, seed_oss_heads_wider_than_the_residual_stream) {
  const coefficients c = compute_coefficients(from_json(json("seed_oss", R"("num_hidden_layers": 2, "head_dim": 32)")));
  EXPECT_EQ(c.dense_per_token, 554496);
  EXPECT_EQ(c.text_attn_pair, 3072);
  EXPECT_EQ(c.window_attn_pair[0], 0);
  EXPECT_NE(error_of(json("seed_oss", R"("num_hidden_layers": 2)")).find("required key 'head_dim' is missing"),
            std::string::npos);
  // SeedOssConfig's num_key_value_heads defaults to 8, not to the query heads: an absent one is refused too.
  std::string no_kv = json("seed_oss", R"("num_hidden_layers": 2, "head_dim": 32)");
  no_kv.erase(no_kv.find(R"("num_key_value_heads": 2, )"), 26);
  EXPECT_NE(error_of(no_kv).find("required key 'num_key_value_heads' is missing"), std::string::npos) << no_kv;
}

// ---- regimes on the new mixers -----------------------------------------------------------------------------

TEST(family_regimes, lora_on_sliding_layers_and_mla_refused) {
  // LoRA on q_proj and v_proj of the Mistral config: the base decoder frozen; the adapters' A and B bill
  // (64*r + r*64) and (64*r + r*32) per layer. A frozen text side still bills every pair forward + backward
  // after the first adapted layer (layer 0 here), so the window coefficient keeps 6 per multiply-add.
  const model_spec spec = from_json(json("mistral", R"("num_hidden_layers": 2, "sliding_window": 4)"));
  training_regime lora;
  lora.lora_rank = 2;
  lora.lora_targets = {lora_target::q_proj, lora_target::v_proj};
  const regime_coefficients rc = compute_coefficients(spec, lora);
  EXPECT_EQ(rc.with_items.window_attn_pair[0], 1536);
  // Layer 0's q/v inputs need no gradient (A: forward + weight gradient, 2 passes; B: 3); layer 1's do (A: 3).
  // A q: 64*2 = 128, B q: 2*64 = 128; A v: 128, B v: 2*32 = 64 (v width 32).
  // Layer 0: 2*(2*128 + 3*128) + 2*(2*128 + 3*64) = 1,280 + 896 = 2,176; layer 1: 2*(3*128 + 3*128) +
  // 2*(3*128 + 3*64) = 1,536 + 1,152 = 2,688. Total 4,864.
  EXPECT_EQ(rc.with_items.dense.lora_adapters, 4864);
  const model_spec mla = from_json(kDeepSeek);
  EXPECT_THROW((void)compute_coefficients(mla, lora), error);
  training_regime frozen;
  frozen.text_frozen = true;
  EXPECT_THROW((void)compute_coefficients(mla, frozen), error);  // nothing trains: a text-only model
}

// ---- the GEMM walk other folds read --------------------------------------------------------------------

// One Llama layer group in forward order: q, k, v, the core, o, gate, up, down; matmuls numbered from 1 (the core
// is none), down_proj the final GEMM; then the LM head. With every = 2 over 3 layers only layer 1 is walked.
TEST(family_walk, visits_carry_order_matmul_number_and_the_final_gemm) {
  const model_spec spec = from_json(json("llama", R"("num_hidden_layers": 3)"));
  std::vector<detail::gemm_visit> visits;
  detail::walk_gemms(spec, training_regime{}, false, [&](const detail::gemm_visit& v) { visits.push_back(v); });
  const char* const names[] = {"q_proj",    "k_proj",  "v_proj",    "attention_core", "o_proj",
                               "gate_proj", "up_proj", "down_proj", "lm_head"};
  ASSERT_EQ(visits.size(), 9u);
  for (std::size_t i = 0; i < 8; ++i) {
    EXPECT_STREQ(visits[i].name, names[i]);
    EXPECT_EQ(visits[i].order, static_cast<int>(i));
    EXPECT_EQ(visits[i].layers.value, 3);
    EXPECT_EQ(visits[i].passes(), 3);  // full training: forward, input gradient, weight gradient
  }
  EXPECT_STREQ(visits[8].name, names[8]);
  EXPECT_EQ(visits[3].matmul, 0);
  EXPECT_TRUE(visits[3].weightless);
  EXPECT_EQ(visits[4].matmul, 4);
  EXPECT_EQ(visits[7].matmul, 7);
  EXPECT_TRUE(visits[7].last);
  EXPECT_FALSE(visits[6].last);
  std::vector<detail::gemm_visit> every_second;
  detail::walk_decoder_layers(spec, training_regime{}, 0, 3, 2, true,
                              [&](const detail::gemm_visit& v) { every_second.push_back(v); });
  ASSERT_EQ(every_second.size(), 8u);
  EXPECT_EQ(every_second[0].layers.value, 1);  // layer 1 ((1+1) % 2 == 0) only
}

// ---- import, TOML and the shipped configs -----------------------------------------------------------------

class family_import : public ::testing::TestWithParam<std::string> {};

TEST_P(family_import, toml_gives_the_same_coefficients_as_the_config_json) {
  const fs::path dir = fs::temp_directory_path() / ("flopmeter_families_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path file = dir / "config.json";
  std::ofstream(file) << GetParam();
  const model_spec from_config = load_model_spec(file.string());
  const std::string toml = import_hf_config(file.string());
  const model_spec from_toml = parse_model_spec(toml, "imported.toml");
  fs::remove_all(dir);
  const coefficients a = compute_coefficients(from_config), b = compute_coefficients(from_toml);
  EXPECT_EQ(a.dense_per_token, b.dense_per_token) << toml;
  EXPECT_EQ(a.text_attn_pair, b.text_attn_pair);
  EXPECT_EQ(a.window_attn_pair[0], b.window_attn_pair[0]);
  EXPECT_EQ(from_config.text.layer_runs.size(), from_toml.text.layer_runs.size());
  EXPECT_EQ(from_config.text.q_lora_rank, from_toml.text.q_lora_rank);
}

std::string lite_deepseek() {
  std::string lite = kDeepSeek;
  return lite.replace(lite.find(R"("q_lora_rank": 16)"), 17, R"("q_lora_rank": null)");
}

INSTANTIATE_TEST_SUITE_P(families, family_import,
                         ::testing::Values(json("llama", R"("num_hidden_layers": 2)"),
                                           json("qwen2", R"("num_hidden_layers": 3, "use_sliding_window": true, )"
                                                         R"("sliding_window": 8, "max_window_layers": 1)"),
                                           json("mistral", R"("num_hidden_layers": 2, "sliding_window": null)"),
                                           kMixtral, kGemma, kDeepSeek, lite_deepseek(),
                                           json("olmo3", R"("num_hidden_layers": 5, "sliding_window": 8)"),
                                           json("seed_oss", R"("num_hidden_layers": 2, "head_dim": 32)")));

TEST(family_shipped, every_family_config_loads_and_passes_check) {
  const char* const files[] = {"llama_3_1_8b.toml",     "llama_3_1_70b.toml", "llama_3_2_1b.toml",
                               "qwen2_5_7b.toml",       "qwen2_5_72b.toml",   "qwen2_57b_a14b.toml",
                               "mistral_7b_v0_1.toml",  "mixtral_8x7b.toml",  "gemma_3_4b_text.toml",
                               "gemma_3_27b_text.toml", "gpt_oss_20b.toml",   "gpt_oss_120b.toml",
                               "deepseek_v3.toml",      "kimi_k2.toml",       "glm_4_5_air.toml",
                               "olmo3_7b.toml",         "seed_oss_36b.toml"};
  for (const char* file : files) {
    const model_spec spec = load_model_spec(config_path(file));
    EXPECT_TRUE(run_sanity_check(spec, 4096).pass) << file;
  }
}

// Llama-3.1-8B by hand: 32 layers of q 4096*4096 + k, v 4096*1024 + o 4096*4096 = 41,943,040 and a SwiGLU of
// 3*4096*14,336 = 176,160,768, plus the LM head 4096*128,256 = 525,336,576:
// 6 * (32*218,103,808 + 525,336,576) = 6 * 7,504,658,432 = 45,027,950,592; pairs 6 * 32 * 2*32*128 = 1,572,864.
// Mistral-7B-v0.1 has the same decoder but vocab 32,000 and every layer in a window of 4096.
TEST(family_shipped, llama_3_1_8b_and_mistral_7b_by_hand) {
  const coefficients llama = compute_coefficients(load_model_spec(config_path("llama_3_1_8b.toml")));
  EXPECT_EQ(llama.dense_per_token, 45027950592);
  EXPECT_EQ(llama.text_attn_pair, 1572864);
  const model_spec mistral_spec = load_model_spec(config_path("mistral_7b_v0_1.toml"));
  const coefficients mistral = compute_coefficients(mistral_spec);
  EXPECT_EQ(mistral.dense_per_token, 6 * (32 * std::int64_t{218103808} + 4096 * 32000));
  EXPECT_EQ(mistral.text_attn_pair, 0);
  EXPECT_EQ(mistral.window_attn_pair[0], 1572864);
  EXPECT_EQ(geometry_of(mistral_spec).windows[0].size, 4096);
}

// ---- the Megatron check, per mixer kind -------------------------------------------------------------------

// MLA: Megatron's MLA term adds q_lora_rank + kv_lora_rank per layer (the latent norms' "+ 1"s): 6 * (16 + 8) * 3
// layers = 432 per token, the documented difference; every row passes.
TEST(family_check, mla_latent_norms_are_the_documented_difference) {
  const model_spec spec = from_json(kDeepSeek);
  const megatron_constant k = compute_megatron_constant(spec, 4096);
  EXPECT_EQ(k.text_mla_norms_per_token, 432.0);
  const check_report report = run_sanity_check(spec, 4096);
  EXPECT_TRUE(report.pass);
  bool stated = false;
  for (const check_row& row : report.rows) stated = stated || row.term.find("MLA latent norms") != std::string::npos;
  EXPECT_TRUE(stated);
}

// Windows: the constant bills every softmax layer at S/2 keys. Mistral's config (2 sliding layers, w = 4) at S = 8:
// exact pairs per layer 4*5/2 + 4*4 = 26, the constant's 8*8/2 = 32: the one-document row expects 26/32.
TEST(family_check, a_window_is_stated_against_the_constant) {
  const model_spec spec = from_json(json("mistral", R"("num_hidden_layers": 2, "sliding_window": 4)"));
  const check_report report = run_sanity_check(spec, 8);
  EXPECT_TRUE(report.pass);
  bool found = false;
  for (const check_row& row : report.rows) {
    if (row.term == "one S-token document: attention vs constant x S") {
      EXPECT_DOUBLE_EQ(row.expected_ratio, 26.0 / 32.0);
      found = true;
    }
  }
  EXPECT_TRUE(found);
}

// A spec built in code is held to the same rules (validate_model_spec), with the family's config.json key.
TEST(family_check, validate_model_spec_names_the_familys_key) {
  model_spec spec = from_json(kMixtral);
  spec.name = "m";
  spec.text.num_experts_per_tok = 5;
  try {
    validate_model_spec(spec);
    FAIL() << "accepted";
  } catch (const error& e) {
    EXPECT_STREQ(e.what(),
                 "model_spec 'm': key 'text_config.num_experts_per_tok': must be <= num_local_experts = 4 "
                 "(got 5)");
  }
  spec = from_json(json("mistral", R"("num_hidden_layers": 2, "sliding_window": 4)"));
  spec.name = "m";
  spec.text.sliding_window = 0;
  EXPECT_THROW(validate_model_spec(spec), error);
}

// SCHEMA.md's family table follows the field tables: every field of every adapter is named, in backquotes, in its
// model_type's row or in the paragraph of the fields every family reads.
TEST(family_schema, schema_md_names_every_field_of_every_adapter) {
  std::ifstream in(std::string(FLOPMETER_SOURCE_DIR) + "/model_configs/SCHEMA.md");
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t section = doc.find("## Decoder families");
  ASSERT_NE(section, std::string::npos);
  const std::string text = doc.substr(section, doc.find("\n## ", section + 1) - section);
  const std::string common = text.substr(0, text.find("| `model_type` |"));
  for (const detail::family_adapter* family : detail::all_families()) {
    const std::string type = "`" + std::string(family->model_type) + "`";
    // The row whose first cell names the type ("| `deepseek_v3`, `kimi_k2` | ...").
    std::string row;
    for (std::size_t at = text.find("\n| "); at != std::string::npos; at = text.find("\n| ", at + 1)) {
      const std::string line = text.substr(at + 1, text.find('\n', at + 1) - at - 1);
      if (line.substr(0, line.find(" |", 2)).find(type) != std::string::npos) row = line;
    }
    ASSERT_FALSE(row.empty()) << family->model_type;
    for (const detail::family_field& field : family->fields) {
      const std::string key = "`" + std::string(field.key) + "`";
      EXPECT_TRUE(row.find(key) != std::string::npos || common.find(key) != std::string::npos)
          << family->model_type << ": " << field.key;
    }
  }
}

// OLMo-3-7B by hand: 32 layers of q, k, v, o 4096*4096 each (32 kv heads) = 67,108,864 and a SwiGLU of
// 3*4096*11,008 = 135,266,304, plus the LM head 4096*100,278 = 410,738,688: 6 * (32*202,375,168 + 410,738,688) =
// 6 * 6,886,744,064 = 41,320,464,384. Per pair and layer 32*(128 + 128) = 8,192: the 8 full layers 6 * 8 * 8,192 =
// 393,216, the 24 sliding ones (window 4096) 6 * 24 * 8,192 = 1,179,648.
// Seed-OSS-36B by hand: q 5120*10,240 + k, v 5120*1,024 + o 10,240*5120 = 115,343,360 and a SwiGLU of
// 3*5120*27,648 = 424,673,280 on 64 layers, plus the LM head 5120*155,136 = 794,296,320: 6 * (64*540,016,640 +
// 794,296,320) = 6 * 35,355,361,280 = 212,132,167,680. Pairs 6 * 64 * 80*(128 + 128) = 7,864,320, no window.
TEST(family_shipped, olmo3_7b_and_seed_oss_36b_by_hand) {
  const model_spec olmo = load_model_spec(config_path("olmo3_7b.toml"));
  const coefficients o = compute_coefficients(olmo);
  EXPECT_EQ(o.dense_per_token, 41320464384);
  EXPECT_EQ(o.text_attn_pair, 393216);
  EXPECT_EQ(o.window_attn_pair[0], 1179648);
  EXPECT_EQ(olmo.text.sliding_window, 4096);
  const coefficients seed = compute_coefficients(load_model_spec(config_path("seed_oss_36b.toml")));
  EXPECT_EQ(seed.dense_per_token, 212132167680);
  EXPECT_EQ(seed.text_attn_pair, 7864320);
  EXPECT_EQ(seed.window_attn_pair[0], 0);
}

// ---- bad input: the field and the reason, at FILE:LINE:COL ------------------------------------------------

TEST(family_bad_input, layer_types_of_the_wrong_length) {
  const std::string text = kGemma.substr(0, kGemma.size() - 1) +
                           R"(, "layer_types": ["sliding_attention", "full_attention", "sliding_attention"]})";
  EXPECT_EQ(error_of(text), at(text, "\"layer_types\": ", "layer_types") +
                                "has 3 entries but num_hidden_layers = 4 (one entry per decoder layer)");
}

TEST(family_bad_input, unknown_layer_types_entry) {
  const std::string text = kGemma.substr(0, kGemma.size() - 1) +
                           R"(, "layer_types": ["sliding_attention", "full_attention", "local", "full_attention"]})";
  EXPECT_EQ(error_of(text), at(text, "\"sliding_attention\", \"full_attention\", ", "layer_types[2]") +
                                "unknown layer type \"local\" (expected \"full_attention\" or \"sliding_attention\")");
}

TEST(family_bad_input, a_window_of_zero) {
  const std::string text = json("mistral", R"("num_hidden_layers": 2, "sliding_window": 0)");
  EXPECT_EQ(error_of(text), at(text, "\"sliding_window\": ", "sliding_window") + "must be > 0 (got 0)");
  // Qwen2 reads a window only when use_sliding_window: 0 is then refused too.
  const std::string qwen = json("qwen2", R"("num_hidden_layers": 3, "use_sliding_window": true, "sliding_window": 0, )"
                                         R"("max_window_layers": 1)");
  EXPECT_EQ(error_of(qwen), at(qwen, "\"sliding_window\": ", "sliding_window") + "must be > 0 (got 0)");
}

TEST(family_bad_input, first_k_dense_replace_beyond_the_layers) {
  std::string text = kDeepSeek;
  text.replace(text.find(R"("first_k_dense_replace": 1)"), 26, R"("first_k_dense_replace": 5)");
  EXPECT_EQ(error_of(text), at(text, "\"first_k_dense_replace\": ", "first_k_dense_replace") +
                                "must be in [0, num_hidden_layers = 3] (got 5)");
}

TEST(family_bad_input, kv_lora_rank_without_the_rope_dims) {
  std::string text = kDeepSeek;
  text.replace(text.find(R"("qk_rope_head_dim": 4, )"), 23, "");
  EXPECT_EQ(error_of(text), "cfg.json:1:1: required key 'qk_rope_head_dim' is missing");
}

TEST(family_bad_input, sliding_layers_while_the_window_is_off) {
  const std::string text = json("qwen2", R"("num_hidden_layers": 2, "use_sliding_window": false, )"
                                         R"("layer_types": ["full_attention", "sliding_attention"])");
  EXPECT_NE(error_of(text).find("key 'layer_types': has \"sliding_attention\" layers but use_sliding_window is "
                                "false"),
            std::string::npos)
      << error_of(text);
}

TEST(family_bad_input, top_k_above_the_experts_and_heads_that_do_not_divide) {
  std::string text = kMixtral;
  text.replace(text.find(R"("num_experts_per_tok": 2)"), 24, R"("num_experts_per_tok": 5)");
  EXPECT_EQ(error_of(text),
            at(text, "\"num_experts_per_tok\": ", "num_experts_per_tok") + "must be <= num_local_experts = 4 (got 5)");
  const std::string heads =
      "{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_attention_heads\": 5, "
      "\"intermediate_size\": 96, \"vocab_size\": 100, \"num_hidden_layers\": 2}";
  EXPECT_EQ(error_of(heads), at(heads, "\"num_attention_heads\": ", "num_attention_heads") +
                                 "must divide hidden_size = 64 when head_dim is not given (got 5); write head_dim");
}

TEST(family_bad_input, toml_keys_are_the_familys) {
  // A Qwen-only key in a Llama TOML is an unknown key of [text_config].
  const std::string toml =
      "[model]\nmodel_type = \"llama\"\n[text_config]\nhidden_size = 64\nnum_hidden_layers = 2\n"
      "num_attention_heads = 4\nintermediate_size = 96\nvocab_size = 100\n"
      "full_attention_interval = 4\n";
  try {
    (void)parse_model_spec(toml, "m.toml");
    FAIL() << "accepted";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("m.toml:9:1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("full_attention_interval"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace flopmeter
