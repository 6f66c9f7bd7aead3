// Tests of the text-only Qwen decoders (model types qwen3, qwen3_moe, qwen3_next): the shipped configs against
// their sources, the FLOP coefficients derived by hand, a config.json that keeps the decoder's fields at the
// top level (no text_config object) read with the same rules and file:line:col errors (naming the JSON path),
// and `import` round trips of every shipped text-only config.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "flopmeter/error.h"
#include "flopmeter/flop_model.h"
#include "flopmeter/model_config.h"
#include "flopmeter/model_spec.h"
#include "support/error_message.h"

namespace flopmeter {
namespace {

namespace fs = std::filesystem;
using testing::error_message_of;

std::string config_path(const std::string& file) {
  return std::string(FLOPMETER_SOURCE_DIR) + "/model_configs/" + file;
}
std::string seed_path(const std::string& file) {
  return std::string(FLOPMETER_SOURCE_DIR) + "/tests/fuzz_corpus/fuzz_hf_config/" + file;
}

// ---------------------------------------------------------------------------------------------------------
// The shipped files, field by field, against the values their headers cite (NeMo's Qwen3 configs, THUDM/slime's
// Megatron arguments, the Qwen3 technical report; for Qwen3-Next a copy of its config.json, slime and
// transformers' Qwen3NextConfig).

// Every field of a text_spec that the loaders read, compared one by one (the spec, the coefficients).
void expect_same_text(const text_spec& x, const text_spec& y) {
  for (const auto& [p, q] : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {x.hidden_size, y.hidden_size},
           {x.num_hidden_layers, y.num_hidden_layers},
           {x.num_attention_heads, y.num_attention_heads},
           {x.num_key_value_heads, y.num_key_value_heads},
           {x.head_dim, y.head_dim},
           {x.intermediate_size, y.intermediate_size},
           {x.vocab_size, y.vocab_size},
           {x.full_attention_interval, y.full_attention_interval},
           {x.linear_key_head_dim, y.linear_key_head_dim},
           {x.linear_value_head_dim, y.linear_value_head_dim},
           {x.linear_num_key_heads, y.linear_num_key_heads},
           {x.linear_num_value_heads, y.linear_num_value_heads},
           {x.linear_conv_kernel_dim, y.linear_conv_kernel_dim},
           {x.mtp_num_hidden_layers, y.mtp_num_hidden_layers},
           {x.num_experts, y.num_experts},
           {x.num_experts_per_tok, y.num_experts_per_tok},
           {x.moe_intermediate_size, y.moe_intermediate_size},
           {x.shared_expert_intermediate_size, y.shared_expert_intermediate_size},
           {x.decoder_sparse_step, y.decoder_sparse_step},
       }) {
    EXPECT_EQ(p, q);
  }
  EXPECT_EQ(x.tie_word_embeddings, y.tie_word_embeddings);
  EXPECT_EQ(x.attn_output_gate, y.attn_output_gate);
  EXPECT_EQ(x.mlp_only_layers, y.mlp_only_layers);
  EXPECT_EQ(x.norm_topk_prob, y.norm_topk_prob);
}

// The decoder sizes every shipped text-only model has (vocab 151936, no output gate, all full attention) ...
text_spec decoder(std::int64_t hidden, std::int64_t layers, std::int64_t heads, std::int64_t kv_heads,
                  std::int64_t head_dim, std::int64_t intermediate, bool tie) {
  text_spec t;
  t.hidden_size = hidden;
  t.num_hidden_layers = layers;
  t.num_attention_heads = heads;
  t.num_key_value_heads = kv_heads;
  t.head_dim = head_dim;
  t.intermediate_size = intermediate;
  t.vocab_size = 151936;
  t.tie_word_embeddings = tie;
  return t;
}
// ... with MoE blocks in every layer (decoder_sparse_step 1, mlp_only_layers [], norm_topk_prob true) ...
text_spec with_moe(text_spec t, std::int64_t experts, std::int64_t top_k, std::int64_t expert_size,
                   std::int64_t shared_size) {
  t.num_experts = experts;
  t.num_experts_per_tok = top_k;
  t.moe_intermediate_size = expert_size;
  t.shared_expert_intermediate_size = shared_size;
  t.decoder_sparse_step = 1;
  t.norm_topk_prob = true;
  return t;
}
// ... and Qwen3-Next's Gated DeltaNet layout (gated attention every `interval` layers, kernel 4, one MTP layer).
text_spec with_deltanet(text_spec t, std::int64_t interval, std::int64_t key_dim, std::int64_t value_dim,
                        std::int64_t key_heads, std::int64_t value_heads) {
  t.attn_output_gate = true;
  t.full_attention_interval = interval;
  t.linear_key_head_dim = key_dim;
  t.linear_value_head_dim = value_dim;
  t.linear_num_key_heads = key_heads;
  t.linear_num_value_heads = value_heads;
  t.linear_conv_kernel_dim = 4;
  t.mtp_num_hidden_layers = 1;
  return t;
}

struct text_row {
  const char* stem;
  const char* model_type;
  text_spec text;
};

const std::vector<text_row> kShippedText = {
    {"qwen3_1_7b", "qwen3", decoder(2048, 28, 16, 8, 128, 6144, true)},
    {"qwen3_8b", "qwen3", decoder(4096, 36, 32, 8, 128, 12288, false)},
    {"qwen3_32b", "qwen3", decoder(5120, 64, 64, 8, 128, 25600, false)},
    {"qwen3_30b_a3b", "qwen3_moe", with_moe(decoder(2048, 48, 32, 4, 128, 6144, false), 128, 8, 768, 0)},
    {"qwen3_235b_a22b", "qwen3_moe", with_moe(decoder(4096, 94, 64, 4, 128, 12288, false), 128, 8, 1536, 0)},
    {"qwen3_next_80b_a3b", "qwen3_next",
     with_deltanet(with_moe(decoder(2048, 48, 16, 2, 256, 5120, false), 512, 10, 512, 512), 4, 128, 128, 16, 32)},
};

class shipped_text_config : public ::testing::TestWithParam<text_row> {};

TEST_P(shipped_text_config, every_field_equals_its_sources) {
  const text_row& r = GetParam();
  const model_spec spec = load_model_spec(config_path(std::string(r.stem) + ".toml"));
  EXPECT_EQ(spec.name, r.stem);
  EXPECT_EQ(spec.model_type, r.model_type);
  EXPECT_FALSE(spec.vision.has_value());  // text only
  EXPECT_FALSE(spec.train_mtp_layers);
  expect_same_text(spec.text, r.text);
  // Layout: Qwen3 and Qwen3-MoE all full attention; Qwen3-Next one full attention layer in every 4; the MoE
  // models an MoE block in every layer.
  const text_spec& t = r.text;
  const std::int64_t full =
      t.full_attention_interval == 0 ? t.num_hidden_layers : t.num_hidden_layers / t.full_attention_interval;
  EXPECT_EQ(spec.text.num_full_attention_layers(), full);
  EXPECT_EQ(spec.text.num_moe_layers(), t.num_experts > 0 ? t.num_hidden_layers : 0);
  EXPECT_NO_THROW(validate_model_spec(spec));
}

INSTANTIATE_TEST_SUITE_P(model_configs, shipped_text_config, ::testing::ValuesIn(kShippedText),
                         [](const ::testing::TestParamInfo<text_row>& param_info) {
                           return std::string(param_info.param.stem);
                         });

// ---------------------------------------------------------------------------------------------------------
// The coefficients, by hand (6 = 3 passes x 2 FLOPs per multiply-add; counts are multiply-adds per token).

// qwen3_8b (dense): h=4096, L=36 (all full attention), nh=32, nkv=8, hd=128, I=12288, V=151936, no gate.
//   attention projections h*(q + 2kv + o) = 4096*(4096 + 2*1024 + 4096) = 41,943,040   x36 x6 =  9,059,696,640
//   SwiGLU 3*h*I = 3*4096*12288 = 150,994,944                                          x36 x6 = 32,614,907,904
//   logits h*V = 4096*151936 = 622,329,856                                                 x6 =  3,733,979,136
//   dense = 45,408,583,680 (the Qwen3-VL-8B decoder's, the same sizes); pair 6*2*nh*hd*L = 6*8192*36 = 1,769,472
TEST(text_only_coefficients, qwen3_8b) {
  const coefficients c = compute_coefficients(load_model_spec(config_path("qwen3_8b.toml")));
  EXPECT_EQ(c.dense.attention_projections, 9059696640);
  EXPECT_EQ(c.dense.dense_mlp, 32614907904);
  EXPECT_EQ(c.dense.logits, 3733979136);
  EXPECT_EQ(c.dense.linear_attention + c.dense.moe_router + c.dense.moe_routed_experts + c.dense.moe_shared_expert +
                c.dense.moe_shared_expert_gate,
            0);
  EXPECT_EQ(c.dense_per_token, 45408583680);
  EXPECT_EQ(c.text_attn_pair, 1769472);
  EXPECT_EQ(c.dense_per_token, compute_coefficients(load_model_spec(config_path("qwen3_vl_8b.toml"))).dense_per_token);
  // No vision tower: every vision term is 0.
  EXPECT_EQ(c.vision_per_patch + c.vision_attn_pair + c.patch_embed_per_patch + c.merger_per_merged_token, 0);
}

// qwen3_30b_a3b (MoE): h=2048, L=48 (all full attention, all MoE), nh=32, nkv=4, hd=128, E=128, k=8,
// I_moe=768, no shared expert, V=151936.
//   attention 2048*(4096 + 2*512 + 4096) = 18,874,368                  x48 x6 =  5,435,817,984
//   router h*E = 2048*128 = 262,144                                    x48 x6 =     75,497,472
//   routed experts k*3*h*I_moe = 8*3*2048*768 = 37,748,736             x48 x6 = 10,871,635,968
//   logits 2048*151936 = 311,164,928                                       x6 =  1,866,989,568
//   dense = 18,249,940,992 (the Qwen3-VL-30B-A3B decoder's); pair 6*2*32*128*48 = 2,359,296
TEST(text_only_coefficients, qwen3_30b_a3b) {
  const coefficients c = compute_coefficients(load_model_spec(config_path("qwen3_30b_a3b.toml")));
  EXPECT_EQ(c.dense.attention_projections, 5435817984);
  EXPECT_EQ(c.dense.moe_router, 75497472);
  EXPECT_EQ(c.dense.moe_routed_experts, 10871635968);
  EXPECT_EQ(c.dense.moe_shared_expert, 0);
  EXPECT_EQ(c.dense.moe_shared_expert_gate, 0);
  EXPECT_EQ(c.dense.dense_mlp, 0);  // intermediate_size 6144 is unused: every layer is MoE
  EXPECT_EQ(c.dense.logits, 1866989568);
  EXPECT_EQ(c.dense_per_token, 18249940992);
  EXPECT_EQ(c.text_attn_pair, 2359296);
}

// qwen3_next_80b_a3b: h=2048, L=48 (12 full attention at i = 3, 7, ..., 47; 36 Gated DeltaNet; all MoE),
// nh=16, nkv=2, hd=256, output gate; DeltaNet Hk=16, Hv=32, dk=dv=128, kernel 4; E=512, k=10, I_moe=512,
// I_shared=512 (+ gate); V=151936.
//   full attention h*(2*nh*hd + 2*nkv*hd + nh*hd) = 2048*(8192 + 1024 + 4096) = 27,262,976      x12 x6 =  1,962,934,272
//   DeltaNet: qk = 16*128 = 2048, v = 32*128 = 4096: in_proj 2048*(2*2048 + 2*4096 + 2*32) = 25,296,896;
//     conv 4*(2*2048 + 4096) = 32,768; delta rule 4*32*128*128 = 2,097,152; out 4096*2048 = 8,388,608
//     -> 35,815,424                                                                             x36 x6 =  7,736,131,584
//   router 2048*512 = 1,048,576                                                                 x48 x6 =    301,989,888
//   routed experts 10*3*2048*512 = 31,457,280                                                   x48 x6 =  9,059,696,640
//   shared expert 3*2048*512 = 3,145,728                                                        x48 x6 =    905,969,664
//   shared-expert gate 2048                                                                     x48 x6 =        589,824
//   logits 2048*151936 = 311,164,928                                                                x6 =  1,866,989,568
//   dense = 21,834,301,440; pair 6*2*16*256*12 = 589,824
//   one trained MTP layer: eh_proj 2*2048^2 = 8,388,608 + full attention 27,262,976 + MoE block (1,048,576 +
//     31,457,280 + 3,145,728 + 2048 = 35,653,632) + logits 311,164,928 = 382,470,144, x6 = 2,294,820,864;
//     its attention pair 6*2*16*256 = 49,152
TEST(text_only_coefficients, qwen3_next_80b_a3b) {
  model_spec spec = load_model_spec(config_path("qwen3_next_80b_a3b.toml"));
  EXPECT_EQ(spec.text.num_full_attention_layers(), 12);
  EXPECT_EQ(spec.text.layer_type(3), layer_kind::full_attention);
  EXPECT_EQ(spec.text.layer_type(4), layer_kind::linear_attention);
  const coefficients c = compute_coefficients(spec);
  EXPECT_EQ(c.dense.attention_projections, 1962934272);
  EXPECT_EQ(c.dense.linear_attention, 7736131584);
  EXPECT_EQ(c.dense.dense_mlp, 0);
  EXPECT_EQ(c.dense.moe_router, 301989888);
  EXPECT_EQ(c.dense.moe_routed_experts, 9059696640);
  EXPECT_EQ(c.dense.moe_shared_expert, 905969664);
  EXPECT_EQ(c.dense.moe_shared_expert_gate, 589824);
  EXPECT_EQ(c.dense.logits, 1866989568);
  EXPECT_EQ(c.dense_per_token, 21834301440);
  EXPECT_EQ(c.text_attn_pair, 589824);
  EXPECT_EQ(c.mtp_per_token, 0);  // not trained by default
  spec.train_mtp_layers = true;
  const coefficients trained = compute_coefficients(spec);
  EXPECT_EQ(trained.mtp_per_token, 2294820864);
  EXPECT_EQ(trained.mtp_attn_pair, 49152);
}

// ---------------------------------------------------------------------------------------------------------
// config.json: the decoder's fields at the top level.

void expect_same_spec(const model_spec& a, const model_spec& b) {
  EXPECT_EQ(a.model_type, b.model_type);
  expect_same_text(a.text, b.text);
  EXPECT_EQ(a.vision.has_value(), b.vision.has_value());
  const coefficients c = compute_coefficients(a);
  const coefficients d = compute_coefficients(b);
  EXPECT_EQ(c.dense_per_token, d.dense_per_token);
  EXPECT_EQ(c.text_attn_pair, d.text_attn_pair);
}

// The fuzz corpus' seeds are written as the checkpoints write their config.json (Qwen3-8B, Qwen3-30B-A3B,
// Qwen3-Next-80B-A3B: the decoder's fields at the top level beside rope, token-id, dtype and sliding-window
// fields to ignore). Qwen3-Next's carries no MTP field: its spec has mtp_num_hidden_layers 0 where the TOML
// states the checkpoint's 1 (the same coefficients unless train_mtp_layers).
TEST(text_only_config_json, gives_the_shipped_tomls_spec) {
  const model_spec dense = load_model_spec(seed_path("seed-qwen3.json"));
  EXPECT_EQ(dense.name, "seed-qwen3");
  expect_same_spec(dense, load_model_spec(config_path("qwen3_8b.toml")));
  expect_same_spec(load_model_spec(seed_path("seed-qwen3_moe.json")),
                   load_model_spec(config_path("qwen3_30b_a3b.toml")));
  const model_spec next = load_model_spec(seed_path("seed-qwen3_next.json"));
  EXPECT_TRUE(next.text.attn_output_gate);  // absent: Qwen3-Next attention always has it
  EXPECT_EQ(next.text.mtp_num_hidden_layers, 0);
  model_spec shipped = load_model_spec(config_path("qwen3_next_80b_a3b.toml"));
  shipped.text.mtp_num_hidden_layers = 0;
  expect_same_spec(next, shipped);
}

// A small Qwen3 config.json, line numbers in the comments for the location tests.
const std::string kQwen3Json =
    "{\n"                                 // 1
    "  \"model_type\": \"qwen3\",\n"      // 2
    "  \"hidden_size\": 64,\n"            // 3
    "  \"num_hidden_layers\": 4,\n"       // 4
    "  \"num_attention_heads\": 4,\n"     // 5
    "  \"num_key_value_heads\": 2,\n"     // 6
    "  \"head_dim\": 16,\n"               // 7
    "  \"intermediate_size\": 128,\n"     // 8
    "  \"vocab_size\": 512,\n"            // 9
    "  \"rope_theta\": 1000000,\n"        // 10
    "  \"use_sliding_window\": false,\n"  // 11
    "  \"tie_word_embeddings\": true\n"   // 12
    "}\n";                                // 13

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const std::size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

std::string json_error(const std::string& json) {
  return error_message_of([&] { (void)parse_hf_config(json, "ckpt/config.json"); }, json);
}

TEST(text_only_config_json, a_small_qwen3_reads_as_the_qwen3_vl_decoder) {
  const model_spec spec = parse_hf_config(kQwen3Json, "ckpt/config.json");
  EXPECT_EQ(spec.model_type, "qwen3");
  EXPECT_EQ(spec.name, "ckpt");
  EXPECT_EQ(spec.text.hidden_size, 64);
  EXPECT_TRUE(spec.text.tie_word_embeddings);
  EXPECT_FALSE(spec.text.attn_output_gate);
  EXPECT_EQ(spec.text.num_full_attention_layers(), 4);
  // The same decoder as a Qwen3-VL one: h=64, L=4, nh=4, nkv=2, hd=16, I=128, V=512:
  //   attention 64*(64 + 2*32 + 64) = 12,288; SwiGLU 3*64*128 = 24,576; logits 64*512 = 32,768
  //   dense = 6*(4*36,864 + 32,768) = 6*180,224 = 1,081,344; pair 6*2*4*16*4 = 3,072
  const coefficients c = compute_coefficients(spec);
  EXPECT_EQ(c.dense_per_token, 1081344);
  EXPECT_EQ(c.text_attn_pair, 3072);
  model_spec as_vl = spec;
  as_vl.model_type = "qwen3_vl";
  EXPECT_EQ(compute_coefficients(as_vl).dense_per_token, c.dense_per_token);
}

TEST(text_only_config_json, errors_cite_line_column_and_the_top_level_path) {
  // Line 6 "  \"num_key_value_heads\": 2," -> 3: "  \"num_key_value_heads\": " is 25 characters -> 6:26.
  EXPECT_EQ(json_error(replaced(kQwen3Json, "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3")),
            "ckpt/config.json:6:26: key 'num_key_value_heads': must divide num_attention_heads = 4 (got 3)");
  try {
    (void)parse_hf_config(replaced(kQwen3Json, "\"hidden_size\": 64", "\"hidden_size\": 0"), "ckpt/config.json");
    FAIL() << "no error";
  } catch (const error& e) {
    EXPECT_EQ(e.where().line, 3u);
    EXPECT_EQ(e.where().column, 18u);  // "  \"hidden_size\": " is 17 characters
    EXPECT_EQ(e.where().key, "hidden_size");
    EXPECT_EQ(e.description(), "must be > 0 (got 0)");
  }
  // A missing required field is cited at the object's opening brace, by its top-level name.
  EXPECT_EQ(json_error(replaced(kQwen3Json, "  \"head_dim\": 16,\n", "")),
            "ckpt/config.json:1:1: required key 'head_dim' is missing");
  // Wrong types, at the value.
  EXPECT_EQ(json_error(replaced(kQwen3Json, "\"vocab_size\": 512", "\"vocab_size\": \"512\"")),
            "ckpt/config.json:9:17: key 'vocab_size': expected an integer, got string");
}

TEST(text_only_config_json, fields_of_other_types_and_sliding_windows_are_refused) {
  // Gated DeltaNet sizes on a dense Qwen3 (0 states their absence and is accepted).
  EXPECT_NE(json_error(replaced(kQwen3Json, "\"rope_theta\": 1000000", "\"linear_num_key_heads\": 16"))
                .find("ckpt/config.json:10:27: key 'linear_num_key_heads': not allowed for model_type \"qwen3\", "
                      "which has no Gated DeltaNet layers (a field of the hybrid types \"qwen3_5\", \"qwen3_5_moe\" "
                      "and \"qwen3_next\")"),
            std::string::npos);
  EXPECT_NO_THROW((void)parse_hf_config(replaced(kQwen3Json, "\"rope_theta\": 1000000", "\"linear_num_key_heads\": 0"),
                                        "ckpt/config.json"));
  // Experts on a dense Qwen3: the MoE type is named.
  EXPECT_EQ(json_error(replaced(kQwen3Json, "\"rope_theta\": 1000000", "\"num_experts\": 8")),
            "ckpt/config.json:10:18: key 'num_experts': not allowed for model_type \"qwen3\", a dense model (no "
            "experts); a mixture-of-experts model has model_type \"qwen3_moe\"");
  // A sliding window changes the attention work flopmeter bills (transformers' Qwen3 honours it).
  EXPECT_EQ(json_error(replaced(kQwen3Json, "\"use_sliding_window\": false", "\"use_sliding_window\": true")),
            "ckpt/config.json:11:25: key 'use_sliding_window': sliding-window attention is not supported: flopmeter "
            "bills every attention layer over the whole document (the released Qwen3 checkpoints have "
            "use_sliding_window = false and only \"full_attention\" layers)");
  EXPECT_NE(json_error(replaced(kQwen3Json, "\"rope_theta\": 1000000",
                                "\"layer_types\": [\"full_attention\", \"full_attention\", \"full_attention\", "
                                "\"sliding_attention\"]"))
                .find("key 'layer_types[3]': sliding-window attention is not supported"),
            std::string::npos);
  // layer_types of full attention only is a valid cross-check.
  EXPECT_NO_THROW((void)parse_hf_config(
      replaced(kQwen3Json, "\"rope_theta\": 1000000",
               "\"layer_types\": [\"full_attention\", \"full_attention\", \"full_attention\", \"full_attention\"]"),
      "ckpt/config.json"));
  // A vision tower on a text-only type, at the table.
  EXPECT_EQ(json_error(replaced(kQwen3Json, "\"rope_theta\": 1000000", "\"vision_config\": {\"depth\": 2}")),
            "ckpt/config.json:10:20: key 'vision_config': not allowed for model_type \"qwen3\", a text-only Qwen3 "
            "decoder (no vision tower); a vision-language model has model_type \"qwen3_vl\", \"qwen3_5\" or their "
            "\"_moe\" types");
}

// A small Qwen3-MoE config.json: 4 layers, every second one an MoE block, layer 3 forced dense.
const std::string kQwen3MoeJson =
    "{\n"                                 // 1
    "  \"model_type\": \"qwen3_moe\",\n"  // 2
    "  \"hidden_size\": 64,\n"            // 3
    "  \"num_hidden_layers\": 4,\n"       // 4
    "  \"num_attention_heads\": 4,\n"     // 5
    "  \"num_key_value_heads\": 2,\n"     // 6
    "  \"head_dim\": 16,\n"               // 7
    "  \"intermediate_size\": 128,\n"     // 8
    "  \"vocab_size\": 512,\n"            // 9
    "  \"num_experts\": 8,\n"             // 10
    "  \"num_experts_per_tok\": 2,\n"     // 11
    "  \"moe_intermediate_size\": 32,\n"  // 12
    "  \"decoder_sparse_step\": 2,\n"     // 13
    "  \"mlp_only_layers\": [3]\n"        // 14
    "}\n";                                // 15

TEST(text_only_config_json, qwen3_moe_honours_the_sparse_step_and_has_no_shared_expert) {
  const model_spec spec = parse_hf_config(kQwen3MoeJson, "ckpt/config.json");
  // Layers 1 and 3 are on the stride; 3 is forced dense: one MoE layer, three dense SwiGLU layers.
  EXPECT_EQ(spec.text.num_moe_layers(), 1);
  EXPECT_FALSE(spec.text.norm_topk_prob);  // transformers' Qwen3MoeConfig default (no FLOP effect)
  EXPECT_FALSE(spec.text.tie_word_embeddings);
  // h=64: router 64*8 = 512; routed 2*3*64*32 = 12,288; dense SwiGLU 3*64*128 = 24,576 x3 layers.
  const coefficients c = compute_coefficients(spec);
  EXPECT_EQ(c.dense.moe_router, 6 * 512);
  EXPECT_EQ(c.dense.moe_routed_experts, 6 * 12288);
  EXPECT_EQ(c.dense.dense_mlp, 6 * 3 * 24576);
  EXPECT_EQ(c.dense.moe_shared_expert, 0);
  EXPECT_EQ(json_error(replaced(kQwen3MoeJson, "\"mlp_only_layers\": [3]",
                                "\"mlp_only_layers\": [3], \"shared_expert_intermediate_size\": 32")),
            "ckpt/config.json:14:62: key 'shared_expert_intermediate_size': not allowed for model_type "
            "\"qwen3_moe\": Qwen3 MoE has no shared expert");
  EXPECT_EQ(json_error(replaced(kQwen3MoeJson, "[3]", "[4]")),
            "ckpt/config.json:14:23: key 'mlp_only_layers[0]': must be a decoder layer index in [0, "
            "num_hidden_layers = 4) (got 4)");
}

// A small Qwen3-Next config.json: 4 layers (full attention at 1 and 3), MoE with the gated shared expert.
const std::string kQwen3NextJson =
    "{\n"                                          // 1
    "  \"model_type\": \"qwen3_next\",\n"          // 2
    "  \"hidden_size\": 64,\n"                     // 3
    "  \"num_hidden_layers\": 4,\n"                // 4
    "  \"num_attention_heads\": 4,\n"              // 5
    "  \"num_key_value_heads\": 2,\n"              // 6
    "  \"head_dim\": 16,\n"                        // 7
    "  \"intermediate_size\": 128,\n"              // 8
    "  \"vocab_size\": 512,\n"                     // 9
    "  \"full_attention_interval\": 2,\n"          // 10
    "  \"linear_key_head_dim\": 16,\n"             // 11
    "  \"linear_value_head_dim\": 16,\n"           // 12
    "  \"linear_num_key_heads\": 2,\n"             // 13
    "  \"linear_num_value_heads\": 4,\n"           // 14
    "  \"linear_conv_kernel_dim\": 4,\n"           // 15
    "  \"num_experts\": 8,\n"                      // 16
    "  \"num_experts_per_tok\": 2,\n"              // 17
    "  \"moe_intermediate_size\": 32,\n"           // 18
    "  \"shared_expert_intermediate_size\": 32\n"  // 19
    "}\n";                                         // 20

TEST(text_only_config_json, qwen3_next_is_the_hybrid_decoder_with_a_gated_shared_expert) {
  const model_spec spec = parse_hf_config(kQwen3NextJson, "ckpt/config.json");
  EXPECT_TRUE(spec.text.attn_output_gate);
  EXPECT_EQ(spec.text.num_full_attention_layers(), 2);
  EXPECT_EQ(spec.text.num_moe_layers(), 4);
  EXPECT_TRUE(spec.text.norm_topk_prob);  // transformers' Qwen3NextConfig default
  // h=64, gate on: full attention 64*(2*64 + 2*32 + 64) = 16,384 (x2 layers);
  // DeltaNet qk = 2*16 = 32, v = 4*16 = 64: in_proj 64*(64 + 128 + 8) = 12,800, conv 4*(64 + 64) = 512,
  //   delta 4*4*16*16 = 4,096, out 64*64 = 4,096 -> 21,504 (x2 layers);
  // shared expert 3*64*32 = 6,144 and its gate 64, per layer (x4).
  const coefficients c = compute_coefficients(spec);
  EXPECT_EQ(c.dense.attention_projections, 6 * 2 * 16384);
  EXPECT_EQ(c.dense.linear_attention, 6 * 2 * 21504);
  EXPECT_EQ(c.dense.moe_shared_expert, 6 * 4 * 6144);
  EXPECT_EQ(c.dense.moe_shared_expert_gate, 6 * 4 * 64);
  // Unlike qwen3_5_moe, Qwen3-Next honours decoder_sparse_step and mlp_only_layers (transformers'
  // Qwen3NextDecoderLayer): step 2 leaves layers 0 and 2 a dense SwiGLU of intermediate_size.
  const model_spec stepped = parse_hf_config(
      replaced(kQwen3NextJson, "\"num_experts\": 8", "\"num_experts\": 8, \"decoder_sparse_step\": 2"), "c.json");
  EXPECT_EQ(stepped.text.num_moe_layers(), 2);
  EXPECT_EQ(compute_coefficients(stepped).dense.dense_mlp, 6 * 2 * (3 * 64 * 128));
  // No full_attention_interval and no layer_types: transformers' default interval, 4.
  const model_spec defaulted =
      parse_hf_config(replaced(kQwen3NextJson, "  \"full_attention_interval\": 2,\n", ""), "c.json");
  EXPECT_EQ(defaulted.text.full_attention_interval, 4);
  EXPECT_EQ(defaulted.text.num_full_attention_layers(), 1);
}

TEST(text_only_config_json, qwen3_next_rules) {
  // The gate comes with the type.
  EXPECT_EQ(
      json_error(replaced(kQwen3NextJson, "\"vocab_size\": 512", "\"vocab_size\": 512, \"attn_output_gate\": false")),
      "ckpt/config.json:9:42: key 'attn_output_gate': must be true for model_type \"qwen3_next\": Qwen3-Next "
      "attention always has the sigmoid output gate (transformers builds q_proj as hidden -> 2 x heads x "
      "head_dim, with no setting to turn it off); write true or leave the key out");
  // The shared expert is required.
  EXPECT_EQ(json_error(replaced(kQwen3NextJson, ",\n  \"shared_expert_intermediate_size\": 32", "")),
            "ckpt/config.json:1:1: required key 'shared_expert_intermediate_size' is missing");
  // layer_types against the interval, cited at the first entry that differs.
  EXPECT_EQ(json_error(replaced(kQwen3NextJson, "\"linear_key_head_dim\": 16",
                                "\"layer_types\": [\"linear_attention\", \"full_attention\", \"full_attention\", "
                                "\"full_attention\"], \"linear_key_head_dim\": 16")),
            "ckpt/config.json:11:57: key 'layer_types[2]': inconsistent Qwen3-Next layer layout: layer 2 is "
            "\"full_attention\" but full_attention_interval = 2 makes it \"linear_attention\"");
  // GQA divisibility of the Gated DeltaNet heads, in top-level names.
  EXPECT_EQ(json_error(replaced(kQwen3NextJson, "\"linear_num_value_heads\": 4", "\"linear_num_value_heads\": 3")),
            "ckpt/config.json:14:29: key 'linear_num_value_heads': must be a multiple of linear_num_key_heads = 2 "
            "(got 3)");
}

// ---------------------------------------------------------------------------------------------------------
// TOML: the same types, in [text_config] like every model TOML.

TEST(text_only_toml, text_model_type_and_vision_table) {
  const std::string toml =
      "[model]\n"                                                                              // 1
      "model_type = \"qwen3\"\n"                                                               // 2
      "[text_config]\n"                                                                        // 3
      "model_type = \"qwen3\"\n"                                                               // 4
      "hidden_size = 64\n"                                                                     // 5
      "num_hidden_layers = 4\n"                                                                // 6
      "num_attention_heads = 4\n"                                                              // 7
      "num_key_value_heads = 2\n"                                                              // 8
      "head_dim = 16\n"                                                                        // 9
      "intermediate_size = 128\n"                                                              // 10
      "vocab_size = 512\n"                                                                     // 11
      "tie_word_embeddings = true\n";                                                          // 12
  EXPECT_EQ(compute_coefficients(parse_model_spec(toml, "m.toml")).dense_per_token, 1081344);  // as the JSON above
  const auto toml_error = [](const std::string& doc) {
    return error_message_of([&] { (void)parse_model_spec(doc, "m.toml"); }, doc);
  };
  // A text-only type's text_config.model_type is the type itself (there is no "qwen3_text").
  EXPECT_EQ(
      toml_error(replaced(toml, "[text_config]\nmodel_type = \"qwen3\"", "[text_config]\nmodel_type = \"qwen3_text\"")),
      "m.toml:4:14: key 'text_config.model_type': must be \"qwen3\" for model.model_type \"qwen3\" (got "
      "\"qwen3_text\")");
  EXPECT_EQ(toml_error(toml + "[vision_config]\ndepth = 2\n"),
            "m.toml:13:1: key 'vision_config': not allowed for model_type \"qwen3\", a text-only Qwen3 decoder (no "
            "vision tower); a vision-language model has model_type \"qwen3_vl\", \"qwen3_5\" or their \"_moe\" types");
  // use_sliding_window is a config.json field; a model TOML has no such key.
  EXPECT_NE(toml_error(toml + "use_sliding_window = false\n").find("unknown key 'text_config.use_sliding_window'"),
            std::string::npos);
}

// ---------------------------------------------------------------------------------------------------------
// import round trips: every shipped text-only TOML, written as its checkpoint's config.json (the decoder's
// fields at the top level, with fields flopmeter ignores), imported, gives a TOML with the same spec.

// The fields a config.json of `s`'s type writes, by name (every one that is not 0: a dense Qwen3 has no
// Gated DeltaNet or expert field, Qwen3-MoE no shared expert; MTP layers are written as Qwen3.5 writes them).
struct json_field {
  const char* key;
  std::int64_t text_spec::*member;
};
constexpr json_field kJsonFields[] = {
    {"hidden_size", &text_spec::hidden_size},
    {"num_hidden_layers", &text_spec::num_hidden_layers},
    {"num_attention_heads", &text_spec::num_attention_heads},
    {"num_key_value_heads", &text_spec::num_key_value_heads},
    {"head_dim", &text_spec::head_dim},
    {"intermediate_size", &text_spec::intermediate_size},
    {"vocab_size", &text_spec::vocab_size},
    {"full_attention_interval", &text_spec::full_attention_interval},
    {"linear_key_head_dim", &text_spec::linear_key_head_dim},
    {"linear_value_head_dim", &text_spec::linear_value_head_dim},
    {"linear_num_key_heads", &text_spec::linear_num_key_heads},
    {"linear_num_value_heads", &text_spec::linear_num_value_heads},
    {"linear_conv_kernel_dim", &text_spec::linear_conv_kernel_dim},
    {"mtp_num_hidden_layers", &text_spec::mtp_num_hidden_layers},
    {"num_experts", &text_spec::num_experts},
    {"num_experts_per_tok", &text_spec::num_experts_per_tok},
    {"moe_intermediate_size", &text_spec::moe_intermediate_size},
    {"shared_expert_intermediate_size", &text_spec::shared_expert_intermediate_size},
    {"decoder_sparse_step", &text_spec::decoder_sparse_step},
};

std::string flat_config_json(const model_spec& s) {
  const text_spec& t = s.text;
  // hidden_size is the first field, on line 4 at column 18 ("  \"hidden_size\": " is 17 characters).
  std::string j = "{\n  \"architectures\": [\"X\"],\n  \"model_type\": \"" + s.model_type + "\",\n";
  for (const json_field& field : kJsonFields) {
    if (t.*field.member == 0) continue;
    j += "  \"" + std::string(field.key) + "\": " + std::to_string(t.*field.member) + ",\n";
  }
  if (t.num_experts > 0) j += "  \"mlp_only_layers\": [],\n  \"norm_topk_prob\": true,\n";
  j += "  \"rope_theta\": 1000000,\n  \"use_sliding_window\": false,\n  \"torch_dtype\": \"bfloat16\",\n";
  j += std::string("  \"tie_word_embeddings\": ") + (t.tie_word_embeddings ? "true" : "false") + "\n}\n";
  return j;
}

TEST(text_only_import, every_shipped_text_config_round_trips) {
  const fs::path dir = fs::temp_directory_path() / ("flopmeter_text_import_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const text_row& row : kShippedText) {
    SCOPED_TRACE(row.stem);
    model_spec shipped = load_model_spec(config_path(std::string(row.stem) + ".toml"));
    const fs::path checkpoint = dir / row.stem;
    fs::create_directories(checkpoint);
    std::ofstream(checkpoint / "config.json") << flat_config_json(shipped);
    const std::string toml = import_hf_config(checkpoint.string());
    // Each value's comment names its top-level JSON path, not text_config's.
    EXPECT_NE(toml.find("hidden_size = " + std::to_string(row.text.hidden_size)), std::string::npos);
    EXPECT_NE(toml.find(":4:18 hidden_size"), std::string::npos) << toml;
    EXPECT_EQ(toml.find("text_config.hidden_size"), std::string::npos) << toml;
    const model_spec imported = parse_model_spec(toml, "imported.toml");
    EXPECT_EQ(imported.name, row.stem);  // the checkpoint directory's name
    expect_same_spec(imported, shipped);
    expect_same_spec(imported, load_model_spec((checkpoint / "config.json").string()));
    shipped.train_mtp_layers = true;  // the MTP layer (Qwen3-Next) maps too
    model_spec trained = imported;
    trained.train_mtp_layers = true;
    EXPECT_EQ(compute_coefficients(trained).mtp_per_token, compute_coefficients(shipped).mtp_per_token);
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace flopmeter
