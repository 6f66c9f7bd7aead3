// Tests for the mixture-of-experts fields of the model TOML loader (plugin/config/model_toml.cpp): the fields
// read into text_spec, the MoE layer count (arithmetic, from decoder_sparse_step and mlp_only_layers), and one
// test per kind of bad input, each pinning the whole message: file, line:col, key path and what is wrong.

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "flopmeter/error.h"
#include "flopmeter/model_config.h"
#include "flopmeter/model_spec.h"
#include "support/doc_edits.h"
#include "support/error_message.h"

namespace flopmeter {
namespace {

using testing::replace_once;

// The message of the flopmeter::error that parsing `doc` as "moe.toml" throws ("" and a failure if none).
std::string error_of(const std::string& doc) {
  return testing::error_message_of([&] { (void)parse_model_spec(doc, "moe.toml"); }, doc);
}

// A tiny Qwen3-VL MoE decoder: 6 layers, MoE on every 2nd layer (1, 3, 5), layer 3 forced dense.
const std::string kVlMoe =
    "[model]\n"                                   // 1
    "model_type = \"qwen3_vl_moe\"\n"             // 2
    "[text_config]\n"                             // 3
    "model_type = \"qwen3_vl_moe_text\"\n"        // 4
    "hidden_size = 64\n"                          // 5
    "num_hidden_layers = 6\n"                     // 6
    "num_attention_heads = 4\n"                   // 7
    "num_key_value_heads = 2\n"                   // 8
    "head_dim = 16\n"                             // 9
    "intermediate_size = 128\n"                   // 10
    "vocab_size = 512\n"                          // 11
    "tie_word_embeddings = false\n"               // 12
    "num_experts = 8\n"                           // 13
    "num_experts_per_tok = 2\n"                   // 14
    "moe_intermediate_size = 32\n"                // 15
    "decoder_sparse_step = 2\n"                   // 16
    "mlp_only_layers = [3, 4]\n"                  // 17
    "norm_topk_prob = true\n";                    // 18

// A tiny Qwen3.5 MoE decoder: 4 layers (full attention every 2nd), every layer MoE with a shared expert.
const std::string k35Moe =
    "[model]\n"                                   // 1
    "model_type = \"qwen3_5_moe\"\n"              // 2
    "[text_config]\n"                             // 3
    "model_type = \"qwen3_5_moe_text\"\n"         // 4
    "hidden_size = 64\n"                          // 5
    "num_hidden_layers = 4\n"                     // 6
    "num_attention_heads = 4\n"                   // 7
    "num_key_value_heads = 2\n"                   // 8
    "head_dim = 16\n"                             // 9
    "vocab_size = 512\n"                          // 10
    "tie_word_embeddings = false\n"               // 11
    "attn_output_gate = true\n"                   // 12
    "full_attention_interval = 2\n"               // 13
    "linear_key_head_dim = 16\n"                  // 14
    "linear_value_head_dim = 16\n"                // 15
    "linear_num_key_heads = 2\n"                  // 16
    "linear_num_value_heads = 4\n"                // 17
    "linear_conv_kernel_dim = 4\n"                // 18
    "mtp_num_hidden_layers = 1\n"                 // 19
    "num_experts = 16\n"                          // 20
    "num_experts_per_tok = 4\n"                   // 21
    "moe_intermediate_size = 32\n"                // 22
    "shared_expert_intermediate_size = 48\n";     // 23

TEST(model_config_moe, qwen3_vl_moe_fields_and_layer_count) {
  const model_spec spec = parse_model_spec(kVlMoe, "moe.toml");
  const text_spec& t = spec.text;
  EXPECT_EQ(spec.model_type, "qwen3_vl_moe");
  EXPECT_EQ(t.num_experts, 8);
  EXPECT_EQ(t.num_experts_per_tok, 2);
  EXPECT_EQ(t.moe_intermediate_size, 32);
  EXPECT_EQ(t.shared_expert_intermediate_size, 0);
  EXPECT_EQ(t.decoder_sparse_step, 2);
  EXPECT_EQ(t.mlp_only_layers, (std::vector<std::int64_t>{3, 4}));
  EXPECT_TRUE(t.norm_topk_prob);
  // Layers i with (i+1) % 2 == 0: 1, 3, 5; layer 3 is in mlp_only_layers (4 is off the stride anyway): 1 and 5.
  EXPECT_EQ(t.num_moe_layers(), 2);
  EXPECT_EQ(t.num_dense_mlp_layers(), 4);
}

TEST(model_config_moe, qwen3_5_moe_fields_defaults_and_layer_count) {
  const model_spec spec = parse_model_spec(k35Moe, "moe.toml");
  const text_spec& t = spec.text;
  EXPECT_EQ(t.num_experts, 16);
  EXPECT_EQ(t.shared_expert_intermediate_size, 48);
  EXPECT_EQ(t.decoder_sparse_step, 1);  // default
  EXPECT_TRUE(t.mlp_only_layers.empty());
  EXPECT_EQ(t.intermediate_size, 0);    // no dense layer, so not needed
  EXPECT_EQ(t.num_moe_layers(), 4);
  EXPECT_EQ(t.num_dense_mlp_layers(), 0);
  EXPECT_EQ(t.num_full_attention_layers(), 2);
}

TEST(model_config_moe, dense_type_has_no_moe_fields) {
  const std::string dense = replace_once(replace_once(kVlMoe, "_moe\"", "\""), "_moe_text", "_text");
  const model_spec spec = parse_model_spec(dense.substr(0, dense.find("num_experts")), "moe.toml");
  EXPECT_FALSE(spec.text.is_moe());
  EXPECT_EQ(spec.text.num_moe_layers(), 0);
  EXPECT_EQ(spec.text.num_dense_mlp_layers(), 6);
}

// The layer count is arithmetic: a near-maximal num_hidden_layers costs no memory per layer.
TEST(model_config_moe, layer_count_does_not_store_layers) {
  text_spec t;
  t.num_hidden_layers = std::int64_t{1} << 31;
  t.num_experts = 2;
  t.decoder_sparse_step = 3;
  t.mlp_only_layers = {2, 5, 5, 7};  // 2 and 5 on the stride (3 and 6 divisible by 3), 5 twice counts once
  // floor(2^31 / 3) = 715827882 stride layers, minus 2 forced dense.
  EXPECT_EQ(t.num_moe_layers(), 715827880);
}

struct bad_case {
  const char* name;
  const std::string* base;
  const char* from;
  const char* to;
  const char* message;
};

const bad_case kBadCases[] = {
    // A dense type with an MoE key: the key's value is cited (line 13, "num_experts = " is 14 characters).
    {"moe_key_on_dense_type", &kVlMoe, "qwen3_vl_moe\"\n[text_config]\nmodel_type = \"qwen3_vl_moe_text",
     "qwen3_vl\"\n[text_config]\nmodel_type = \"qwen3_vl_text",
     "moe.toml:13:15: key 'text_config.num_experts': not allowed for model_type \"qwen3_vl\", a dense model (no "
     "experts); a mixture-of-experts model has model_type \"qwen3_vl_moe\""},
    {"top_k_above_experts", &kVlMoe, "num_experts_per_tok = 2", "num_experts_per_tok = 9",
     "moe.toml:14:23: key 'text_config.num_experts_per_tok': must be <= text_config.num_experts = 8 (got 9)"},
    {"zero_experts", &kVlMoe, "num_experts = 8", "num_experts = 0",
     "moe.toml:13:15: key 'text_config.num_experts': must be > 0 (got 0)"},
    {"shared_expert_on_qwen3_vl_moe", &kVlMoe, "norm_topk_prob = true\n",
     "norm_topk_prob = true\nshared_expert_intermediate_size = 4\n",
     "moe.toml:19:35: key 'text_config.shared_expert_intermediate_size': not allowed for model_type "
     "\"qwen3_vl_moe\": Qwen3-VL MoE has no shared expert"},
    {"mlp_only_layer_out_of_range", &kVlMoe, "[3, 4]", "[3, 6]",
     "moe.toml:17:23: key 'text_config.mlp_only_layers[1]': must be a decoder layer index in [0, "
     "text_config.num_hidden_layers = 6) (got 6)"},
    {"mlp_only_layer_duplicate", &kVlMoe, "[3, 4]", "[3, 3]",
     "moe.toml:17:23: key 'text_config.mlp_only_layers[1]': duplicate layer index 3"},
    {"mlp_only_layers_not_array", &kVlMoe, "[3, 4]", "3",
     "moe.toml:17:19: key 'text_config.mlp_only_layers': expected an array, got integer"},
    {"no_moe_layer_left", &kVlMoe, "[3, 4]", "[1, 3, 5]",
     "moe.toml:17:19: key 'text_config.mlp_only_layers': no decoder layer would be an MoE block "
     "(decoder_sparse_step = 2, num_hidden_layers = 6)"},
    {"dense_layers_need_intermediate_size", &kVlMoe, "intermediate_size = 128\n", "",
     "moe.toml:3:1: required key 'text_config.intermediate_size' is missing"},
    {"missing_moe_intermediate_size", &k35Moe, "moe_intermediate_size = 32\n", "",
     "moe.toml:3:1: required key 'text_config.moe_intermediate_size' is missing"},
    {"qwen3_5_moe_needs_shared_expert", &k35Moe, "shared_expert_intermediate_size = 48\n", "",
     "moe.toml:3:1: required key 'text_config.shared_expert_intermediate_size' is missing"},
    {"qwen3_5_moe_sparse_step", &k35Moe, "shared_expert_intermediate_size = 48\n",
     "shared_expert_intermediate_size = 48\ndecoder_sparse_step = 2\n",
     "moe.toml:24:23: key 'text_config.decoder_sparse_step': must be 1 for model_type \"qwen3_5_moe\": every "
     "Qwen3.5 MoE layer is an MoE block (got 2)"},
    {"qwen3_5_moe_mlp_only_layers", &k35Moe, "shared_expert_intermediate_size = 48\n",
     "shared_expert_intermediate_size = 48\nmlp_only_layers = [0]\n",
     "moe.toml:24:19: key 'text_config.mlp_only_layers': must be empty for model_type \"qwen3_5_moe\": every "
     "Qwen3.5 MoE layer is an MoE block"},
    {"text_model_type_of_moe", &k35Moe, "\"qwen3_5_moe_text\"", "\"qwen3_5_text\"",
     "moe.toml:4:14: key 'text_config.model_type': must be \"qwen3_5_moe_text\" for model.model_type "
     "\"qwen3_5_moe\" (got \"qwen3_5_text\")"},
};

class moe_bad_input : public ::testing::TestWithParam<bad_case> {};

TEST_P(moe_bad_input, message_names_file_location_key_and_problem) {
  const bad_case& c = GetParam();
  EXPECT_EQ(error_of(replace_once(*c.base, c.from, c.to)), c.message);
}

INSTANTIATE_TEST_SUITE_P(model_config_moe, moe_bad_input, ::testing::ValuesIn(kBadCases), testing::row_name<bad_case>);

// Every combination of sizes is checked at load time: the error cites where the first field of the product
// that is too large is set, and names all its keys (before, coefficients beyond 2^63 were refused with no file,
// line or key).
TEST(model_config_overflow, product_of_sizes_cites_file_line_col_and_keys) {
  // hidden 2^31 x vocab 2^31 = 2^62 logits multiply-adds, x6 > 2^63. "hidden_size = " is 14 characters.
  const std::string doc = replace_once(replace_once(kVlMoe, "hidden_size = 64", "hidden_size = 2147483648"),
                                       "vocab_size = 512", "vocab_size = 2147483648");
  EXPECT_EQ(error_of(doc), "moe.toml:5:15: key 'text_config.hidden_size': coefficient dense_per_token (logits) would "
                           "exceed 2^63 FLOPs: the product of text_config.hidden_size, text_config.vocab_size is too "
                           "large");
}

TEST(model_config_overflow, merger_with_a_large_spatial_merge_size_is_refused_not_wrapped) {
  // (m^2 * hv)^2 with m = 2^31 wraps even 128-bit arithmetic; refused at the merge size's value (line 9).
  const std::string doc = replace_once(kVlMoe, "norm_topk_prob = true\n",
                                       "norm_topk_prob = true\n"
                                       "[vision_config]\n"  // 19
                                       "depth = 1\nhidden_size = 4\nnum_heads = 2\nintermediate_size = 8\n"
                                       "out_hidden_size = 64\npatch_size = 2\ntemporal_patch_size = 1\n"
                                       "spatial_merge_size = 2147483648\n"  // 27
                                       "in_channels = 1\ndeepstack_visual_indexes = []\n");
  EXPECT_EQ(error_of(doc), "moe.toml:27:22: key 'vision_config.spatial_merge_size': coefficient "
                           "merger_per_merged_token would exceed 2^63 FLOPs: the product of "
                           "vision_config.spatial_merge_size, vision_config.hidden_size is too large");
}

// MTP is counted as if trained: a plugin config can turn it on later, so dense + MTP must fit at load time.
TEST(model_config_overflow, dense_plus_mtp_is_checked_even_when_not_trained) {
  // On Qwen3.5 MoE (Qwen3-VL has no MTP layers), every other size 1, 2 layers (one Gated DeltaNet, one full
  // attention): h = 400,000,000, V = 2^31. Dense: logits 6*h*V = 5.15e18 plus a few dozen 6*h terms, fits.
  // MTP: eh_proj 6*2*h^2 = 1.92e18 plus its own logits 5.15e18 = 7.07e18, fits; together 1.22e19 > 2^63.
  std::string doc = replace_once(k35Moe, "hidden_size = 64", "hidden_size = 400000000");
  doc = replace_once(doc, "vocab_size = 512", "vocab_size = 2147483648");
  doc = replace_once(doc, "num_hidden_layers = 4", "num_hidden_layers = 2");
  doc = replace_once(doc, "num_attention_heads = 4\nnum_key_value_heads = 2\nhead_dim = 16",
                     "num_attention_heads = 1\nnum_key_value_heads = 1\nhead_dim = 1");
  doc = replace_once(doc,
                     "linear_key_head_dim = 16\nlinear_value_head_dim = 16\nlinear_num_key_heads = 2\n"
                     "linear_num_value_heads = 4",
                     "linear_key_head_dim = 1\nlinear_value_head_dim = 1\nlinear_num_key_heads = 1\n"
                     "linear_num_value_heads = 1");
  doc = replace_once(doc, "num_experts = 16\nnum_experts_per_tok = 4\nmoe_intermediate_size = 32",
                     "num_experts = 1\nnum_experts_per_tok = 1\nmoe_intermediate_size = 1");
  doc = replace_once(doc, "shared_expert_intermediate_size = 48", "shared_expert_intermediate_size = 1");
  EXPECT_NO_THROW(
      (void)parse_model_spec(replace_once(doc, "mtp_num_hidden_layers = 1", "mtp_num_hidden_layers = 0"), "moe.toml"));
  EXPECT_EQ(error_of(doc), "moe.toml:5:15: key 'text_config.hidden_size': coefficient dense_per_token + "
                           "mtp_per_token would exceed 2^63 FLOPs: the product of text_config.hidden_size, "
                           "text_config.vocab_size is too large");
}

TEST(validate_model_spec_moe, names_the_offending_field) {
  model_spec s = parse_model_spec(kVlMoe, "moe.toml");
  s.name = "m";
  const auto message = [](const model_spec& spec) {
    try {
      validate_model_spec(spec);
    } catch (const error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(message(s), "");
  model_spec wrong = s;
  wrong.model_type = "qwen3_vl";
  EXPECT_EQ(message(wrong), "model_spec 'm': key 'text_config.num_experts': not allowed for model_type \"qwen3_vl\", "
                            "a dense model (no experts); a mixture-of-experts model has model_type \"qwen3_vl_moe\"");
  wrong = s;
  wrong.text.num_experts_per_tok = 9;
  EXPECT_EQ(message(wrong), "model_spec 'm': key 'text_config.num_experts_per_tok': must be <= text_config.num_experts = 8 "
                            "(got 9)");
  wrong = s;
  wrong.text.shared_expert_intermediate_size = 4;
  EXPECT_EQ(message(wrong), "model_spec 'm': key 'text_config.shared_expert_intermediate_size': not allowed for "
                            "model_type \"qwen3_vl_moe\": Qwen3-VL MoE has no shared expert");
  wrong = s;
  wrong.text.mlp_only_layers = {1, 3, 5};
  EXPECT_EQ(message(wrong), "model_spec 'm': key 'text_config.mlp_only_layers': no decoder layer would be an MoE "
                            "block (decoder_sparse_step = 2, num_hidden_layers = 6)");
}

}  // namespace
}  // namespace flopmeter
