// Tests for the model TOML loader (plugin/config/model_toml.cpp): the shipped configs against the reference table
// (/work/shared/reference/qwen-configs.md), the resolved layer layout, and one test per kind of bad input,
// each pinning the whole message: file name, exact line:col, key path and what is wrong.

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "flopmeter/error.h"
#include "flopmeter/flop_model.h"
#include "flopmeter/model_config.h"
#include "flopmeter/model_spec.h"
#include "support/doc_edits.h"
#include "support/error_message.h"
#include "support/supported_types.h"

namespace flopmeter {
namespace {

std::string config_path(const std::string& file) {
  return std::string(FLOPMETER_SOURCE_DIR) + "/model_configs/" + file;
}

using testing::edit_case;
using testing::error_message_of;
using testing::replace_once;
using testing::with_supported_types;

// The message of the flopmeter::error that parsing `doc` as "bad.toml" throws ("" and a failure if none).
std::string error_of(const std::string& doc, const std::string& source_name = "bad.toml") {
  return error_message_of([&] { (void)parse_model_spec(doc, source_name); }, doc);
}

// A valid tiny Qwen3.5 document. Line numbers are in the comments: the bad-input tests replace text within
// one line, so every expected line:col below is "line of the key here, column of the value in the new line".
// clang-format off
const std::string kBase =
    "[model]\n"                                     // 1
    "model_type = \"qwen3_5\"\n"                    // 2
    "\n"                                            // 3
    "[text_config]\n"                               // 4
    "model_type = \"qwen3_5_text\"\n"               // 5
    "hidden_size = 64\n"                            // 6
    "num_hidden_layers = 4\n"                       // 7
    "num_attention_heads = 4\n"                     // 8
    "num_key_value_heads = 2\n"                     // 9
    "head_dim = 16\n"                               // 10
    "intermediate_size = 128\n"                     // 11
    "vocab_size = 512\n"                            // 12
    "tie_word_embeddings = true\n"                  // 13
    "attn_output_gate = true\n"                     // 14
    "full_attention_interval = 2\n"                 // 15
    "layer_types = [\"linear_attention\", \"full_attention\", \"linear_attention\", \"full_attention\"]\n"  // 16
    "linear_key_head_dim = 16\n"                    // 17
    "linear_value_head_dim = 16\n"                  // 18
    "linear_num_key_heads = 2\n"                    // 19
    "linear_num_value_heads = 4\n"                  // 20
    "linear_conv_kernel_dim = 4\n"                  // 21
    "mtp_num_hidden_layers = 0\n"                   // 22
    "\n"                                            // 23
    "[vision_config]\n"                             // 24
    "depth = 2\n"                                   // 25
    "hidden_size = 32\n"                            // 26
    "num_heads = 2\n"                               // 27
    "intermediate_size = 64\n"                      // 28
    "out_hidden_size = 64\n"                        // 29
    "deepstack_visual_indexes = []\n"               // 30
    "patch_size = 4\n"                              // 31
    "temporal_patch_size = 2\n"                     // 32
    "spatial_merge_size = 2\n"                      // 33
    "in_channels = 3\n";                            // 34
// clang-format on

// A valid Qwen3-VL text-only document.
const std::string kVlBase =
    "[model]\n"                                     // 1
    "model_type = \"qwen3_vl\"\n"                   // 2
    "[text_config]\n"                               // 3
    "hidden_size = 64\n"                            // 4
    "num_hidden_layers = 3\n"                       // 5
    "num_attention_heads = 4\n"                     // 6
    "num_key_value_heads = 4\n"                     // 7
    "head_dim = 16\n"                               // 8
    "intermediate_size = 128\n"                     // 9
    "vocab_size = 512\n"                            // 10
    "tie_word_embeddings = false\n";                // 11

// A valid Qwen3-VL document with a vision tower and one DeepStack merger (lines 12 to 22 follow kVlBase's 11).
const std::string kVlVisionTable =
    "[vision_config]\n"                 // 12
    "depth = 2\n"                       // 13
    "hidden_size = 32\n"                // 14
    "num_heads = 2\n"                   // 15
    "intermediate_size = 64\n"          // 16
    "out_hidden_size = 64\n"            // 17
    "deepstack_visual_indexes = [1]\n"  // 18
    "patch_size = 4\n"                  // 19
    "temporal_patch_size = 2\n"         // 20
    "spatial_merge_size = 2\n"          // 21
    "in_channels = 3\n";                // 22
const std::string kVlVision = kVlBase + kVlVisionTable;

// ---------------------------------------------------------------------------------------------------------
// The shipped configs equal the reference table.

struct reference_row {
  const char* file;
  const char* model_type;
  std::int64_t hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim,
      intermediate_size, vocab_size;
  bool tie_word_embeddings, attn_output_gate;
  std::int64_t full_attention_interval;  // 0 = all full attention (Qwen3-VL)
  std::int64_t linear_key_head_dim, linear_value_head_dim, linear_num_key_heads, linear_num_value_heads,
      linear_conv_kernel_dim;
  std::int64_t mtp_num_hidden_layers;
  std::int64_t depth, vision_hidden_size, num_heads, vision_intermediate_size, out_hidden_size;
  std::vector<std::int64_t> deepstack_visual_indexes;
};

// Transcribed column by column from /work/shared/reference/qwen-configs.md. patch_size 16, temporal 2, merge 2
// and in_channels 3 are the same for all five and checked separately.
const reference_row kReference[] = {
    {"qwen3_vl_2b.toml", "qwen3_vl", 2048, 28, 16, 8, 128, 6144, 151936, true, false, 0, 0, 0, 0, 0, 0, 0,
     24, 1024, 16, 4096, 2048, {5, 11, 17}},
    {"qwen3_vl_4b.toml", "qwen3_vl", 2560, 36, 32, 8, 128, 9728, 151936, true, false, 0, 0, 0, 0, 0, 0, 0,
     24, 1024, 16, 4096, 2560, {5, 11, 17}},
    {"qwen3_5_0_8b.toml", "qwen3_5", 1024, 24, 8, 2, 256, 3584, 248320, true, true, 4, 128, 128, 16, 16, 4, 1,
     12, 768, 12, 3072, 1024, {}},
    {"qwen3_5_2b.toml", "qwen3_5", 2048, 24, 8, 2, 256, 6144, 248320, true, true, 4, 128, 128, 16, 16, 4, 1,
     24, 1024, 16, 4096, 2048, {}},
    {"qwen3_5_9b.toml", "qwen3_5", 4096, 32, 16, 4, 256, 12288, 248320, false, true, 4, 128, 128, 16, 32, 4, 1,
     27, 1152, 16, 4304, 4096, {}},
};

class shipped_config : public ::testing::TestWithParam<reference_row> {};

TEST_P(shipped_config, every_field_equals_the_reference_table) {
  const reference_row& r = GetParam();
  const std::string path = config_path(r.file);
  const model_spec spec = load_model_spec(path);
  const std::string stem = std::string(r.file).substr(0, std::string(r.file).size() - 5);  // drop ".toml"
  EXPECT_EQ(spec.name, stem);
  EXPECT_EQ(spec.source_path, path);
  EXPECT_EQ(spec.model_type, r.model_type);
  EXPECT_FALSE(spec.train_mtp_layers);

  const text_spec& t = spec.text;
  EXPECT_EQ(t.hidden_size, r.hidden_size);
  EXPECT_EQ(t.num_hidden_layers, r.num_hidden_layers);
  EXPECT_EQ(t.num_attention_heads, r.num_attention_heads);
  EXPECT_EQ(t.num_key_value_heads, r.num_key_value_heads);
  EXPECT_EQ(t.head_dim, r.head_dim);
  EXPECT_EQ(t.intermediate_size, r.intermediate_size);
  EXPECT_EQ(t.vocab_size, r.vocab_size);
  EXPECT_EQ(t.tie_word_embeddings, r.tie_word_embeddings);
  EXPECT_EQ(t.attn_output_gate, r.attn_output_gate);
  EXPECT_EQ(t.full_attention_interval, r.full_attention_interval);
  EXPECT_EQ(t.linear_key_head_dim, r.linear_key_head_dim);
  EXPECT_EQ(t.linear_value_head_dim, r.linear_value_head_dim);
  EXPECT_EQ(t.linear_num_key_heads, r.linear_num_key_heads);
  EXPECT_EQ(t.linear_num_value_heads, r.linear_num_value_heads);
  EXPECT_EQ(t.linear_conv_kernel_dim, r.linear_conv_kernel_dim);
  EXPECT_EQ(t.mtp_num_hidden_layers, r.mtp_num_hidden_layers);
  // Layout: Qwen3-VL all full attention; Qwen3.5 one full attention layer in every 4.
  const std::int64_t full = r.full_attention_interval == 0 ? r.num_hidden_layers
                                                           : r.num_hidden_layers / r.full_attention_interval;
  EXPECT_EQ(t.num_full_attention_layers(), full);
  EXPECT_EQ(t.num_linear_attention_layers(), r.num_hidden_layers - full);

  ASSERT_TRUE(spec.vision.has_value());
  const vision_spec& v = *spec.vision;
  EXPECT_EQ(v.depth, r.depth);
  EXPECT_EQ(v.hidden_size, r.vision_hidden_size);
  EXPECT_EQ(v.num_heads, r.num_heads);
  EXPECT_EQ(v.intermediate_size, r.vision_intermediate_size);
  EXPECT_EQ(v.out_hidden_size, r.out_hidden_size);
  EXPECT_EQ(v.deepstack_visual_indexes, r.deepstack_visual_indexes);
  EXPECT_EQ(v.patch_size, 16);
  EXPECT_EQ(v.temporal_patch_size, 2);
  EXPECT_EQ(v.spatial_merge_size, 2);
  EXPECT_EQ(v.in_channels, 3);
  EXPECT_EQ(v.patch_input_size(), 1536);  // 3 * 2 * 16^2
  EXPECT_EQ(v.num_mergers(), 1 + static_cast<std::int64_t>(r.deepstack_visual_indexes.size()));

  EXPECT_NO_THROW(validate_model_spec(spec));
}

INSTANTIATE_TEST_SUITE_P(model_configs, shipped_config, ::testing::ValuesIn(kReference),
                         [](const ::testing::TestParamInfo<reference_row>& param_info) {
                           std::string name = param_info.param.file;
                           return name.substr(0, name.size() - 5);
                         });

TEST(model_config, qwen3_5_9b_has_eight_full_attention_layers_at_every_fourth_index) {
  const model_spec spec = load_model_spec(config_path("qwen3_5_9b.toml"));
  std::vector<std::size_t> full;
  for (std::int64_t i = 0; i < spec.text.num_hidden_layers; ++i) {
    if (spec.text.layer_type(i) == layer_kind::full_attention) full.push_back(static_cast<std::size_t>(i));
  }
  // (i + 1) % 4 == 0 for i in [0, 32): 3, 7, ..., 31.
  EXPECT_EQ(full, (std::vector<std::size_t>{3, 7, 11, 15, 19, 23, 27, 31}));
  EXPECT_EQ(spec.text.num_full_attention_layers(), 8);
  EXPECT_EQ(spec.text.num_linear_attention_layers(), 24);
}

TEST(model_config, qwen3_vl_4b_has_three_deepstack_mergers) {
  const model_spec spec = load_model_spec(config_path("qwen3_vl_4b.toml"));
  ASSERT_TRUE(spec.vision.has_value());
  EXPECT_EQ(spec.vision->num_mergers(), 4);
  EXPECT_EQ(spec.text.num_full_attention_layers(), 36);
  EXPECT_EQ(spec.text.num_linear_attention_layers(), 0);
}

TEST(model_config, tiny_vlm_loads) {
  const model_spec spec = load_model_spec(config_path("tiny_vlm.toml"));
  EXPECT_EQ(spec.name, "tiny_vlm");
  EXPECT_EQ(spec.model_type, "qwen3_5");
  const text_spec& t = spec.text;
  EXPECT_EQ(t.hidden_size, 64);
  EXPECT_EQ(t.num_hidden_layers, 4);
  EXPECT_EQ(t.num_attention_heads, 4);
  EXPECT_EQ(t.num_key_value_heads, 2);
  EXPECT_EQ(t.head_dim, 16);
  EXPECT_EQ(t.intermediate_size, 128);
  EXPECT_EQ(t.vocab_size, 512);
  EXPECT_TRUE(t.tie_word_embeddings);
  EXPECT_TRUE(t.attn_output_gate);
  EXPECT_EQ(t.full_attention_interval, 2);
  EXPECT_EQ(t.linear_key_head_dim, 16);
  EXPECT_EQ(t.linear_value_head_dim, 16);
  EXPECT_EQ(t.linear_num_key_heads, 2);
  EXPECT_EQ(t.linear_num_value_heads, 4);
  EXPECT_EQ(t.linear_conv_kernel_dim, 4);
  EXPECT_EQ(t.mtp_num_hidden_layers, 0);
  // (i + 1) % 2 == 0: layers 1 and 3 are full attention.
  EXPECT_EQ((std::vector<layer_kind>{t.layer_type(0), t.layer_type(1), t.layer_type(2), t.layer_type(3)}),
            (std::vector<layer_kind>{layer_kind::linear_attention, layer_kind::full_attention,
                                     layer_kind::linear_attention, layer_kind::full_attention}));
  ASSERT_TRUE(spec.vision.has_value());
  const vision_spec& v = *spec.vision;
  EXPECT_EQ(v.depth, 2);
  EXPECT_EQ(v.hidden_size, 32);
  EXPECT_EQ(v.num_heads, 2);
  EXPECT_EQ(v.intermediate_size, 64);
  EXPECT_EQ(v.out_hidden_size, 64);
  EXPECT_TRUE(v.deepstack_visual_indexes.empty());
  EXPECT_EQ(v.patch_size, 4);
  EXPECT_EQ(v.temporal_patch_size, 2);
  EXPECT_EQ(v.spatial_merge_size, 2);
  EXPECT_EQ(v.in_channels, 3);
  EXPECT_EQ(v.patch_input_size(), 96);  // 3 * 2 * 4^2
  EXPECT_EQ(v.num_mergers(), 1);
}

// ---------------------------------------------------------------------------------------------------------
// Valid documents: defaults and optional parts.

TEST(model_config, base_document_parses_and_name_defaults_to_the_file_stem) {
  const model_spec spec = parse_model_spec(kBase, "some/dir/my_model.toml");
  EXPECT_EQ(spec.name, "my_model");
  EXPECT_EQ(spec.source_path, "some/dir/my_model.toml");
  ASSERT_TRUE(spec.vision.has_value());
  EXPECT_TRUE(spec.vision->deepstack_visual_indexes.empty());
  EXPECT_EQ(spec.vision->num_mergers(), 1);
}

TEST(model_config, qwen3_vl_document_with_deepstack_parses) {
  const model_spec spec = parse_model_spec(kVlVision, "vl.toml");
  ASSERT_TRUE(spec.vision.has_value());
  EXPECT_EQ(spec.vision->deepstack_visual_indexes, std::vector<std::int64_t>{1});
  EXPECT_EQ(spec.vision->num_mergers(), 2);
}

TEST(model_config, model_name_and_flopmeter_options_are_read) {
  const model_spec spec =
      parse_model_spec(replace_once(kBase, "[model]\n", "[model]\nname = \"custom\"\nhf_model = \"org/repo\"\n") +
                           "[flopmeter]\ntrain_mtp_layers = true\n",
                       "bad.toml");
  EXPECT_EQ(spec.name, "custom");
  EXPECT_TRUE(spec.train_mtp_layers);
}

TEST(model_config, qwen3_vl_text_only_defaults) {
  const model_spec spec = parse_model_spec(kVlBase, "vl.toml");
  EXPECT_FALSE(spec.vision.has_value());
  EXPECT_FALSE(spec.text.attn_output_gate);
  EXPECT_EQ(spec.text.mtp_num_hidden_layers, 0);
  EXPECT_EQ(spec.text.full_attention_interval, 0);
  EXPECT_EQ(spec.text.num_full_attention_layers(), 3);
}

// A field of another model type is refused when its value would change the work (a Qwen3.5
// Gated DeltaNet size, or the output gate, on a Qwen3-VL); at its neutral value (false, 0) it states the
// absence of the feature, as the shipped Qwen3-VL files' "attn_output_gate = false" does.
TEST(model_config, qwen3_vl_refuses_qwen3_5_fields) {
  // Line 12, "linear_key_head_dim = " is 22 characters -> column 23.
  EXPECT_EQ(error_of(kVlBase + "linear_key_head_dim = 128\n", "vl.toml"),
            "vl.toml:12:23: key 'text_config.linear_key_head_dim': not allowed for model_type \"qwen3_vl\", which has "
            "no Gated DeltaNet layers (a field of the hybrid types \"qwen3_5\", \"qwen3_5_moe\" and \"qwen3_next\")");
  // attn_output_gate = true would add the gate half of q_proj (+9% dense FLOPs on Qwen3-VL-2B). Column 20.
  EXPECT_EQ(error_of(kVlBase + "attn_output_gate = true\n", "vl.toml"),
            "vl.toml:12:20: key 'text_config.attn_output_gate': not allowed for model_type \"qwen3_vl\", which has "
            "no attention output gate (a field of the hybrid types \"qwen3_5\", \"qwen3_5_moe\" and \"qwen3_next\")");
  // MTP layers on Qwen3-VL (transformers' Qwen3-VL has no MTP module) were accepted and billed
  // as mtp_per_token. "mtp_num_hidden_layers = " is 24 characters -> column 25.
  EXPECT_EQ(error_of(kVlBase + "mtp_num_hidden_layers = 1\n", "vl.toml"),
            "vl.toml:12:25: key 'text_config.mtp_num_hidden_layers': not allowed for model_type \"qwen3_vl\", which "
            "has no multi-token-prediction (MTP) layers (a field of the hybrid types \"qwen3_5\", \"qwen3_5_moe\" and "
            "\"qwen3_next\")");
  const model_spec spec =
      parse_model_spec(kVlBase + "attn_output_gate = false\nmtp_num_hidden_layers = 0\n", "vl.toml");
  EXPECT_FALSE(spec.text.attn_output_gate);
  EXPECT_EQ(spec.text.mtp_num_hidden_layers, 0);
}

// DeepStack indexes on Qwen3.5 doubled the merger coefficient (transformers' Qwen3_5VisionModel
// deletes the DeepStack mergers it inherits from Qwen3-VL). Line 30: "deepstack_visual_indexes = " is 27
// characters -> the array at column 28. [] and an absent key are accepted (one merger).
TEST(model_config, qwen3_5_refuses_deepstack_indexes) {
  EXPECT_EQ(error_of(replace_once(kBase, "deepstack_visual_indexes = []", "deepstack_visual_indexes = [0, 1]")),
            "bad.toml:30:28: key 'vision_config.deepstack_visual_indexes': not allowed for model_type \"qwen3_5\", "
            "which has no DeepStack mergers (a field of the Qwen3-VL types \"qwen3_vl\" and \"qwen3_vl_moe\"); "
            "write [] or leave it out");
  EXPECT_EQ(
      parse_model_spec(replace_once(kBase, "deepstack_visual_indexes = []\n", ""), "q.toml").vision->num_mergers(), 1);
}

// transformers' Qwen3.5 attention (Qwen3NextAttention, which Qwen3_5Attention and
// Qwen3_5MoeAttention subclass unchanged) always builds q_proj as hidden -> 2 x heads x head_dim and multiplies
// the attention output by sigmoid(gate); Qwen3_5TextConfig has no attn_output_gate. A file without the key was
// billed without the gate. Now absent means true, and false is refused.
TEST(model_config, qwen3_5_output_gate_comes_with_the_model_type) {
  const model_spec explicit_gate = parse_model_spec(kBase, "q.toml");
  const model_spec absent = parse_model_spec(replace_once(kBase, "attn_output_gate = true\n", ""), "q.toml");
  EXPECT_TRUE(absent.text.attn_output_gate);
  // The gate half of q_proj is hidden -> heads x head_dim: 2*h*nh*hd FLOPs forward, x3 with the backward,
  // per full attention layer: 6 * 64 * 4 * 16 = 24,576 per token, 2 full layers (interval 2 of 4) -> 49,152.
  // kBase's full attention projections with the gate: q 64 -> 2 x 64 (query and gate), k and v 64 -> 32 each,
  // o 64 -> 64, on 2 layers: 6 * 2 * 64 * (2*64 + 32 + 32 + 64) = 196,608 per token.
  model_spec ungated = absent;
  ungated.text.attn_output_gate = false;  // what the loader gave before: no gate
  const std::int64_t with_gate = compute_coefficients(absent).dense.attention_projections;
  EXPECT_EQ(with_gate, 196608);
  EXPECT_EQ(compute_coefficients(explicit_gate).dense.attention_projections, 196608);
  EXPECT_EQ(with_gate - compute_coefficients(ungated).dense.attention_projections, 49152);
  // false describes a model transformers cannot build: refused. "attn_output_gate = " is 19 characters ->
  // column 20, line 14.
  EXPECT_EQ(error_of(replace_once(kBase, "attn_output_gate = true", "attn_output_gate = false")),
            "bad.toml:14:20: key 'text_config.attn_output_gate': must be true for model_type \"qwen3_5\": Qwen3.5 "
            "attention always has the sigmoid output gate (transformers builds q_proj as hidden -> 2 x heads x "
            "head_dim, with no setting to turn it off); write true or leave the key out");
}

TEST(model_config, sizes_up_to_two_to_the_31_are_accepted) {
  const model_spec spec = parse_model_spec(replace_once(kBase, "vocab_size = 512", "vocab_size = 2147483648"),
                                           "bad.toml");
  EXPECT_EQ(spec.text.vocab_size, std::int64_t{1} << 31);
}

// ---------------------------------------------------------------------------------------------------------
// Bad input: one case per kind of problem. `from` -> `to` edits kBase within one line; the expected message
// is exact. Column = 1 + the length of the text before the value on the edited line.

const edit_case kBadCases[] = {
    // "hidden_size = = 64": the second '=' is at column 15 (11 + " = " = 14 characters before it), line 6.
    {"syntax_error", "\nhidden_size = 64", "\nhidden_size = = 64",
     "bad.toml:6:15: TOML syntax error: Error while parsing value: could not determine value type"},
    // head_dim (line 10) replaced by a comment: the missing key is reported at the [text_config] header, 4:1.
    {"missing_required_key", "\nhead_dim = 16", "\n# head_dim removed",
     "bad.toml:4:1: required key 'text_config.head_dim' is missing"},
    // qwen3_5 needs the interval: line 15 removed, reported at [text_config], 4:1.
    {"missing_full_attention_interval", "full_attention_interval = 2", "# removed",
     "bad.toml:4:1: required key 'text_config.full_attention_interval' is missing"},
    // "hidden_size = " is 14 characters, so the value starts at column 15, line 6.
    {"wrong_type_string_for_integer", "\nhidden_size = 64", "\nhidden_size = \"64\"",
     "bad.toml:6:15: key 'text_config.hidden_size': expected an integer, got string"},
    // "head_dim = " is 11 characters -> column 12, line 10.
    {"wrong_type_float_for_integer", "\nhead_dim = 16", "\nhead_dim = 16.0",
     "bad.toml:10:12: key 'text_config.head_dim': expected an integer, got floating-point"},
    // "tie_word_embeddings = " is 22 characters -> column 23, line 13.
    {"wrong_type_integer_for_boolean", "tie_word_embeddings = true", "tie_word_embeddings = 1",
     "bad.toml:13:23: key 'text_config.tie_word_embeddings': expected a boolean, got integer"},
    // "layer_types = " is 14 characters -> column 15, line 16.
    {"wrong_type_string_for_array",
     "layer_types = [\"linear_attention\", \"full_attention\", \"linear_attention\", "
     "\"full_attention\"]",
     "layer_types = \"hybrid\"", "bad.toml:16:15: key 'text_config.layer_types': expected an array, got string"},
    // "num_hidden_layers = " is 20 characters -> column 21, line 7.
    {"zero_size", "num_hidden_layers = 4", "num_hidden_layers = 0",
     "bad.toml:7:21: key 'text_config.num_hidden_layers': must be > 0 (got 0)"},
    // "depth = " is 8 characters -> column 9, line 25.
    {"negative_size", "depth = 2", "depth = -3", "bad.toml:25:9: key 'vision_config.depth': must be > 0 (got -3)"},
    // "mtp_num_hidden_layers = " is 24 characters -> column 25, line 22.
    {"negative_count", "mtp_num_hidden_layers = 0", "mtp_num_hidden_layers = -1",
     "bad.toml:22:25: key 'text_config.mtp_num_hidden_layers': must be >= 0 (got -1)"},
    // "vocab_size = " is 13 characters -> column 14, line 12. 2^32 > 2^31.
    {"too_large_value", "vocab_size = 512", "vocab_size = 4294967296",
     "bad.toml:12:14: key 'text_config.vocab_size': too large: must be <= 2^31 = 2147483648 (got 4294967296)"},
    // "num_key_value_heads = " is 22 characters -> column 23, line 9. 4 % 3 != 0.
    {"text_heads_not_divisible", "num_key_value_heads = 2", "num_key_value_heads = 3",
     "bad.toml:9:23: key 'text_config.num_key_value_heads': must divide text_config.num_attention_heads = 4 "
     "(got 3)"},
    // "num_heads = " is 12 characters -> column 13, line 27. 32 % 3 != 0.
    {"vision_heads_not_divisible", "num_heads = 2", "num_heads = 3",
     "bad.toml:27:13: key 'vision_config.num_heads': must divide vision_config.hidden_size = 32 (got 3)"},
    // "linear_num_value_heads = " is 25 characters -> column 26, line 20. 3 % 2 != 0.
    {"linear_value_heads_not_multiple_of_key_heads", "linear_num_value_heads = 4", "linear_num_value_heads = 3",
     "bad.toml:20:26: key 'text_config.linear_num_value_heads': must be a multiple of "
     "text_config.linear_num_key_heads = 2 (got 3)"},
    // Entry 2 should be linear ((2+1) % 2 != 0). "layer_types = [" is 15 characters, each
    // "\"linear_attention\", " is 20 and "\"full_attention\", " is 18: entry 2 starts at 16 + 20 + 18 = 54.
    {"layer_types_disagree_with_interval",
     "layer_types = [\"linear_attention\", \"full_attention\", \"linear_attention\", \"full_attention\"]",
     "layer_types = [\"linear_attention\", \"full_attention\", \"full_attention\", \"full_attention\"]",
     "bad.toml:16:54: key 'text_config.layer_types[2]': inconsistent Qwen3.5 layer layout: layer 2 is "
     "\"full_attention\" but full_attention_interval = 2 makes it \"linear_attention\""},
    // Two entries for four layers; the array value starts at column 15, line 16.
    {"layer_types_wrong_length",
     "layer_types = [\"linear_attention\", \"full_attention\", \"linear_attention\", \"full_attention\"]",
     "layer_types = [\"linear_attention\", \"full_attention\"]",
     "bad.toml:16:15: key 'text_config.layer_types': inconsistent Qwen3.5 layer layout: 2 entries but "
     "num_hidden_layers = 4"},
    // Entry 1 ("full") starts at 16 + 20 = 36, line 16.
    {"layer_types_unknown_kind",
     "layer_types = [\"linear_attention\", \"full_attention\", \"linear_attention\", \"full_attention\"]",
     "layer_types = [\"linear_attention\", \"full\", \"linear_attention\", \"full_attention\"]",
     "bad.toml:16:36: key 'text_config.layer_types[1]': expected \"linear_attention\" or \"full_attention\", got "
     "\"full\""},
    // An interval beyond the layer count leaves no full attention layer. "full_attention_interval = " is 26
    // characters -> column 27, line 15.
    {"no_full_attention_layer", "full_attention_interval = 2", "full_attention_interval = 8",
     "bad.toml:15:27: key 'text_config.full_attention_interval': inconsistent Qwen3.5 layer layout: "
     "full_attention_interval = 8 exceeds num_hidden_layers = 4, so no layer would be full attention"},
    // "model_type = " is 13 characters -> column 14, line 2.
    {"unknown_model_type", "model_type = \"qwen3_5\"", "model_type = \"falcon\"",
     "bad.toml:2:14: key 'model.model_type': unknown model type \"falcon\" (supported: " FLOPMETER_SUPPORTED_TYPES ")"},
    // Column 14, line 5.
    {"text_model_type_mismatch", "model_type = \"qwen3_5_text\"", "model_type = \"qwen3_vl_text\"",
     "bad.toml:5:14: key 'text_config.model_type': must be \"qwen3_5_text\" for model.model_type \"qwen3_5\" "
     "(got \"qwen3_vl_text\")"},
    // An unknown key is reported at the key itself: line 6, column 1.
    {"unknown_key_with_hint", "\nhidden_size = 64", "\nhiden_size = 64",
     "bad.toml:6:1: unknown key 'text_config.hiden_size' (did you mean 'text_config.hidden_size'?)"},
    // Line 3 is inside [model]; a key unlike any schema key gets no hint.
    {"unknown_key_without_hint", "\n\n[text_config]", "\ncomment = \"x\"\n[text_config]",
     "bad.toml:3:1: unknown key 'model.comment' (not in the schema, see model_configs/SCHEMA.md)"},
    // "out_hidden_size = " is 18 characters -> column 19, line 29.
    {"out_hidden_size_mismatch", "out_hidden_size = 64", "out_hidden_size = 32",
     "bad.toml:29:19: key 'vision_config.out_hidden_size': must equal text_config.hidden_size = 64 (got 32)"},
    // The product 3 * 2 * 65536^2 = 2^33.58 exceeds 2^31 although each factor is sane; reported at the
    // [vision_config] header, line 24.
    {"patch_input_size_too_large", "patch_size = 4", "patch_size = 65536",
     "bad.toml:24:1: key 'vision_config': patch embedding input in_channels * temporal_patch_size * patch_size^2 is "
     "too large: must be <= 2^31 = 2147483648"},
};

class bad_input : public testing::edit_table {};

TEST_P(bad_input, message_names_file_location_key_and_problem) {
  EXPECT_EQ(error_of(edited(kBase)), with_supported_types(expected_message()));
}

INSTANTIATE_TEST_SUITE_P(model_config, bad_input, ::testing::ValuesIn(kBadCases), testing::row_name<edit_case>);

// The DeepStack index rules, on the Qwen3-VL document (Qwen3.5 has no DeepStack).
const edit_case kBadVlCases[] = {
    // "deepstack_visual_indexes = [" is 28 characters -> column 29, line 18. depth is 2.
    {"deepstack_index_out_of_range", "deepstack_visual_indexes = [1]", "deepstack_visual_indexes = [2]",
     "bad.toml:18:29: key 'vision_config.deepstack_visual_indexes[0]': must be a ViT block index in "
     "[0, vision_config.depth = 2) (got 2)"},
    // Entry 1 starts at 29 + "0, " = column 32, line 18.
    {"deepstack_index_negative", "deepstack_visual_indexes = [1]", "deepstack_visual_indexes = [0, -1]",
     "bad.toml:18:32: key 'vision_config.deepstack_visual_indexes[1]': must be a ViT block index in "
     "[0, vision_config.depth = 2) (got -1)"},
    // Column 32, line 18.
    {"deepstack_index_duplicate", "deepstack_visual_indexes = [1]", "deepstack_visual_indexes = [1, 1]",
     "bad.toml:18:32: key 'vision_config.deepstack_visual_indexes[1]': duplicate DeepStack index 1"},
};

class bad_vl_input : public testing::edit_table {};

TEST_P(bad_vl_input, message_names_file_location_key_and_problem) {
  EXPECT_EQ(error_of(edited(kVlVision)), with_supported_types(expected_message()));
}

INSTANTIATE_TEST_SUITE_P(model_config, bad_vl_input, ::testing::ValuesIn(kBadVlCases), testing::row_name<edit_case>);

// Documents the kBase edits cannot express.

TEST(model_config_errors, missing_model_table) {
  // Everything before [text_config] removed: reported at the document root, 1:1.
  EXPECT_EQ(error_of(replace_once(kBase, "[model]\nmodel_type = \"qwen3_5\"\n", "")),
            "bad.toml:1:1: required table [model] is missing");
}

TEST(model_config_errors, top_level_model_type_points_to_the_model_table) {
  // HF config.json keeps model_type at the top level; here the prepended line 1 is a root key, column 1.
  EXPECT_EQ(error_of("model_type = \"qwen3_5\"\n" + kBase),
            "bad.toml:1:1: unknown key 'model_type' (did you mean 'model.model_type' in table [model]?)");
}

TEST(model_config_errors, table_of_wrong_type) {
  // "text_config = " is 14 characters -> the value is at 1:15.
  EXPECT_EQ(error_of("text_config = 5\n[model]\nmodel_type = \"qwen3_5\"\n"),
            "bad.toml:1:15: key 'text_config': expected a table, got integer");
}

TEST(model_config_errors, qwen3_vl_layer_types_must_all_be_full_attention) {
  // Line 12; "layer_types = [" is 15 characters and "\"full_attention\", " 18: entry 1 is at column 34.
  EXPECT_EQ(error_of(kVlBase + "layer_types = [\"full_attention\", \"linear_attention\", \"full_attention\"]\n"),
            "bad.toml:12:34: key 'text_config.layer_types[1]': inconsistent Qwen3-VL layer layout: layer 1 is "
            "\"linear_attention\" but model_type \"qwen3_vl\" has only full_attention layers");
}

TEST(model_config_errors, syntax_error_reports_the_source_name) {
  // An unterminated string on line 2: `name = "x` is 9 characters, and TOML++ reports the newline that ends
  // the string illegally, column 10.
  EXPECT_EQ(error_of("[model]\nname = \"x\n", "configs/broken.toml"),
            "configs/broken.toml:2:10: TOML syntax error: Error while parsing string: unescaped control characters "
            "other than TAB (U+0009) are explicitly prohibited");
}

TEST(model_config_errors, file_not_found_names_the_path) {
  const std::string path = config_path("does_not_exist.toml");
  EXPECT_EQ(testing::error_message_of([&] { (void)load_model_spec(path); }),
            path + ": cannot open model config: no such file");
}

TEST(model_config_errors, directory_is_not_a_config) {
  const std::string path = std::string(FLOPMETER_SOURCE_DIR) + "/model_configs";
  EXPECT_EQ(testing::error_message_of([&] { (void)load_model_spec(path); }),
            path +
                ": cannot open model config: a directory without a config.json (name a model TOML file, a Hugging "
                "Face config.json, or a checkpoint directory that holds one)");
}

// ---------------------------------------------------------------------------------------------------------
// validate_model_spec on specs built in code: the message names the field.

std::string validation_error(const model_spec& spec) {
  return error_message_of([&] { validate_model_spec(spec); });
}

TEST(validate_model_spec, accepts_loaded_specs) {
  EXPECT_NO_THROW(validate_model_spec(parse_model_spec(kBase, "base.toml")));
  EXPECT_NO_THROW(validate_model_spec(parse_model_spec(kVlBase, "vl.toml")));
}

TEST(validate_model_spec, names_the_offending_field) {
  const model_spec good = parse_model_spec(kBase, "tiny.toml");  // name "tiny"
  {
    model_spec s = good;
    s.text.hidden_size = 0;
    EXPECT_EQ(validation_error(s), "model_spec 'tiny': key 'text_config.hidden_size': must be > 0 (got 0)");
  }
  {
    model_spec s = good;
    s.text.num_key_value_heads = 3;
    EXPECT_EQ(validation_error(s),
              "model_spec 'tiny': key 'text_config.num_key_value_heads': must divide text_config.num_attention_heads = 4 (got 3)");
  }
  {
    model_spec s = good;
    s.text.vocab_size = (std::int64_t{1} << 31) + 1;
    EXPECT_EQ(validation_error(s), "model_spec 'tiny': key 'text_config.vocab_size': too large: must be <= 2^31 = "
                                   "2147483648 (got 2147483649)");
  }
  {
    model_spec s = good;
    s.text.full_attention_interval = 5;
    EXPECT_EQ(validation_error(s), "model_spec 'tiny': key 'text_config.full_attention_interval': inconsistent Qwen3.5 "
                                   "layer layout: full_attention_interval = 5 exceeds num_hidden_layers = 4, so no "
                                   "layer would be full attention");
  }
  {
    model_spec s = good;
    s.model_type = "falcon";
    EXPECT_EQ(validation_error(s), "model_spec 'tiny': key 'model_type': unknown model type \"falcon\" (supported: " +
                                       detail::supported_model_types_text() + ")");
  }
  {
    model_spec s = good;
    s.vision->num_heads = 3;
    EXPECT_EQ(validation_error(s),
              "model_spec 'tiny': key 'vision_config.num_heads': must divide vision_config.hidden_size = 32 (got 3)");
  }
  {
    model_spec s = good;
    s.vision->out_hidden_size = 32;
    EXPECT_EQ(validation_error(s),
              "model_spec 'tiny': key 'vision_config.out_hidden_size': must equal text_config.hidden_size = 64 (got 32)");
  }
  {
    model_spec s = parse_model_spec(kVlVision, "tiny.toml");
    s.vision->deepstack_visual_indexes = {2};
    EXPECT_EQ(validation_error(s),
              "model_spec 'tiny': key 'vision_config.deepstack_visual_indexes[0]': must be a ViT block index in [0, vision_config.depth = 2) (got 2)");
  }
  {
    // The same type rules as the loaders (the output gate, DeepStack and MTP fields), for specs built in code.
    model_spec s = good;
    s.text.attn_output_gate = false;
    EXPECT_EQ(validation_error(s),
              "model_spec 'tiny': key 'text_config.attn_output_gate': must be true for model_type \"qwen3_5\": Qwen3.5 "
              "attention always has the sigmoid output gate (transformers builds q_proj as hidden -> 2 x heads x "
              "head_dim, with no setting to turn it off); write true or leave the key out");
  }
  {
    model_spec s = good;
    s.vision->deepstack_visual_indexes = {0};
    EXPECT_EQ(validation_error(s),
              "model_spec 'tiny': key 'vision_config.deepstack_visual_indexes': not allowed for model_type "
              "\"qwen3_5\", which has no DeepStack mergers (a field of the Qwen3-VL types \"qwen3_vl\" and "
              "\"qwen3_vl_moe\"); write [] or leave it out");
  }
  {
    model_spec s = parse_model_spec(kVlVision, "tiny.toml");
    s.text.mtp_num_hidden_layers = 1;
    EXPECT_EQ(validation_error(s),
              "model_spec 'tiny': key 'text_config.mtp_num_hidden_layers': not allowed for model_type \"qwen3_vl\", "
              "which has no multi-token-prediction (MTP) layers (a field of the hybrid types \"qwen3_5\", "
              "\"qwen3_5_moe\" and "
              "\"qwen3_next\")");
  }
  {
    model_spec s = good;
    s.text.linear_num_key_heads = 0;
    EXPECT_EQ(validation_error(s), "model_spec 'tiny': key 'text_config.linear_num_key_heads': must be > 0 (got 0)");
  }
}

TEST(validate_model_spec, qwen3_vl_spec_built_in_code) {
  model_spec s;
  s.model_type = "qwen3_vl";
  s.text.hidden_size = 64;
  s.text.num_hidden_layers = 2;
  s.text.num_attention_heads = 4;
  s.text.num_key_value_heads = 2;
  s.text.head_dim = 16;
  s.text.intermediate_size = 128;
  s.text.vocab_size = 512;
  EXPECT_NO_THROW(validate_model_spec(s));
  EXPECT_EQ(s.text.num_full_attention_layers(), 2);
  s.text.full_attention_interval = 2;
  EXPECT_EQ(validation_error(s),
            "model_spec: key 'text_config.full_attention_interval': not allowed for model_type "
            "\"qwen3_vl\", which has no Gated DeltaNet layers (a field of the hybrid types "
            "\"qwen3_5\", \"qwen3_5_moe\" and \"qwen3_next\")");
}

// ---------------------------------------------------------------------------------------------------------
// Hugging Face config.json: the same rules, the same spec as the shipped TOML.

// Qwen3-VL-2B-Instruct's config.json as the checkpoint ships it: the FLOP fields of
// ../shared/reference/qwen-configs.md and the fields flopmeter must ignore (rope settings, token ids, dtype,
// hidden_act, initializer_range, transformers_version, ...). tie_word_embeddings only at the top level.
// Line numbers in the comments (the location tests below use them).
const std::string kQwen3Vl2bJson =
    "{\n"                                                                    // 1
    "  \"architectures\": [\"Qwen3VLForConditionalGeneration\"],\n"        // 2
    "  \"image_token_id\": 151655,\n"                                       // 3
    "  \"model_type\": \"qwen3_vl\",\n"                                     // 4
    "  \"text_config\": {\n"                                                // 5
    "    \"attention_bias\": false,\n"                                      // 6
    "    \"attention_dropout\": 0.0,\n"                                     // 7
    "    \"bos_token_id\": 151643,\n"                                       // 8
    "    \"dtype\": \"bfloat16\",\n"                                        // 9
    "    \"eos_token_id\": 151645,\n"                                       // 10
    "    \"head_dim\": 128,\n"                                              // 11
    "    \"hidden_act\": \"silu\",\n"                                       // 12
    "    \"hidden_size\": 2048,\n"                                          // 13
    "    \"initializer_range\": 0.02,\n"                                    // 14
    "    \"intermediate_size\": 6144,\n"                                    // 15
    "    \"max_position_embeddings\": 262144,\n"                            // 16
    "    \"model_type\": \"qwen3_vl_text\",\n"                              // 17
    "    \"num_attention_heads\": 16,\n"                                    // 18
    "    \"num_hidden_layers\": 28,\n"                                      // 19
    "    \"num_key_value_heads\": 8,\n"                                     // 20
    "    \"rms_norm_eps\": 1e-06,\n"                                        // 21
    "    \"rope_scaling\": {\"mrope_interleaved\": true, \"mrope_section\": [24, 20, 20], \"rope_type\": \"default\"},\n"  // 22
    "    \"rope_theta\": 5000000,\n"                                        // 23
    "    \"use_cache\": true,\n"                                            // 24
    "    \"vocab_size\": 151936\n"                                          // 25
    "  },\n"                                                                 // 26
    "  \"tie_word_embeddings\": true,\n"                                    // 27
    "  \"transformers_version\": \"4.57.0.dev0\",\n"                        // 28
    "  \"video_token_id\": 151656,\n"                                       // 29
    "  \"vision_config\": {\n"                                              // 30
    "    \"deepstack_visual_indexes\": [5, 11, 17],\n"                      // 31
    "    \"depth\": 24,\n"                                                  // 32
    "    \"hidden_act\": \"gelu_pytorch_tanh\",\n"                          // 33
    "    \"hidden_size\": 1024,\n"                                          // 34
    "    \"in_channels\": 3,\n"                                             // 35
    "    \"initializer_range\": 0.02,\n"                                    // 36
    "    \"intermediate_size\": 4096,\n"                                    // 37
    "    \"model_type\": \"qwen3_vl\",\n"                                   // 38
    "    \"num_heads\": 16,\n"                                              // 39
    "    \"num_position_embeddings\": 2304,\n"                              // 40
    "    \"out_hidden_size\": 2048,\n"                                      // 41
    "    \"patch_size\": 16,\n"                                             // 42
    "    \"spatial_merge_size\": 2,\n"                                      // 43
    "    \"temporal_patch_size\": 2\n"                                      // 44
    "  },\n"                                                                 // 45
    "  \"vision_end_token_id\": 151653,\n"                                  // 46
    "  \"vision_start_token_id\": 151652\n"                                 // 47
    "}\n";                                                                   // 48

// Every coefficient, so that a JSON-to-spec mapping that loses or misreads any field shows.
void expect_same_coefficients(const model_spec& a, const model_spec& b) {
  const coefficients x = compute_coefficients(a);
  const coefficients y = compute_coefficients(b);
  EXPECT_EQ(x.dense_per_token, y.dense_per_token);
  EXPECT_EQ(x.text_attn_pair, y.text_attn_pair);
  EXPECT_EQ(x.vision_per_patch, y.vision_per_patch);
  EXPECT_EQ(x.vision_attn_pair, y.vision_attn_pair);
  EXPECT_EQ(x.patch_embed_per_patch, y.patch_embed_per_patch);
  EXPECT_EQ(x.merger_per_merged_token, y.merger_per_merged_token);
  EXPECT_EQ(x.mtp_per_token, y.mtp_per_token);
  EXPECT_EQ(x.mtp_attn_pair, y.mtp_attn_pair);
  EXPECT_EQ(x.patches_per_merged_token, y.patches_per_merged_token);
  EXPECT_EQ(x.dense.attention_projections, y.dense.attention_projections);
  EXPECT_EQ(x.dense.linear_attention, y.dense.linear_attention);
  EXPECT_EQ(x.dense.dense_mlp, y.dense.dense_mlp);
  EXPECT_EQ(x.dense.moe_router, y.dense.moe_router);
  EXPECT_EQ(x.dense.moe_routed_experts, y.dense.moe_routed_experts);
  EXPECT_EQ(x.dense.moe_shared_expert, y.dense.moe_shared_expert);
  EXPECT_EQ(x.dense.moe_shared_expert_gate, y.dense.moe_shared_expert_gate);
  EXPECT_EQ(x.dense.logits, y.dense.logits);
}

TEST(hf_config, qwen3_vl_2b_config_json_gives_the_shipped_toml_spec_and_coefficients) {
  const model_spec json = parse_hf_config(kQwen3Vl2bJson, "Qwen3-VL-2B-Instruct/config.json");
  const model_spec toml = load_model_spec(config_path("qwen3_vl_2b.toml"));
  EXPECT_EQ(json.name, "Qwen3-VL-2B-Instruct");  // the checkpoint directory
  EXPECT_EQ(json.model_type, toml.model_type);
  EXPECT_EQ(json.text.hidden_size, toml.text.hidden_size);
  EXPECT_EQ(json.text.num_hidden_layers, toml.text.num_hidden_layers);
  EXPECT_EQ(json.text.num_attention_heads, toml.text.num_attention_heads);
  EXPECT_EQ(json.text.num_key_value_heads, toml.text.num_key_value_heads);
  EXPECT_EQ(json.text.head_dim, toml.text.head_dim);
  EXPECT_EQ(json.text.intermediate_size, toml.text.intermediate_size);
  EXPECT_EQ(json.text.vocab_size, toml.text.vocab_size);
  EXPECT_EQ(json.text.tie_word_embeddings, toml.text.tie_word_embeddings);  // from the top level
  EXPECT_EQ(json.text.full_attention_interval, toml.text.full_attention_interval);
  EXPECT_EQ(json.text.num_full_attention_layers(), 28);
  ASSERT_TRUE(json.vision.has_value());
  EXPECT_EQ(json.vision->deepstack_visual_indexes, toml.vision->deepstack_visual_indexes);
  EXPECT_EQ(json.vision->patch_input_size(), toml.vision->patch_input_size());
  expect_same_coefficients(json, toml);
  // And the hand-derived value itself (test_flop_model derives it): 6 x 1,720,451,072 MACs per token.
  EXPECT_EQ(compute_coefficients(json).dense_per_token, 10322706432);
}

// Qwen3.5-0.8B's FLOP fields (qwen-configs.md), written the way its config.json writes them: layer_types
// spelled out, mtp_num_hidden_layers, rope_parameters and other fields flopmeter ignores. Line 2 starts with
// "\"attn_output_gate\": true, " (the tests below edit it); line 8 is the vision_config line.
std::string qwen3_5_0_8b_json() {
  std::string layers;
  for (int i = 0; i < 24; ++i) layers += std::string(i > 0 ? ", " : "") + ((i + 1) % 4 == 0 ? "\"full_attention\"" : "\"linear_attention\"");
  return "{\"model_type\": \"qwen3_5\", \"tie_word_embeddings\": true, \"text_config\": {\"model_type\": "
         "\"qwen3_5_text\",\n"
         "\"attn_output_gate\": true, \"full_attention_interval\": 4, \"head_dim\": 256, \"hidden_size\": 1024,\n"
         "\"intermediate_size\": 3584, \"num_attention_heads\": 8, \"num_hidden_layers\": 24, \"num_key_value_heads\": "
         "2,\n"
         "\"vocab_size\": 248320, \"layer_types\": [" +
         layers +
         "], \"linear_conv_kernel_dim\": 4,\n"
         "\"linear_key_head_dim\": 128, \"linear_num_key_heads\": 16, \"linear_num_value_heads\": 16,\n"
         "\"linear_value_head_dim\": 128, \"mtp_num_hidden_layers\": 1, \"mtp_use_dedicated_embeddings\": false,\n"
         "\"partial_rotary_factor\": 0.25, \"rope_parameters\": {\"rope_type\": \"default\", \"mrope_section\": [11, "
         "11, 10]}},\n"
         "\"vision_config\": {\"model_type\": \"qwen3_5\", \"deepstack_visual_indexes\": [], \"depth\": 12, "
         "\"hidden_size\": 768,\n"
         "\"num_heads\": 12, \"intermediate_size\": 3072, \"out_hidden_size\": 1024, \"patch_size\": 16,\n"
         "\"temporal_patch_size\": 2, \"spatial_merge_size\": 2, \"in_channels\": 3, \"num_position_embeddings\": "
         "2304}}\n";
}

TEST(hf_config, qwen3_5_config_json_with_layer_types_gives_the_shipped_toml_coefficients) {
  const std::string json = qwen3_5_0_8b_json();
  const model_spec from_json = parse_hf_config(json, "Qwen3.5-0.8B/config.json");
  const model_spec toml = load_model_spec(config_path("qwen3_5_0_8b.toml"));
  EXPECT_EQ(from_json.text.full_attention_interval, 4);
  EXPECT_EQ(from_json.text.num_full_attention_layers(), toml.text.num_full_attention_layers());
  EXPECT_EQ(from_json.text.mtp_num_hidden_layers, 1);
  expect_same_coefficients(from_json, toml);
}

TEST(hf_config, moe_config_jsons_give_the_shipped_moe_tomls_coefficients) {
  // The fuzz corpus' seed configs of Qwen3-VL-30B-A3B and Qwen3.5-35B-A3B (written as the checkpoints write
  // them: MoE fields in text_config, rope and token-id fields to ignore, Qwen3.5 MoE without intermediate_size).
  const std::string corpus = std::string(FLOPMETER_SOURCE_DIR) + "/tests/fuzz_corpus/fuzz_hf_config/";
  const model_spec vl = load_model_spec(corpus + "seed-qwen3_vl_moe.json");
  EXPECT_EQ(vl.text.num_experts, 128);
  EXPECT_EQ(vl.text.num_moe_layers(), 48);
  expect_same_coefficients(vl, load_model_spec(config_path("qwen3_vl_30b_a3b.toml")));
  model_spec q35 = load_model_spec(corpus + "seed-qwen3_5_moe.json");
  EXPECT_EQ(q35.text.shared_expert_intermediate_size, 512);
  EXPECT_EQ(q35.text.decoder_sparse_step, 1);  // absent in the JSON: every layer an MoE block
  model_spec toml = load_model_spec(config_path("qwen3_5_35b_a3b.toml"));
  expect_same_coefficients(q35, toml);
  q35.train_mtp_layers = toml.train_mtp_layers = true;  // the MTP layer (an MoE layer) maps too
  expect_same_coefficients(q35, toml);
}

TEST(hf_config, errors_cite_the_json_line_column_and_path) {
  // Line 20 "    \"num_key_value_heads\": 8," -> 3: 16 % 3 != 0. "    \"num_key_value_heads\": " + 27 -> 20:28.
  std::string bad = kQwen3Vl2bJson;
  bad.replace(bad.find("\"num_key_value_heads\": 8"), 24, "\"num_key_value_heads\": 3");
  try {
    (void)parse_hf_config(bad, "ckpt/config.json");
    FAIL() << "no error";
  } catch (const error& e) {
    EXPECT_EQ(std::string(e.what()), "ckpt/config.json:20:28: key 'text_config.num_key_value_heads': must divide "
                                     "text_config.num_attention_heads = 16 (got 3)");
    EXPECT_EQ(e.where().file, "ckpt/config.json");
    EXPECT_EQ(e.where().line, 20u);
    EXPECT_EQ(e.where().column, 28u);
    EXPECT_EQ(e.where().key, "text_config.num_key_value_heads");
    EXPECT_EQ(e.description(), "must divide text_config.num_attention_heads = 16 (got 3)");
  }
  // The same rule through the TOML loader and validate_model_spec: one rule, one text, three locations.
  model_spec spec = parse_hf_config(kQwen3Vl2bJson, "ckpt/config.json");
  spec.text.num_key_value_heads = 3;
  try {
    validate_model_spec(spec);
    FAIL() << "no error";
  } catch (const error& e) {
    EXPECT_EQ(e.where().key, "text_config.num_key_value_heads");
    EXPECT_EQ(e.description(), "must divide text_config.num_attention_heads = 16 (got 3)");
  }
}

// A Qwen3-VL config.json without deepstack_visual_indexes: read as [] it gave a merger coefficient 4x too small
// (1 merger instead of 1 + 3) with no error; transformers would have used its default [8, 16, 24]. Refused,
// cited at the vision_config object: line 30 "  \"vision_config\": {", the "{" after 2 spaces, the 15-character
// key, ':' and a space is column 20. A Qwen3.5 config.json may leave it out: Qwen3.5 has no DeepStack.
TEST(hf_config, a_qwen3_vl_config_without_deepstack_indexes_is_refused_not_read_as_none) {
  std::string json = kQwen3Vl2bJson;
  json.replace(json.find("    \"deepstack_visual_indexes\": [5, 11, 17],\n"), 44, "");
  try {
    (void)parse_hf_config(json, "ckpt/config.json");
    FAIL() << "no error";
  } catch (const error& e) {
    EXPECT_EQ(std::string(e.what()),
              "ckpt/config.json:30:20: required key 'vision_config.deepstack_visual_indexes' is missing: Qwen3-VL adds "
              "one merger per listed ViT block (transformers' default is [8, 16, 24]; write [] for none)");
  }
  // The TOML loader: the same rule, cited at the [vision_config] header (line 22 of qwen3_vl_2b.toml).
  std::ifstream shipped(config_path("qwen3_vl_2b.toml"));
  std::string toml((std::istreambuf_iterator<char>(shipped)), std::istreambuf_iterator<char>());
  const std::string line = "deepstack_visual_indexes = [5, 11, 17] # one extra patch merger each\n";
  ASSERT_NE(toml.find(line), std::string::npos);
  toml.replace(toml.find(line), line.size(), "");
  try {
    (void)parse_model_spec(toml, "m.toml");
    FAIL() << "no error";
  } catch (const error& e) {
    EXPECT_EQ(std::string(e.what()),
              "m.toml:22:1: required key 'vision_config.deepstack_visual_indexes' is missing: Qwen3-VL adds one "
              "merger per listed ViT block (transformers' default is [8, 16, 24]; write [] for none)");
  }
  // Qwen3.5 (hybrid): absent is [], the same coefficients as the shipped file's explicit [].
  std::ifstream q35_file(config_path("qwen3_5_0_8b.toml"));
  std::string q35((std::istreambuf_iterator<char>(q35_file)), std::istreambuf_iterator<char>());
  const std::size_t at = q35.find("deepstack_visual_indexes = []");
  ASSERT_NE(at, std::string::npos);
  q35.erase(at, q35.find('\n', at) - at + 1);
  expect_same_coefficients(parse_model_spec(q35, "q.toml"), load_model_spec(config_path("qwen3_5_0_8b.toml")));
}

std::string hf_error(const std::string& json, const std::string& source = "ckpt/config.json") {
  return error_message_of([&] { (void)parse_hf_config(json, source); }, json);
}

// The Qwen3.5 output gate through config.json: without attn_output_gate (transformers has no such setting, and a config
// may leave it out) the gate is on, as transformers runs it: the shipped TOML's coefficients exactly, where
// before the dense coefficient lacked 6 * h * nh * hd = 6 * 1024 * 8 * 256 = 12,582,912 FLOPs per token on
// each of the 6 full attention layers (75,497,472, 1.6% of 4,627,267,584).
TEST(hf_config, qwen3_5_without_attn_output_gate_has_the_gate) {
  std::string json = qwen3_5_0_8b_json();
  json = replace_once(json, "\"attn_output_gate\": true, ", "");
  const model_spec from_json = parse_hf_config(json, "Qwen3.5-0.8B/config.json");
  EXPECT_TRUE(from_json.text.attn_output_gate);
  const model_spec toml = load_model_spec(config_path("qwen3_5_0_8b.toml"));
  expect_same_coefficients(from_json, toml);
  model_spec ungated = from_json;
  ungated.text.attn_output_gate = false;
  EXPECT_EQ(compute_coefficients(from_json).dense_per_token - compute_coefficients(ungated).dense_per_token, 75497472);
  EXPECT_EQ(compute_coefficients(from_json).dense_per_token, 4627267584);
}

// false, inside text_config or at the top level, is refused where it is written; a top-level value that
// contradicts text_config's is refused too (one of them would be ignored). Line 2 starts with the key:
// "\"attn_output_gate\": " is 20 characters -> column 21. At the top level, line 1: "{\"model_type\": \"qwen3_5\", "
// is 26 characters, then "\"attn_output_gate\": " 20 more -> column 47.
TEST(hf_config, qwen3_5_output_gate_false_is_refused_where_it_is_written) {
  const std::string must_be_true =
      "must be true for model_type \"qwen3_5\": Qwen3.5 attention always has the sigmoid output gate (transformers "
      "builds q_proj as hidden -> 2 x heads x head_dim, with no setting to turn it off); write true or leave the "
      "key out";
  const std::string json = qwen3_5_0_8b_json();
  EXPECT_EQ(hf_error(replace_once(json, "\"attn_output_gate\": true, ", "\"attn_output_gate\": false, ")),
            "ckpt/config.json:2:21: key 'text_config.attn_output_gate': " + must_be_true);
  const std::string top_level_false =
      replace_once(replace_once(json, "\"attn_output_gate\": true, ", ""), "{\"model_type\": \"qwen3_5\", \"tie",
                   "{\"model_type\": \"qwen3_5\", \"attn_output_gate\": false, \"tie");
  EXPECT_EQ(hf_error(top_level_false), "ckpt/config.json:1:47: key 'attn_output_gate': " + must_be_true);
  EXPECT_EQ(hf_error(replace_once(json, "{\"model_type\": \"qwen3_5\", \"tie",
                                  "{\"model_type\": \"qwen3_5\", \"attn_output_gate\": false, \"tie")),
            "ckpt/config.json:1:47: key 'attn_output_gate': contradicts text_config.attn_output_gate = true (write the "
            "value once, in text_config)");
  // true at the top level agrees with the type: read.
  const model_spec top_level_true = parse_hf_config(
      replace_once(replace_once(json, "\"attn_output_gate\": true, ", ""), "{\"model_type\": \"qwen3_5\", \"tie",
                   "{\"model_type\": \"qwen3_5\", \"attn_output_gate\": true, \"tie"),
      "c.json");
  EXPECT_TRUE(top_level_true.text.attn_output_gate);
}

// A top-level attn_output_gate on Qwen3-VL is read like tie_word_embeddings, so true there is refused instead
// of ignored. kQwen3Vl2bJson line 27: "  \"tie_word_embeddings\": true," then the inserted key on line 28:
// "  \"attn_output_gate\": " is 22 characters -> 28:23.
TEST(hf_config, qwen3_vl_top_level_output_gate_true_is_refused) {
  EXPECT_EQ(hf_error(replace_once(kQwen3Vl2bJson, "  \"tie_word_embeddings\": true,\n",
                                  "  \"tie_word_embeddings\": true,\n  \"attn_output_gate\": true,\n")),
            "ckpt/config.json:28:23: key 'attn_output_gate': not allowed for model_type \"qwen3_vl\", which has no "
            "attention output gate (a field of the hybrid types \"qwen3_5\", \"qwen3_5_moe\" and \"qwen3_next\")");
  EXPECT_FALSE(parse_hf_config(replace_once(kQwen3Vl2bJson, "  \"tie_word_embeddings\": true,\n",
                                            "  \"tie_word_embeddings\": true,\n  \"attn_output_gate\": false,\n"),
                               "c.json")
                   .text.attn_output_gate);
}

// Fields of another model type through config.json: DeepStack indexes on Qwen3.5 (the merger coefficient doubled) and MTP
// layers on Qwen3-VL (billed as mtp_per_token) are refused at the value. Line 8 of the Qwen3.5 JSON:
// "\"vision_config\": {\"model_type\": \"qwen3_5\", \"deepstack_visual_indexes\": " is 71 characters -> 8:72.
// kQwen3Vl2bJson line 24 "    \"use_cache\": true," becomes "    \"mtp_num_hidden_layers\": 1,": 4 + 25 -> 24:30.
TEST(hf_config, fields_of_another_model_type_are_refused) {
  EXPECT_EQ(hf_error(replace_once(qwen3_5_0_8b_json(), "\"deepstack_visual_indexes\": []",
                                  "\"deepstack_visual_indexes\": [5, 11]")),
            "ckpt/config.json:8:72: key 'vision_config.deepstack_visual_indexes': not allowed for model_type "
            "\"qwen3_5\", which has no DeepStack mergers (a field of the Qwen3-VL types \"qwen3_vl\" and "
            "\"qwen3_vl_moe\"); write [] or leave it out");
  EXPECT_EQ(
      hf_error(replace_once(kQwen3Vl2bJson, "\"use_cache\": true", "\"mtp_num_hidden_layers\": 1")),
      "ckpt/config.json:24:30: key 'text_config.mtp_num_hidden_layers': not allowed for model_type \"qwen3_vl\", "
      "which has no multi-token-prediction (MTP) layers (a field of the hybrid types \"qwen3_5\", \"qwen3_5_moe\" and "
      "\"qwen3_next\")");
}

// `flopmeter import` writes the gate the loader resolved, so the TOML states what it is billed with: a
// Qwen3.5 config.json without the key gives "attn_output_gate = true" (the imported file had no line, and
// read back as a TOML it meant no gate before the loader's fix; now it states it).
TEST(hf_config, import_writes_the_resolved_output_gate) {
  std::random_device random;
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("flopmeter_import_gate_" + std::to_string(random()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json", std::ios::binary)
      << replace_once(qwen3_5_0_8b_json(), "\"attn_output_gate\": true, ", "");
  const std::string toml = import_hf_config((dir / "config.json").string());
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  EXPECT_NE(toml.find("attn_output_gate = true                   # not in the config.json: Qwen3.5 attention always "
                      "has the output gate\n"),
            std::string::npos)
      << toml;
  expect_same_coefficients(parse_model_spec(toml, "imported.toml"), load_model_spec(config_path("qwen3_5_0_8b.toml")));
}

// A plugin config passed where a model config is expected said only "unknown key 'logging'".
// The first plugin key in the model loader's key order ([logging] sorts first) is cited: line 3, the key's
// name inside "[logging]" at column 2.
TEST(model_config_errors, a_plugin_config_given_as_a_model_config_says_so) {
  const std::string plugin =
      "[model]\nconfig = \"m.toml\"\n[logging]\nlog_interval_steps = 10\n[peak]\ngpu = \"H100\"\n";
  const std::string says =
      "this file looks like a flopmeter plugin config (top-level keys model, peak, parallel, logging, sinks), but a "
      "model config is expected here: a model TOML with [model], [text_config] and [vision_config] (see "
      "model_configs/SCHEMA.md) or a Hugging Face config.json; a plugin config names its model in [model] config";
  EXPECT_EQ(error_of(plugin, "plugin.toml"), "plugin.toml:3:2: unknown key 'logging': " + says);
  // Only [model] config = ...: cited at that key, line 2.
  EXPECT_EQ(error_of("[model]\nconfig = \"m.toml\"\n", "plugin.toml"),
            "plugin.toml:2:1: unknown key 'model.config': " + says);
}

TEST(hf_config, import_writes_a_toml_that_round_trips_with_commented_sources) {
  std::random_device random;
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("flopmeter_import_" + std::to_string(random())) / "Qwen3-VL-2B-Instruct";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json", std::ios::binary) << kQwen3Vl2bJson;
  const std::string toml = import_hf_config(dir.string());  // the checkpoint directory
  std::error_code ec;
  std::filesystem::remove_all(dir.parent_path(), ec);
  const model_spec round_trip = parse_model_spec(toml, "imported.toml");
  const model_spec json = parse_hf_config(kQwen3Vl2bJson, "Qwen3-VL-2B-Instruct/config.json");
  EXPECT_EQ(round_trip.name, "Qwen3-VL-2B-Instruct");
  EXPECT_EQ(round_trip.text.tie_word_embeddings, true);
  expect_same_coefficients(round_trip, json);
  // Where each value came from: "    \"hidden_size\": " + 19 -> 13:20; vision hidden_size 34:20; the top-level
  // tie_word_embeddings "  \"tie_word_embeddings\": " + 25 -> 27:26.
  EXPECT_NE(toml.find("hidden_size = 2048                        # config.json:13:20 text_config.hidden_size\n"),
            std::string::npos) << toml;
  EXPECT_NE(toml.find("hidden_size = 1024                        # config.json:34:20 vision_config.hidden_size\n"),
            std::string::npos) << toml;
  EXPECT_NE(toml.find("tie_word_embeddings = true                # config.json:27:26 tie_word_embeddings\n"),
            std::string::npos) << toml;
  EXPECT_NE(toml.find("deepstack_visual_indexes = [5, 11, 17]    # config.json:31:33 vision_config.deepstack_visual_indexes\n"),
            std::string::npos) << toml;
  EXPECT_NE(
      toml.find("attn_output_gate = false                  # not in the config.json: Qwen3-VL has no output gate\n"),
      std::string::npos)
      << toml;
  // Nothing that does not change FLOPs is carried over.
  EXPECT_EQ(toml.find("rope_"), std::string::npos);
  EXPECT_EQ(toml.find("token_id"), std::string::npos);
}

}  // namespace
}  // namespace flopmeter
