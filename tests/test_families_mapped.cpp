// Tests of the decoder families mapped onto existing mechanisms (smollm3, apertus, ernie4_5, ernie4_5_moe,
// minimax_m2): one small config.json per family with its coefficients derived by hand below, the shipped TOML of
// each derived by hand from its config.json, the TOML `import` writes giving the same coefficients, and each new
// field's bad values refused with FILE:LINE:COL, the key and the reason.
//
// Conventions of every derivation: a GEMM d_in -> d_out costs d_in*d_out multiply-adds per token, training 6 FLOPs
// per multiply-add (forward, input gradient, weight gradient); attention costs, per (query, key) pair and layer,
// heads*(qk_head_dim + v_head_dim) multiply-adds (QK^T and PV), x6.

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

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

// The shared decoder of the small configs: h = 64, 4 query heads, 2 kv heads, head_dim 16 (= 64 / 4), vocab 100.
// Attention projections per layer: q 64*64 + k 64*32 + v 64*32 + o 64*64 = 12,288 multiply-adds. A SwiGLU of width
// 96: 3*64*96 = 18,432. LM head: 64*100 = 6,400. Attention per pair and layer: 4*(16 + 16) = 128.
const std::string kDecoder = R"("hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, )"
                             R"("intermediate_size": 96, "vocab_size": 100, )";

std::string json(const std::string& model_type, const std::string& fields) {
  return "{\"model_type\": \"" + model_type + "\", " + kDecoder + fields + "}";
}

// ---- SmolLM3 ----------------------------------------------------------------------------------------------

// Without a window every layer is full whatever the NoPE layers: Llama's 2-layer numbers, 6 * (2*(12,288 + 18,432)
// + 6,400) = 407,040 and pairs 6 * 2 * 128 = 1,536.
TEST(mapped_families, smollm3_nope_layers_change_no_flop) {
  const model_spec spec = from_json(json("smollm3", R"("num_hidden_layers": 2, "no_rope_layers": [1, 0], )"
                                                    R"("use_sliding_window": false, "sliding_window": null)"));
  const coefficients c = compute_coefficients(spec);
  EXPECT_EQ(c.dense_per_token, 407040);
  EXPECT_EQ(c.text_attn_pair, 1536);
  EXPECT_EQ(geometry_of(spec).window_count, 0);
  EXPECT_TRUE(spec.text.tie_word_embeddings);  // SmolLM3Config's default
}

// With use_sliding_window and a window the NoPE layers slide: interval 2 of 4 layers makes layers 1 and 3 NoPE
// ((i+1) % 2 == 0), so 2 full and 2 sliding layers: full pairs 6 * 2 * 128 = 1,536, window pairs 1,536. The
// explicit no_rope_layers [1, 0, 0, 1] slides layers 1 and 2 instead: the same split.
TEST(mapped_families, smollm3_window_on_the_nope_layers) {
  for (const std::string& nope :
       {std::string(R"("no_rope_layer_interval": 2)"), std::string(R"("no_rope_layers": [1, 0, 0, 1])")}) {
    const model_spec spec = from_json(
        json("smollm3", R"("num_hidden_layers": 4, "use_sliding_window": true, "sliding_window": 8, )" + nope));
    const coefficients c = compute_coefficients(spec);
    EXPECT_EQ(c.text_attn_pair, 1536) << nope;
    EXPECT_EQ(c.window_attn_pair[0], 1536) << nope;
    const vision_geometry g = geometry_of(spec);
    ASSERT_EQ(g.window_count, 1);
    EXPECT_EQ(g.windows[0].size, 8);
  }
  const model_spec listed = from_json(json("smollm3", R"("num_hidden_layers": 4, "use_sliding_window": true, )"
                                                      R"("sliding_window": 8, "no_rope_layers": [1, 0, 0, 1])"));
  EXPECT_EQ(listed.text.layer_type(0), layer_kind::full_attention);
  EXPECT_EQ(listed.text.layer_type(1), layer_kind::sliding_attention);
  EXPECT_EQ(listed.text.layer_type(2), layer_kind::sliding_attention);
  EXPECT_EQ(listed.text.layer_type(3), layer_kind::full_attention);
}

