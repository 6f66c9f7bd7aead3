// Tests of the Mamba-2 hybrids (nemotron_h, granitemoehybrid, falcon_h1): a small config.json per family with every
// per-token term derived by hand below, the shipped TOMLs derived by hand, the regimes through the one GEMM rule, the
// Megatron check naming its difference, and the hostile inputs refused with FILE:LINE:COL and the key.
//
// Conventions: a GEMM d_in -> d_out costs d_in*d_out multiply-adds per token, training 6 FLOPs per multiply-add. A
// Mamba-2 mixer of d_in = heads x head_dim, G groups, state N and conv kernel K costs per token:
//   in_proj h*(2 d_in + 2 G N + heads) + conv K*(d_in + 2 G N) + scan 3.5 d_in N + out_proj d_in*h
// (the scan is Megatron's 7 d_in N FLOPs forward; transformers' chunked kernel executes more, not model FLOPs).

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

std::string config_path(const std::string& file) {
  return std::string(FLOPMETER_SOURCE_DIR) + "/model_configs/" + file;
}

// h = 64, 4 query heads, 2 kv heads, head_dim 16: attention projections 12,288 per layer, 128 per pair. LM head
// 64*100 = 6,400.
const std::string kDecoder = R"("hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, )"
                             R"("head_dim": 16, "vocab_size": 100, )";

// Nemotron-H, pattern M * - E. The Mamba layer: d_in = 4 x 8 = 32, G = 2, N = 4, K = 4: in_proj 64*(64 + 16 + 4)
// = 5,376, conv 4*(32 + 16) = 192, scan 3.5*32*4 = 448, out_proj 32*64 = 2,048: 8,064. The MLP layer (up, relu2,
// down) 2*64*96 = 12,288. The MoE layer: router 64*4 = 256, 2 experts of up/down 2*64*16 = 2,048 each: 4,096, the
// shared expert 2*64*32 = 4,096 (no gate): 8,448. 6 * (8,064 + 12,288 + 12,288 + 8,448 + 6,400) = 6 * 47,488 =
// 284,928.
const std::string kNemotron = "{\"model_type\": \"nemotron_h\", " + kDecoder +
                              R"("intermediate_size": 96, "num_hidden_layers": 4, "hybrid_override_pattern": "M*-E", )"
                              R"("mamba_num_heads": 4, "mamba_head_dim": 8, "n_groups": 2, "ssm_state_size": 4, )"
                              R"("conv_kernel": 4, "n_routed_experts": 4, "num_experts_per_tok": 2, )"
                              R"("moe_intermediate_size": 16, "moe_shared_expert_intermediate_size": 32, )"
                              R"("mlp_hidden_act": "relu2", "expand": 2})";

TEST(mamba2, nemotron_h_blocks_by_hand) {
  const model_spec spec = from_json(kNemotron);
  const coefficients c = compute_coefficients(spec);
  EXPECT_EQ(c.dense_per_token, 284928);
  EXPECT_EQ(c.dense.linear_attention, 6 * 8064);
  EXPECT_EQ(c.dense.attention_projections, 6 * 12288);
  EXPECT_EQ(c.dense.dense_mlp, 6 * 12288);
  EXPECT_EQ(c.dense.moe_router, 6 * 256);
  EXPECT_EQ(c.dense.moe_routed_experts, 6 * 4096);
  EXPECT_EQ(c.dense.moe_shared_expert, 6 * 4096);
  EXPECT_EQ(c.dense.moe_shared_expert_gate, 0);
  EXPECT_EQ(c.text_attn_pair, 6 * 128);  // one attention layer: packing changes only its pairs
  EXPECT_EQ(spec.text.num_mamba_layers(), 1);
  EXPECT_EQ(spec.text.num_attention_layers(), 1);
  EXPECT_EQ(spec.text.num_moe_layers(), 1);
  EXPECT_EQ(spec.text.num_dense_mlp_layers(), 1);
  // The walk, in forward order: the Mamba layer's in_proj, conv1d, ssm_scan, out_proj.
  std::vector<std::string> mamba;
  detail::walk_gemms(spec, training_regime{}, false, [&](const detail::gemm_visit& v) {
    if (v.slot == detail::coefficient_slot::linear_attention) mamba.push_back(v.name);
  });
  EXPECT_EQ(mamba, (std::vector<std::string>{"in_proj", "conv1d", "ssm_scan", "out_proj"}));
}

// The same blocks from layers_block_type; both written and agreeing is accepted.
TEST(mamba2, nemotron_h_layers_block_type) {
  std::string listed = kNemotron;
  listed.replace(listed.find(R"("hybrid_override_pattern": "M*-E")"), 33,
                 R"("layers_block_type": ["mamba", "attention", "mlp", "moe"])");
  EXPECT_EQ(compute_coefficients(from_json(listed)).dense_per_token, 284928);
  std::string both = kNemotron;
  both.replace(both.find(R"("hybrid_override_pattern")"), 0,
               R"("layers_block_type": ["mamba", "attention", "mlp", "moe"], )");
  EXPECT_EQ(compute_coefficients(from_json(both)).dense_per_token, 284928);
}

// Megatron's Mamba term with d_in = 2h = 128: 2h(2*128 + 16 + 4) = 35,328 + scan 7*128*4 = 3,584 + out 2*128*64 =
// 16,384, x3 = 165,888; flopmeter's 6 * 8,064 = 48,384: the row expects 48,384 / 165,888 and names the difference.
TEST(mamba2, check_names_megatrons_inner_width) {
  const check_report report = run_sanity_check(from_json(kNemotron), 64);
  EXPECT_TRUE(report.pass);
  bool found = false;
  for (const check_row& row : report.rows) {
    if (row.term.find("Mamba-2 layers") == std::string::npos) continue;
    found = true;
    EXPECT_DOUBLE_EQ(row.megatron, 165888.0);
    EXPECT_DOUBLE_EQ(row.exact, 48384.0);
    EXPECT_DOUBLE_EQ(row.expected_ratio, 48384.0 / 165888.0);
    EXPECT_NE(row.explanation.find("Megatron bills the Mamba inner width as 2 x hidden"), std::string::npos);
  }
  EXPECT_TRUE(found);
}

// LoRA on out_proj: layer 0 (the Mamba layer) is the first adapted one; its input needs no gradient, so in_proj,
// the conv and the scan run forward only (8,064 - 2,048 = 6,016 x 2 FLOPs) and the frozen out_proj too (2,048 x 2):
// the Mamba layer's base work is 2 * 8,064 = 16,128. Its adapter: A 32*2 = 64 (forward + weight gradient: 2
// passes), B 2*64 = 128 (3 passes): 2*(2*64 + 3*128) = 1,024. A Gated DeltaNet target is refused, naming it.
TEST(mamba2, lora_on_out_proj_and_a_refused_target) {
  const model_spec spec = from_json(kNemotron);
  training_regime lora;
  lora.lora_rank = 2;
  lora.lora_targets = {lora_target::out_proj};
  const coefficients c = compute_coefficients(spec, lora).without_items;
  EXPECT_EQ(c.dense.lora_adapters, 1024);
  EXPECT_EQ(c.dense.linear_attention, 16128);
  training_regime other;
  other.lora_rank = 2;
  other.lora_targets = {lora_target::in_proj_qkv};
  try {
    (void)compute_coefficients(spec, other);
    FAIL() << "accepted";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("in_proj_qkv"), std::string::npos) << e.what();
  }
}

// Full recompute re-runs every decoder layer's forward: 2 * (8,064 + 12,288 + 12,288 + 8,448) = 82,176 per token,
// the Mamba mixer's part 2 * 8,064 = 16,128, and the attention core's 2 * 128 = 256 per pair.
TEST(mamba2, full_recompute_follows_the_gemm_rule) {
  training_regime r;
  r.recompute.policy = recompute_policy::full;
  const coefficients c = compute_coefficients(from_json(kNemotron), r).without_items;
  EXPECT_EQ(c.recompute.text_per_token, 82176);
  EXPECT_EQ(c.recompute.dense.linear_attention, 16128);
  EXPECT_EQ(c.recompute.text_attn_pair, 256);
}