// SmolLM3-3B by hand: 36 layers of q 2048*2048 + k, v 2048*512 + o 2048*2048 = 10,485,760 and a SwiGLU of
// 3*2048*11,008 = 67,633,152, plus the LM head 2048*128,256 = 262,668,288:
// 6 * (36*78,118,912 + 262,668,288) = 6 * 3,074,949,120 = 18,449,694,720; pairs 6 * 36 * 2*16*128 = 884,736.
TEST(mapped_families, smollm3_3b_by_hand) {
  const model_spec spec = load_model_spec(config_path("smollm3_3b.toml"));
  const coefficients c = compute_coefficients(spec);
  EXPECT_EQ(c.dense_per_token, 18449694720);
  EXPECT_EQ(c.text_attn_pair, 884736);
  EXPECT_TRUE(run_sanity_check(spec, 4096).pass);
}

// ---- Apertus -----------------------------------------------------------------------------------------------

// The 2-matrix MLP: up 64*96 + down 96*64 = 12,288 per layer (not the SwiGLU's 18,432).
// 6 * (2*(12,288 + 12,288) + 6,400) = 6 * 55,552 = 333,312; the MLP part 6 * 2 * 12,288 = 147,456.
TEST(mapped_families, apertus_mlp_has_two_matrices) {
  const model_spec spec = from_json(json("apertus", R"("num_hidden_layers": 2, "qk_norm": true)"));
  EXPECT_TRUE(spec.text.plain_mlp);
  const coefficients c = compute_coefficients(spec);
  EXPECT_EQ(c.dense_per_token, 333312);
  EXPECT_EQ(c.dense.dense_mlp, 147456);
  std::vector<std::string> names;
  detail::walk_gemms(spec, training_regime{}, false, [&](const detail::gemm_visit& v) {
    if (v.slot == detail::coefficient_slot::dense_mlp) names.push_back(v.name);
  });
  EXPECT_EQ(names, (std::vector<std::string>{"up_proj", "down_proj"}));
}

// LoRA on up_proj and down_proj follows the one GEMM rule: base frozen, layer 0's up input needs no gradient (A:
// forward + weight gradient, 2 passes), its down input does (the adapter upstream): 3. up: A 64*2 = 128, B 2*96 = 192;
// down: A 96*2 = 192, B 2*64 = 128. Layer 0: 2*(2*128 + 3*192) + 2*(3*192 + 3*128) = 1,664 + 1,920 = 3,584; layer 1:
// 2*(3*128 + 3*192) + 1,920 = 1,920 + 1,920 = 3,840. Total 7,424.
TEST(mapped_families, apertus_lora_on_the_two_matrices) {
  const model_spec spec = from_json(json("apertus", R"("num_hidden_layers": 2)"));
  training_regime lora;
  lora.lora_rank = 2;
  lora.lora_targets = {lora_target::up_proj, lora_target::down_proj};
  EXPECT_EQ(compute_coefficients(spec, lora).without_items.dense.lora_adapters, 7424);
}

// Apertus-8B by hand: 32 layers of attention 4096*4096*2 + 4096*1024*2 = 41,943,040 and the MLP 2*4096*21,504 =
// 176,160,768, plus the LM head 4096*131,072 = 536,870,912: 6 * (32*218,103,808 + 536,870,912) = 6 * 7,516,192,768
// = 45,097,156,608. Megatron without --swiglu bills the same MLP (ratio 1).
TEST(mapped_families, apertus_8b_by_hand) {
  const model_spec spec = load_model_spec(config_path("apertus_8b.toml"));
  const coefficients c = compute_coefficients(spec);
  EXPECT_EQ(c.dense_per_token, 45097156608);
  EXPECT_EQ(c.dense.dense_mlp, 6 * 32 * std::int64_t{176160768});
  const check_report report = run_sanity_check(spec, 4096);
  EXPECT_TRUE(report.pass);
  EXPECT_DOUBLE_EQ(report.rows[0].expected_ratio, 1.0);
}

// ---- ERNIE 4.5 ---------------------------------------------------------------------------------------------