// Granite 4.0-H: layer 0 Mamba (d_in = 2 x 64 = 128 = 4 x 32, G = 1, N = 4): in_proj 64*(256 + 8 + 4) = 17,152,
// conv 4*(128 + 8) = 544, scan 3.5*128*4 = 1,792, out_proj 128*64 = 8,192: 27,680; layer 1 attention 12,288. Each
// layer: router 64*4 = 256, 2 gated experts 2*3*64*16 = 6,144, the shared MLP 3*64*32 = 6,144 (no sigmoid gate):
// 12,544. 6 * (27,680 + 12,288 + 2*12,544 + 6,400) = 6 * 71,456 = 428,736. Without experts the shared MLP is the
// layer's SwiGLU: 6 * (27,680 + 12,288 + 2*6,144 + 6,400) = 6 * 58,656 = 351,936.
TEST(mamba2, granite_shared_mlp_beside_the_experts) {
  const std::string mamba = R"("layer_types": ["mamba", "attention"], "mamba_n_heads": 4, "mamba_d_head": 32, )"
                            R"("mamba_n_groups": 1, "mamba_d_state": 4, "mamba_d_conv": 4, "mamba_expand": 2, )";
  const model_spec moe =
      from_json("{\"model_type\": \"granitemoehybrid\", " + kDecoder + mamba +
                R"("num_hidden_layers": 2, "intermediate_size": 16, "num_local_experts": 4, "num_experts_per_tok": 2, )"
                R"("shared_intermediate_size": 32, "position_embedding_type": "nope"})");
  const coefficients c = compute_coefficients(moe);
  EXPECT_EQ(c.dense_per_token, 428736);
  EXPECT_EQ(c.dense.moe_shared_expert, 6 * 2 * 6144);
  EXPECT_EQ(c.dense.moe_shared_expert_gate, 0);
  const model_spec dense =
      from_json("{\"model_type\": \"granitemoehybrid\", " + kDecoder + mamba +
                R"("num_hidden_layers": 2, "intermediate_size": 16, "shared_intermediate_size": 32})");
  EXPECT_EQ(compute_coefficients(dense).dense_per_token, 351936);
}

// Falcon-H1: each layer runs attention (12,288) and the Nemotron test's Mamba mixer (8,064) on the same input, then
// a SwiGLU 3*64*96 = 18,432: 6 * (2*38,784 + 6,400) = 6 * 83,968 = 503,808; pairs 6 * 2 * 128 = 1,536.
TEST(mamba2, falcon_h1_attention_and_mamba_in_one_layer) {
  const std::string text = "{\"model_type\": \"falcon_h1\", " + kDecoder +
                           R"("num_hidden_layers": 2, "intermediate_size": 96, "mamba_d_ssm": 32, "mamba_n_heads": 4, )"
                           R"("mamba_d_head": 8, "mamba_n_groups": 2, "mamba_d_state": 4, "mamba_d_conv": 4, )"
                           R"("attn_layer_indices": null, "mamba_use_mlp": true})";
  const model_spec spec = from_json(text);
  const coefficients c = compute_coefficients(spec);
  EXPECT_EQ(c.dense_per_token, 503808);
  EXPECT_EQ(c.dense.linear_attention, 6 * 2 * 8064);
  EXPECT_EQ(c.text_attn_pair, 1536);
  EXPECT_EQ(spec.text.num_mamba_layers(), 2);
  // Without mamba_d_ssm transformers takes the class default 1024, which 4 x 8 heads cannot hold: refused.
  std::string absent = text;
  absent.replace(absent.find(R"("mamba_d_ssm": 32, )"), 19, "");
  EXPECT_NE(error_of(absent).find("key 'mamba_d_ssm': gives d_in = 1024 (absent: the class default 1024) but "
                                  "mamba_n_heads x mamba_d_head = 32; they must agree"),
            std::string::npos)
      << error_of(absent);
}

// `flopmeter import` writes the pattern (its '*' kept) and Falcon-H1's null attn_layer_indices as "none": the TOML
// gives the config.json's coefficients.
TEST(mamba2, import_round_trip) {
  const std::string falcon =
      "{\"model_type\": \"falcon_h1\", " + kDecoder +
      R"("num_hidden_layers": 2, "intermediate_size": 96, "mamba_d_ssm": 32, "mamba_n_heads": 4, )"
      R"("mamba_d_head": 8, "mamba_n_groups": 2, "mamba_d_state": 4, "attn_layer_indices": null})";
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("flopmeter_mamba2_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  for (const std::string& config : {kNemotron, falcon}) {
    const std::filesystem::path file = dir / "config.json";
    std::ofstream(file) << config;
    const std::string toml = import_hf_config(file.string());
    EXPECT_EQ(compute_coefficients(load_model_spec(file.string())).dense_per_token,
              compute_coefficients(parse_model_spec(toml, "imported.toml")).dense_per_token)
        << toml;
  }
  std::filesystem::remove_all(dir);
}

// ---- shipped configs by hand -------------------------------------------------------------------------------

// Nemotron-Nano-9B-v2: 27 M, 4 *, 25 - layers. Mamba (d_in 128 x 80 = 10,240, G 8, N 128, K 4): in_proj
// 4480*(20,480 + 2,048 + 128) = 101,498,880, conv 4*12,288 = 49,152, scan 3.5*10,240*128 = 4,587,520, out_proj
// 10,240*4480 = 45,875,200: 152,010,752. Attention: q, o 4480*5120 = 22,937,600 each, k, v 4480*1024 = 4,587,520
// each: 55,050,240. MLP 2*4480*15,680 = 140,492,800. LM head 4480*131,072 = 587,202,560.
// 6 * (27*152,010,752 + 4*55,050,240 + 25*140,492,800 + 587,202,560) = 6 * 8,424,013,824 = 50,544,082,944.
TEST(mamba2, nemotron_nano_9b_v2_by_hand) {
  const model_spec spec = load_model_spec(config_path("nemotron_nano_9b_v2.toml"));
  const coefficients c = compute_coefficients(spec);
  EXPECT_EQ(c.dense.linear_attention, 6 * 27 * std::int64_t{152010752});
  EXPECT_EQ(c.dense_per_token, 50544082944);
  EXPECT_TRUE(run_sanity_check(spec, 4096).pass);
}

// Nemotron-3-Nano-30B-A3B: 23 M, 6 *, 23 E layers. Mamba (d_in 64 x 64 = 4096, G 8, N 128): in_proj
// 2688*(8192 + 2048 + 64) = 27,697,152, conv 4*6144 = 24,576, scan 3.5*4096*128 = 1,835,008, out_proj 4096*2688 =
// 11,010,048: 40,566,784. MoE: router 2688*128 = 344,064, 6 experts 6*2*2688*1856 = 59,867,136, shared
// 2*2688*3712 = 19,955,712. Megatron's d_in = 2 x 2688 = 5376 bills the Mamba layers 1/0.7887 = +27%.
TEST(mamba2, nemotron_3_nano_by_hand) {
  const model_spec spec = load_model_spec(config_path("nemotron_3_nano_30b_a3b.toml"));
  const coefficients c = compute_coefficients(spec);
  EXPECT_EQ(c.dense.linear_attention, 6 * 23 * std::int64_t{40566784});
  EXPECT_EQ(c.dense.moe_routed_experts, 6 * 23 * std::int64_t{59867136});
  EXPECT_EQ(c.dense.moe_shared_expert, 6 * 23 * std::int64_t{19955712});
  EXPECT_EQ(c.dense.moe_router, 6 * 23 * std::int64_t{344064});
  EXPECT_TRUE(run_sanity_check(spec, 4096).pass);
}