// Absent head_dim is the config class's 128, not 64 / 4 = 16: q 64 -> 4*128 = 32,768, k, v 64 -> 2*128 = 16,384
// each, o 512 -> 64 = 32,768: 98,304 per layer. 6 * (2*(98,304 + 18,432) + 6,400) = 6 * 239,872 = 1,439,232; pairs
// 6 * 2 * 4*(128 + 128) = 12,288. A null head_dim is hidden / heads: Llama's 407,040.
TEST(mapped_families, ernie4_5_head_dim_defaults_to_128) {
  const coefficients c =
      compute_coefficients(from_json(json("ernie4_5", R"("num_hidden_layers": 2, "use_bias": false)")));
  EXPECT_EQ(c.dense_per_token, 1439232);
  EXPECT_EQ(c.text_attn_pair, 12288);
  EXPECT_EQ(
      compute_coefficients(from_json(json("ernie4_5", R"("num_hidden_layers": 2, "head_dim": null)"))).dense_per_token,
      407040);
}

// ERNIE-4.5-MoE, 4 layers, head_dim 16. Start 1, end 2, interval 1: layer 0 dense, 1 and 2 MoE, 3 dense (after the
// end). An MoE block: router 64*8 = 512, 2 experts x 3*64*16 = 6,144, the 2 shared experts as one ungated SwiGLU of
// 2*16 = 32: 3*64*32 = 6,144: 12,800. Total 6 * (4*12,288 + 2*18,432 + 2*12,800 + 6,400) = 6 * 118,016 = 708,096.
// Start 0, end -1 (or null: the last layer), interval 2 makes layers 1 and 3 MoE ((i+1) % 2 == 0): the same split.
TEST(mapped_families, ernie4_5_moe_layer_range_interval_and_shared_experts) {
  const std::string common = R"("num_hidden_layers": 4, "head_dim": 16, "moe_num_experts": 8, "moe_k": 2, )"
                             R"("moe_intermediate_size": 16, "moe_num_shared_experts": 2, )";
  const model_spec range =
      from_json(json("ernie4_5_moe", common + R"("moe_layer_start_index": 1, )"
                                              R"("moe_layer_end_index": 2, "moe_layer_interval": 1)"));
  const coefficients c = compute_coefficients(range);
  EXPECT_EQ(c.dense_per_token, 708096);
  EXPECT_EQ(c.dense.moe_router, 6 * 2 * 512);
  EXPECT_EQ(c.dense.moe_routed_experts, 6 * 2 * 6144);
  EXPECT_EQ(c.dense.moe_shared_expert, 6 * 2 * 6144);
  EXPECT_EQ(c.dense.dense_mlp, 6 * 2 * 18432);
  EXPECT_EQ(range.text.num_moe_layers(), 2);
  for (const std::string& end : {std::string("-1"), std::string("null")}) {
    const model_spec step = from_json(json("ernie4_5_moe", common +
                                                               R"("moe_layer_start_index": 0, )"
                                                               R"("moe_layer_end_index": )" +
                                                               end + R"(, "moe_layer_interval": 2)"));
    EXPECT_EQ(compute_coefficients(step).dense_per_token, 708096) << end;
    EXPECT_EQ(step.text.num_moe_layers(), 2);
  }
}

// ERNIE-4.5-21B-A3B by hand: attention q 2560 -> 20*128 = 6,553,600, k, v 2560 -> 512 = 1,310,720 each, o 6,553,600:
// 15,728,640 x 28 layers = 440,401,920. Layer 0: SwiGLU 3*2560*12,288 = 94,371,840. Layers 1-27: router 2560*64 =
// 163,840, 6 experts 6*3*2560*1536 = 70,778,880, shared 3*2560*3072 = 23,592,960: 94,535,680 x 27 = 2,552,463,360.
// LM head 2560*103,424 = 264,765,440. 6 * 3,352,002,560 = 20,112,015,360.
TEST(mapped_families, ernie_4_5_21b_a3b_by_hand) {
  const model_spec spec = load_model_spec(config_path("ernie_4_5_21b_a3b.toml"));
  const coefficients c = compute_coefficients(spec);
  EXPECT_EQ(c.dense_per_token, 20112015360);
  EXPECT_EQ(c.dense.moe_shared_expert, 6 * 27 * std::int64_t{23592960});
  EXPECT_EQ(spec.text.num_moe_layers(), 27);
  EXPECT_TRUE(run_sanity_check(spec, 4096).pass);
}

// ---- MiniMax-M2 --------------------------------------------------------------------------------------------