TEST(mamba2, granite_and_falcon_shipped_load_and_pass_check) {
  for (const char* file : {"granite_4_0_h_small.toml", "falcon_h1_0_5b.toml"}) {
    const model_spec spec = load_model_spec(config_path(file));
    EXPECT_TRUE(run_sanity_check(spec, 4096).pass) << file;
  }
  // Falcon-H1-0.5B's Mamba (d_in 1536 = 24 x 64, G 1, N 128): in_proj 1024*(3072 + 256 + 24) = 3,432,448, conv
  // 4*1792 = 7,168, scan 3.5*1536*128 = 688,128, out_proj 1536*1024 = 1,572,864: 5,700,608 x 36 layers x 6.
  EXPECT_EQ(compute_coefficients(load_model_spec(config_path("falcon_h1_0_5b.toml"))).dense.linear_attention,
            6 * 36 * std::int64_t{5700608});
}

// ---- hostile inputs ------------------------------------------------------------------------------------------

TEST(mamba2_bad_input, pattern_length_letter_and_groups) {
  std::string length = kNemotron;
  length.replace(length.find("\"M*-E\""), 6, "\"M*-\"");
  EXPECT_EQ(error_of(length), at(length, "\"hybrid_override_pattern\": ", "hybrid_override_pattern") +
                                  "has 3 letters but num_hidden_layers = 4 (one letter per layer)");
  std::string letter = kNemotron;
  letter.replace(letter.find("\"M*-E\""), 6, "\"M*-X\"");
  EXPECT_EQ(error_of(letter), at(letter, "\"hybrid_override_pattern\": ", "hybrid_override_pattern") +
                                  "has an unknown letter \"X\" at position 3 (expected M: Mamba-2, *: attention, -: "
                                  "MLP, E: MoE)");
  std::string groups = kNemotron;
  groups.replace(groups.find(R"("n_groups": 2)"), 13, R"("n_groups": 3)");
  EXPECT_EQ(error_of(groups), at(groups, "\"n_groups\": ", "n_groups") + "must divide mamba_num_heads = 4 (got 3)");
  std::string block = kNemotron;
  block.replace(block.find(R"("hybrid_override_pattern": "M*-E")"), 33,
                R"("layers_block_type": ["mamba", "attention", "mlp", "ffn"])");
  EXPECT_EQ(error_of(block),
            at(block, "\"layers_block_type\": [\"mamba\", \"attention\", \"mlp\", ", "layers_block_type[3]") +
                "unknown block \"ffn\" (expected \"mamba\", \"attention\", \"mlp\" or \"moe\")");
  std::string latent = kNemotron;
  latent.replace(latent.find(R"("expand": 2)"), 11, R"("moe_latent_size": 32)");
  EXPECT_NE(error_of(latent).find("key 'moe_latent_size': is set: latent MoE projections are not billed yet"),
            std::string::npos)
      << error_of(latent);
}

TEST(mamba2_bad_input, granite_layer_types_and_width) {
  const std::string base = "{\"model_type\": \"granitemoehybrid\", " + kDecoder +
                           R"("num_hidden_layers": 2, "intermediate_size": 16, "shared_intermediate_size": 32, )"
                           R"("mamba_n_heads": 4, "mamba_d_head": 32, "mamba_n_groups": 1, "mamba_d_state": 4, )";
  const std::string unknown = base + R"("layer_types": ["mamba", "linear"]})";
  EXPECT_EQ(error_of(unknown), at(unknown, "\"layer_types\": [\"mamba\", ", "layer_types[1]") +
                                   "unknown layer type \"linear\" (expected \"mamba\" or \"attention\")");
  const std::string width = base + R"("layer_types": ["mamba", "attention"], "mamba_expand": 3})";
  EXPECT_EQ(error_of(width), at(width, "\"mamba_expand\": ", "mamba_expand") +
                                 "x hidden_size = 192 must equal mamba_n_heads x mamba_d_head = 128 (the Mamba-2 "
                                 "inner width)");
}

}  // namespace
}  // namespace flopmeter