// Every layer MoE: router 64*4 = 256, 2 experts of intermediate_size 96: 2*18,432 = 36,864, no shared expert.
// 6 * (2*(12,288 + 256 + 36,864) + 6,400) = 6 * 105,216 = 631,296.
TEST(mapped_families, minimax_m2_every_layer_moe) {
  const model_spec spec = from_json(json("minimax_m2", R"("num_hidden_layers": 2, "num_local_experts": 4, )"
                                                       R"("num_experts_per_tok": 2, "attn_type_list": [1, 1], )"
                                                       R"("shared_intermediate_size": 0, "rotary_dim": 8, )"
                                                       R"("num_mtp_modules": 3, "use_qk_norm": true)"));
  const coefficients c = compute_coefficients(spec);
  EXPECT_EQ(c.dense_per_token, 631296);
  EXPECT_EQ(c.dense.moe_router, 6 * 2 * 256);
  EXPECT_EQ(c.dense.moe_shared_expert, 0);
  EXPECT_EQ(c.mtp_per_token, 0);
}

// MiniMax-M2 by hand: attention q 3072 -> 48*128 = 18,874,368, k, v 3072 -> 1024 = 3,145,728 each, o 18,874,368:
// 44,040,192; router 3072*256 = 786,432; 8 experts 8*3*3072*1536 = 113,246,208; 62 layers:
// 62*(44,040,192 + 786,432 + 113,246,208) = 9,800,515,584; LM head 3072*200,064 = 614,596,608.
// 6 * 10,415,112,192 = 62,490,673,152.
TEST(mapped_families, minimax_m2_by_hand) {
  const model_spec spec = load_model_spec(config_path("minimax_m2.toml"));
  EXPECT_EQ(compute_coefficients(spec).dense_per_token, 62490673152);
  EXPECT_TRUE(run_sanity_check(spec, 4096).pass);
}

// ---- import and bad input ------------------------------------------------------------------------------------

TEST(mapped_families, import_writes_a_toml_with_the_same_coefficients) {
  const std::string configs[] = {
      json("smollm3", R"("num_hidden_layers": 4, "use_sliding_window": true, "sliding_window": 8, )"
                      R"("no_rope_layers": [1, 0, 0, 1])"),
      json("apertus", R"("num_hidden_layers": 2)"), json("ernie4_5", R"("num_hidden_layers": 2, "head_dim": null)"),
      json("ernie4_5_moe", R"("num_hidden_layers": 4, "head_dim": 16, "moe_num_experts": 8, "moe_k": 2, )"
                           R"("moe_intermediate_size": 16, "moe_num_shared_experts": 2, "moe_layer_start_index": 1, )"
                           R"("moe_layer_end_index": 2)"),
      json("minimax_m2", R"("num_hidden_layers": 2, "num_local_experts": 4, "num_experts_per_tok": 2)")};
  const fs::path dir = fs::temp_directory_path() / ("flopmeter_mapped_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const std::string& config : configs) {
    const fs::path file = dir / "config.json";
    std::ofstream(file) << config;
    const model_spec from_config = load_model_spec(file.string());
    const std::string toml = import_hf_config(file.string());
    const model_spec from_toml = parse_model_spec(toml, "imported.toml");
    const coefficients a = compute_coefficients(from_config), b = compute_coefficients(from_toml);
    EXPECT_EQ(a.dense_per_token, b.dense_per_token) << toml;
    EXPECT_EQ(a.text_attn_pair, b.text_attn_pair) << toml;
    EXPECT_EQ(a.window_attn_pair[0], b.window_attn_pair[0]) << toml;
  }
  fs::remove_all(dir);
}

TEST(mapped_families_bad_input, smollm3_no_rope_layers) {
  const std::string short_list = json("smollm3", R"("num_hidden_layers": 2, "no_rope_layers": [1])");
  EXPECT_EQ(error_of(short_list), at(short_list, "\"no_rope_layers\": ", "no_rope_layers") +
                                      "has 1 entries but num_hidden_layers = 2 (one 0 or 1 per layer)");
  const std::string two = json("smollm3", R"("num_hidden_layers": 2, "no_rope_layers": [1, 2])");
  EXPECT_EQ(error_of(two),
            at(two, "\"no_rope_layers\": [1, ", "no_rope_layers[1]") + "must be 1 (RoPE) or 0 (NoPE) (got 2)");
  const std::string interval = json("smollm3", R"("num_hidden_layers": 2, "no_rope_layer_interval": 0)");
  EXPECT_EQ(error_of(interval),
            at(interval, "\"no_rope_layer_interval\": ", "no_rope_layer_interval") + "must be > 0 (got 0)");
}

TEST(mapped_families_bad_input, apertus_needs_its_mlp_width) {
  const std::string text = R"({"model_type": "apertus", "hidden_size": 64, "num_attention_heads": 4, )"
                           R"("vocab_size": 100, "num_hidden_layers": 2})";
  EXPECT_EQ(error_of(text), "cfg.json:1:1: required key 'intermediate_size' is missing");
}

TEST(mapped_families_bad_input, ernie4_5_moe_range_and_top_k) {
  const std::string common = R"("num_hidden_layers": 4, "moe_num_experts": 8, "moe_intermediate_size": 16, )"
                             R"("moe_num_shared_experts": 2, )";
  const std::string top_k = json("ernie4_5_moe", common + R"("moe_k": 9, "moe_layer_start_index": 1)");
  EXPECT_EQ(error_of(top_k), at(top_k, "\"moe_k\": ", "moe_k") + "must be <= moe_num_experts = 8 (got 9)");
  const std::string start = json("ernie4_5_moe", common + R"("moe_k": 2, "moe_layer_start_index": 4)");
  EXPECT_EQ(error_of(start), at(start, "\"moe_layer_start_index\": ", "moe_layer_start_index") +
                                 "must be < num_hidden_layers = 4 (got 4)");
  const std::string end =
      json("ernie4_5_moe", common + R"("moe_k": 2, "moe_layer_start_index": 2, "moe_layer_end_index": 1)");
  EXPECT_EQ(error_of(end), at(end, "\"moe_layer_end_index\": ", "moe_layer_end_index") +
                               "must be -1 (the last layer) or in [moe_layer_start_index = 2, num_hidden_layers = 4) "
                               "(got 1)");
  const std::string below =
      json("ernie4_5_moe", common + R"("moe_k": 2, "moe_layer_start_index": 1, "moe_layer_end_index": -2)");
  EXPECT_EQ(error_of(below), at(below, "\"moe_layer_end_index\": ", "moe_layer_end_index") + "must be >= -1 (got -2)");
  const std::string interval =
      json("ernie4_5_moe", common + R"("moe_k": 2, "moe_layer_start_index": 1, "moe_layer_interval": 0)");
  EXPECT_EQ(error_of(interval), at(interval, "\"moe_layer_interval\": ", "moe_layer_interval") + "must be > 0 (got 0)");
  const std::string missing = json("ernie4_5_moe", R"("num_hidden_layers": 4, "moe_num_experts": 8, "moe_k": 2, )"
                                                   R"("moe_intermediate_size": 16, "moe_layer_start_index": 1)");
  EXPECT_EQ(error_of(missing), "cfg.json:1:1: required key 'moe_num_shared_experts' is missing");
}

TEST(mapped_families_bad_input, minimax_m2_other_attention_or_a_shared_expert) {
  const std::string common = R"("num_hidden_layers": 2, "num_local_experts": 4, "num_experts_per_tok": 2, )";
  const std::string lightning = json("minimax_m2", common + R"("attn_type_list": [1, 0])");
  EXPECT_EQ(error_of(lightning), at(lightning, "\"attn_type_list\": [1, ", "attn_type_list[1]") +
                                     "must be 1 (softmax attention; MiniMax-M2 has no lightning attention) (got 0)");
  const std::string length = json("minimax_m2", common + R"("attn_type_list": [1])");
  EXPECT_EQ(error_of(length), at(length, "\"attn_type_list\": ", "attn_type_list") +
                                  "has 1 entries but num_hidden_layers = 2 (one per decoder layer)");
  const std::string shared = json("minimax_m2", common + R"("shared_intermediate_size": 64)");
  EXPECT_EQ(error_of(shared), at(shared, "\"shared_intermediate_size\": ", "shared_intermediate_size") +
                                  "must be 0: transformers' MiniMax-M2 builds no shared expert (got 64)");
  const std::string top_k = json("minimax_m2", R"("num_hidden_layers": 2, "num_local_experts": 4, )"
                                               R"("num_experts_per_tok": 5)");
  EXPECT_EQ(error_of(top_k),
            at(top_k, "\"num_experts_per_tok\": ", "num_experts_per_tok") + "must be <= num_local_experts = 4 (got 5)");
}

}  // namespace
}  // namespace flopmeter
