// Hostile inputs: files and texts built to crash, hang or mislead the loaders, each
// pinned to the exact error it must give (file, line and column, key path, what) or to the exact value it
// must yield. Classes: parser-stack exhaustion (deep keys, headers, nesting) refused by the pre-scans before
// parsing; the did-you-mean bound; the operating system's real reason for a file that cannot be read
// (FIFO, device, directory, symlink loop, a path through a file, permissions, huge files); byte-level oddities
// (BOM, CRLF, NUL, invalid UTF-8, unicode keys, empty text); numbers (beyond 64 bits, floats for integers,
// NaN, infinity, overflow); duplicate keys; fields of another model type; and the same classes in a Hugging
// Face config.json. Every case runs under ASan + UBSan (scripts/test_sanitizers.sh).
//
// Columns: "+ N" in a comment is the length of the text before the offending character on its line.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "flopmeter/c_api.h"
#include "flopmeter/error.h"
#include "flopmeter/flop_model.h"
#include "flopmeter/model_config.h"
#include "flopmeter/peak_table.h"
#include "flopmeter/throughput.h"
#include "support/doc_edits.h"
#include "support/error_message.h"
#include "support/supported_types.h"

namespace flopmeter {
namespace {

namespace fs = std::filesystem;

const std::string kSourceDir = FLOPMETER_SOURCE_DIR;

// A valid qwen3_vl document (text only), 12 lines; appended lines are line 12 on.
const std::string kVl =
    "[model]\n"                                  // 1
    "model_type = \"qwen3_vl\"\n"                // 2
    "[text_config]\n"                            // 3
    "hidden_size = 64\n"                         // 4
    "num_hidden_layers = 3\n"                    // 5
    "num_attention_heads = 4\n"                  // 6
    "num_key_value_heads = 2\n"                  // 7
    "head_dim = 16\n"                            // 8
    "intermediate_size = 128\n"                  // 9
    "vocab_size = 512\n"                         // 10
    "tie_word_embeddings = false\n";             // 11

// The same model as a config.json, one field per line; line numbers in the comments.
const std::string kVlJson =
    "{\n"                                        // 1
    "  \"model_type\": \"qwen3_vl\",\n"          // 2
    "  \"text_config\": {\n"                     // 3
    "    \"hidden_size\": 64,\n"                 // 4
    "    \"num_hidden_layers\": 3,\n"            // 5
    "    \"num_attention_heads\": 4,\n"          // 6
    "    \"num_key_value_heads\": 2,\n"          // 7
    "    \"head_dim\": 16,\n"                    // 8
    "    \"intermediate_size\": 128,\n"          // 9
    "    \"vocab_size\": 512,\n"                 // 10
    "    \"rope_theta\": 5000000\n"              // 11
    "  }\n"                                      // 12
    "}\n";                                       // 13

// A DeepSeek-V3-style MLA + MoE model (families.cpp) and a gpt-oss-style windowed one, line numbers in comments.
const std::string kMla =
    "[model]\nmodel_type = \"deepseek_v3\"\n[text_config]\n"                       // 1-3
    "hidden_size = 64\nnum_hidden_layers = 3\nnum_attention_heads = 4\n"           // 4-6
    "intermediate_size = 96\nvocab_size = 100\nq_lora_rank = 16\n"                 // 7-9
    "kv_lora_rank = 8\nqk_nope_head_dim = 8\nqk_rope_head_dim = 4\n"               // 10-12
    "v_head_dim = 8\nmoe_intermediate_size = 16\nn_routed_experts = 8\n"           // 13-15
    "num_experts_per_tok = 2\nn_shared_experts = 1\nfirst_k_dense_replace = 1\n";  // 16-18
const std::string kWindows =
    "[model]\nmodel_type = \"gpt_oss\"\n[text_config]\n"                  // 1-3
    "hidden_size = 64\nnum_hidden_layers = 2\nnum_attention_heads = 4\n"  // 4-6
    "num_key_value_heads = 2\nhead_dim = 32\nintermediate_size = 32\n"    // 7-9
    "vocab_size = 100\nsliding_window = 4\n"                              // 10-11
    "layer_types = [\"sliding_attention\", \"full_attention\"]\n"         // 12
    "num_local_experts = 4\nnum_experts_per_tok = 2\n";                   // 13-14

using testing::error_message_of;
using testing::replace_once;
using testing::with_supported_types;

std::string toml_error(const std::string& text, const std::string& source = "h.toml") {
  return error_message_of([&] { (void)parse_model_spec(text, source); }, text);
}

std::string json_error(const std::string& text, const std::string& source = "config.json") {
  return error_message_of([&] { (void)parse_hf_config(text, source); }, text);
}

std::string load_error(const std::string& path) {
  return error_message_of([&] { (void)load_model_spec(path); }, path);
}

std::string repeat(const std::string& piece, std::size_t count) {
  std::string out;
  out.reserve(piece.size() * count);
  for (std::size_t i = 0; i < count; ++i) out += piece;
  return out;
}

// The edit tables below: each row edits the TOML document kVl or the config.json kVlJson within one place and
// pins the whole message its loader gives.
enum class document { toml, json, mla_toml, window_toml };

struct hostile_edit {
  document base;
  const char* name;
  const char* from;
  const char* to;
  const char* message;
};

class hostile_edits : public ::testing::TestWithParam<hostile_edit> {};

TEST_P(hostile_edits, message_names_file_location_key_and_problem) {
  const hostile_edit& c = GetParam();
  const std::string expected = with_supported_types(c.message);
  switch (c.base) {
    case document::toml: EXPECT_EQ(toml_error(replace_once(kVl, c.from, c.to)), expected); break;
    case document::json: EXPECT_EQ(json_error(replace_once(kVlJson, c.from, c.to)), expected); break;
    case document::mla_toml: EXPECT_EQ(toml_error(replace_once(kMla, c.from, c.to)), expected); break;
    case document::window_toml: EXPECT_EQ(toml_error(replace_once(kWindows, c.from, c.to)), expected); break;
  }
}

// ---------------------------------------------------------------------------------------------------------
// TOML: what overflowed TOML++'s stack is refused by the pre-scan, before parsing.

TEST(hostile_toml, dotted_key_of_35000_parts_is_refused_before_parsing) {
  // Line 12: "a.a.a...": the 64th '.' starts part 65, at column 1 + 63 * 2 + 1 = 128.
  EXPECT_EQ(toml_error(kVl + repeat("a.", 35000) + "a = 1\n"),
            "h.toml:12:128: dotted key has more than 64 parts; refused before parsing (no config needs that many)");
}

TEST(hostile_toml, table_header_of_35000_parts_is_refused_before_parsing) {
  // "[" + "a." x 63 + "a" then the 64th '.': column 1 + 1 + 63 * 2 + 1 = 129.
  EXPECT_EQ(toml_error(kVl + "[" + repeat("a.", 35000) + "a]\n"),
            "h.toml:12:129: table header has more than 64 parts; refused before parsing (no config needs that many)");
}

TEST(hostile_toml, array_of_tables_header_counts_parts_too) {
  // "[[" then 64 dots: the 64th is at 2 + 63 * 2 + 2 = 130.
  EXPECT_EQ(toml_error(kVl + "[[" + repeat("b.", 100) + "b]]\n"),
            "h.toml:12:130: table header has more than 64 parts; refused before parsing (no config needs that many)");
}

TEST(hostile_toml, nested_arrays_are_refused_before_parsing) {
  // "x = " is 4 characters; the 65th '[' is at column 4 + 65 = 69.
  EXPECT_EQ(toml_error(kVl + "x = " + repeat("[", 100000) + "\n"),
            "h.toml:12:69: arrays and inline tables nested more than 64 deep; refused before parsing (no config "
            "needs that many)");
}

TEST(hostile_toml, nested_inline_tables_are_refused_before_parsing) {
  // "x = {a = {a = ..." : each level "{a = " is 5 characters; the 65th '{' is at 4 + 64 * 5 + 1 = 325.
  EXPECT_EQ(toml_error(kVl + "x = " + repeat("{a = ", 1000) + "1\n"),
            "h.toml:12:325: arrays and inline tables nested more than 64 deep; refused before parsing (no config "
            "needs that many)");
}

TEST(hostile_toml, keys_of_64_parts_and_nesting_of_64_pass_the_prescan) {
  // Within the limits the pre-scan says nothing: the loader's own error (an unknown key) comes instead.
  EXPECT_EQ(toml_error(kVl + repeat("a.", 63) + "a = 1\n"),
            "h.toml:12:1: unknown key 'text_config.a' (not in the schema, see model_configs/SCHEMA.md)");
  EXPECT_EQ(toml_error(kVl + "x = " + repeat("[", 64) + repeat("]", 64) + "\n"),
            "h.toml:12:1: unknown key 'text_config.x' (not in the schema, see model_configs/SCHEMA.md)");
}

TEST(hostile_toml, dots_in_strings_comments_and_numbers_are_not_key_parts) {
  // 200 dots in a quoted key, a string value, a comment and an array of floats: none is a dotted key.
  const std::string dots = repeat(".", 200);
  EXPECT_EQ(toml_error(kVl + "\"" + dots + "\" = 1\n"),
            "h.toml:12:1: unknown key 'text_config." + dots + "' (not in the schema, see model_configs/SCHEMA.md)");
  EXPECT_EQ(toml_error(kVl + "s = \"" + dots + "\" # " + dots + "\n"),
            "h.toml:12:1: unknown key 'text_config.s' (not in the schema, see model_configs/SCHEMA.md)");
  EXPECT_EQ(toml_error(kVl + "f = [" + repeat("1.5, ", 200) + "2.5]\n"),
            "h.toml:12:1: unknown key 'text_config.f' (not in the schema, see model_configs/SCHEMA.md)");
  EXPECT_EQ(toml_error(kVl + "m = '''\n" + repeat("a.b.c [[[ {{{ \n", 100) + "'''\n"),
            "h.toml:12:1: unknown key 'text_config.m' (not in the schema, see model_configs/SCHEMA.md)");
}

// ---------------------------------------------------------------------------------------------------------
// TOML: the did-you-mean bound.

TEST(hostile_toml, multi_megabyte_unknown_key_gets_no_hint_and_no_quadratic_time) {
  // 4 MiB key: an edit distance against each schema key would be 4M x 20 cells x 25 keys; the bound skips
  // it. The message is the plain one.
  const std::string key(std::size_t{4} << 20, 'h');
  const std::string message = toml_error(kVl + key + " = 1\n");
  EXPECT_EQ(message, "h.toml:12:1: unknown key 'text_config." + key + "' (not in the schema, see model_configs/SCHEMA.md)");
}

TEST(hostile_toml, short_typo_still_gets_its_hint) {
  EXPECT_EQ(toml_error(kVl + "vocab_sise = 3\n"),
            "h.toml:12:1: unknown key 'text_config.vocab_sise' (did you mean 'text_config.vocab_size'?)");
}

// ---------------------------------------------------------------------------------------------------------
// TOML: bytes and numbers.

TEST(hostile_toml, byte_order_mark_and_crlf_are_accepted) {
  std::string crlf;
  for (const char c : kVl) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
  const model_spec spec = parse_model_spec("\xEF\xBB\xBF" + crlf, "h.toml");
  EXPECT_EQ(spec.text.hidden_size, 64);
  // And an error after CRLF lines still has the right line and column: "vocab_size = " + 13 -> 10:14.
  EXPECT_EQ(toml_error(replace_once(crlf, "vocab_size = 512", "vocab_size = 0")),
            "h.toml:10:14: key 'text_config.vocab_size': must be > 0 (got 0)");
}

TEST(hostile_toml, nul_byte_is_a_syntax_error_at_its_position) {
  // Line 12, "x = " then NUL at column 5.
  const std::string message = toml_error(kVl + std::string("x = \0", 5) + "\n");
  EXPECT_EQ(message.rfind("h.toml:12:5: TOML syntax error: ", 0), 0u) << message;
}

TEST(hostile_toml, duplicate_key_is_a_syntax_error_at_the_second) {
  // TOML++ cites the second definition's value: "hidden_size = " + 14 -> 12:15.
  EXPECT_EQ(toml_error(kVl + "hidden_size = 64\n"),
            "h.toml:12:15: TOML syntax error: Error while parsing key-value pair: cannot redefine existing integer "
            "'hidden_size'");
}

// Edits of kVl within one line, each pinning the whole message.
const hostile_edit kTomlEdits[] = {
    // 2^63: TOML++ cites the end of the number, "vocab_size = " + 13 + 19 digits -> 10:33.
    {document::toml, "integer_beyond_64_bits_is_a_syntax_error_at_the_value", "vocab_size = 512",
     "vocab_size = 9223372036854775808",
     "h.toml:10:33: TOML syntax error: Error while parsing decimal integer: '9223372036854775808' is not "
     "representable in 64 bits"},
    {document::toml, "float_exponent_for_an_integer_is_a_type_error", "hidden_size = 64", "hidden_size = 6.4e1",
     "h.toml:4:15: key 'text_config.hidden_size': expected an integer, got floating-point"},
    {document::toml, "nan_for_an_integer_is_a_type_error", "head_dim = 16", "head_dim = nan",
     "h.toml:8:12: key 'text_config.head_dim': expected an integer, got floating-point"},
    {document::toml, "inf_for_an_integer_is_a_type_error", "head_dim = 16", "head_dim = -inf",
     "h.toml:8:12: key 'text_config.head_dim': expected an integer, got floating-point"},
};

INSTANTIATE_TEST_SUITE_P(hostile_toml, hostile_edits, ::testing::ValuesIn(kTomlEdits), testing::row_name<hostile_edit>);

// The family rules (families/families.cpp), one row per rule: the field and the reason at FILE:LINE:COL.
const hostile_edit kFamilyEdits[] = {
    {document::mla_toml, "first_k_dense_replace_beyond_the_layers", "first_k_dense_replace = 1",
     "first_k_dense_replace = 4",
     "h.toml:18:25: key 'text_config.first_k_dense_replace': must be in [0, num_hidden_layers = 3] (got 4)"},
    {document::mla_toml, "kv_lora_rank_without_the_rope_dims", "qk_rope_head_dim = 4\n", "",
     "h.toml:3:1: required key 'text_config.qk_rope_head_dim' is missing"},
    {document::mla_toml, "none_for_a_field_that_cannot_be_null", "kv_lora_rank = 8", "kv_lora_rank = \"none\"",
     "h.toml:10:16: key 'text_config.kv_lora_rank': must not be null"},
    {document::mla_toml, "top_k_above_the_routed_experts", "num_experts_per_tok = 2", "num_experts_per_tok = 9",
     "h.toml:16:23: key 'text_config.num_experts_per_tok': must be <= n_routed_experts = 8 (got 9)"},
    {document::window_toml, "a_window_of_zero", "sliding_window = 4", "sliding_window = 0",
     "h.toml:11:18: key 'text_config.sliding_window': must be > 0 (got 0)"},
    {document::window_toml, "no_window_for_sliding_layers", "sliding_window = 4", "sliding_window = \"none\"",
     "h.toml:11:18: key 'text_config.sliding_window': is null but layer_types has \"sliding_attention\" layers: "
     "give the window's size"},
    {document::window_toml, "layer_types_of_the_wrong_length", "[\"sliding_attention\", \"full_attention\"]",
     "[\"sliding_attention\"]",
     "h.toml:12:15: key 'text_config.layer_types': has 1 entries but num_hidden_layers = 2 (one entry per decoder "
     "layer)"},
    {document::window_toml, "unknown_layer_types_entry", "\"full_attention\"]", "\"global\"]",
     "h.toml:12:37: key 'text_config.layer_types[1]': unknown layer type \"global\" (expected \"full_attention\" or "
     "\"sliding_attention\")"},
    {document::window_toml, "layer_types_not_a_list", "[\"sliding_attention\", \"full_attention\"]",
     "\"sliding_attention\"", "h.toml:12:15: key 'text_config.layer_types': expected an array, got string"},
};

INSTANTIATE_TEST_SUITE_P(hostile_families, hostile_edits, ::testing::ValuesIn(kFamilyEdits),
                         testing::row_name<hostile_edit>);

TEST(hostile_families, two_million_alternating_layers_without_a_list_are_refused_not_enumerated) {
  std::string doc = replace_once(kWindows, "num_hidden_layers = 2", "num_hidden_layers = 2000000");
  doc = replace_once(doc, "layer_types = [\"sliding_attention\", \"full_attention\"]\n", "");
  EXPECT_EQ(toml_error(doc),
            "h.toml:5:21: key 'text_config.num_hidden_layers': without layer_types, more than 131072 "
            "alternating layers are not supported (got 2000000)");
}

TEST(hostile_toml, unicode_key_is_unknown_at_its_position) {
  EXPECT_EQ(toml_error(kVl + "\"hïdden_size\" = 64\n"),
            "h.toml:12:1: unknown key 'text_config.hïdden_size' (did you mean 'text_config.hidden_size'?)");
}

TEST(hostile_toml, empty_and_comment_only_documents_lack_the_model_table) {
  EXPECT_EQ(toml_error(""), "h.toml:1:1: required table [model] is missing");
  EXPECT_EQ(toml_error("# nothing\n\n   \n"), "h.toml:1:1: required table [model] is missing");
}

TEST(hostile_toml, field_of_another_model_type_is_refused) {
  // full_attention_interval is a Qwen3.5 field; on qwen3_vl it would make Gated DeltaNet
  // layers. Line 12, "full_attention_interval = " + 26 -> column 27.
  EXPECT_EQ(
      toml_error(kVl + "full_attention_interval = 4\n"),
      "h.toml:12:27: key 'text_config.full_attention_interval': not allowed for model_type \"qwen3_vl\", which "
      "has no Gated DeltaNet layers (a field of the hybrid types \"qwen3_5\", \"qwen3_5_moe\" and \"qwen3_next\")");
  // Experts on a dense type. "num_experts = " + 14 -> column 15.
  EXPECT_EQ(toml_error(kVl + "num_experts = 8\n"),
            "h.toml:12:15: key 'text_config.num_experts': not allowed for model_type \"qwen3_vl\", a dense model (no "
            "experts); a mixture-of-experts model has model_type \"qwen3_vl_moe\"");
  // MTP layers on Qwen3-VL. "mtp_num_hidden_layers = " + 24 -> column 25.
  EXPECT_EQ(toml_error(kVl + "mtp_num_hidden_layers = 1\n"),
            "h.toml:12:25: key 'text_config.mtp_num_hidden_layers': not allowed for model_type \"qwen3_vl\", which "
            "has no multi-token-prediction (MTP) layers (a field of the hybrid types \"qwen3_5\", \"qwen3_5_moe\" and "
            "\"qwen3_next\")");
  // The neutral value states the absence and is accepted.
  EXPECT_EQ(parse_model_spec(kVl + "num_experts = 0\nattn_output_gate = false\nmtp_num_hidden_layers = 0\n", "h.toml")
                .text.num_experts,
            0);
}

// ---------------------------------------------------------------------------------------------------------
// Files: the operating system's reason. Each test has its own directory.

class hostile_files : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device random;
    dir_ = fs::temp_directory_path() /
           ("flopmeter_hostile_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
            std::to_string(random()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_ / "locked", fs::perms::owner_all, ec);
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(dir_ / name, std::ios::binary) << text;
    return path(name);
  }
  fs::path dir_;
};

TEST_F(hostile_files, fifo_is_refused_without_blocking) {
  ASSERT_EQ(::mkfifo(path("pipe.toml").c_str(), 0600), 0);
  EXPECT_EQ(load_error(path("pipe.toml")), path("pipe.toml") + ": cannot open model config: not a regular file (a FIFO)");
}

TEST_F(hostile_files, character_device_is_refused) {
  EXPECT_EQ(load_error("/dev/zero"), "/dev/zero: cannot open model config: not a regular file (a character device)");
}

TEST_F(hostile_files, symlink_loop_names_the_loop) {
  fs::create_symlink(dir_ / "b.toml", dir_ / "a.toml");
  fs::create_symlink(dir_ / "a.toml", dir_ / "b.toml");
  EXPECT_EQ(load_error(path("a.toml")), path("a.toml") + ": cannot open model config: too many levels of symbolic links");
}

TEST_F(hostile_files, dangling_symlink_is_no_such_file) {
  fs::create_symlink(dir_ / "gone.toml", dir_ / "link.toml");
  EXPECT_EQ(load_error(path("link.toml")), path("link.toml") + ": cannot open model config: no such file");
}

TEST_F(hostile_files, path_through_a_file_is_not_a_directory) {
  write("plain.toml", kVl);
  EXPECT_EQ(load_error(path("plain.toml/x.toml")), path("plain.toml/x.toml") + ": cannot open model config: not a directory");
}

TEST_F(hostile_files, unreadable_directory_is_permission_denied) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads everything";
  fs::create_directory(dir_ / "locked");
  write("locked/m.toml", kVl);
  fs::permissions(dir_ / "locked", fs::perms::none);
  EXPECT_EQ(load_error(path("locked/m.toml")), path("locked/m.toml") + ": cannot open model config: permission denied");
}

TEST_F(hostile_files, directory_without_config_json_says_what_it_needs) {
  EXPECT_EQ(load_error(dir_.string()),
            dir_.string() + ": cannot open model config: a directory without a config.json (name a model TOML file, a "
                            "Hugging Face config.json, or a checkpoint directory that holds one)");
}

TEST_F(hostile_files, empty_path_is_refused) {
  EXPECT_EQ(load_error(""), "cannot open model config: the path is empty");
}

TEST_F(hostile_files, one_gigabyte_file_is_refused_after_16_mib) {
  // A sparse 1 GiB file: reading stops past 16 MiB instead of taking 1 GiB of the trainer's memory.
  {
    std::ofstream(dir_ / "huge.toml");
  }
  fs::resize_file(dir_ / "huge.toml", std::uintmax_t{1} << 30);
  EXPECT_EQ(load_error(path("huge.toml")), path("huge.toml") + ": cannot read model config: larger than 16 MiB, so not a config file");
}

TEST_F(hostile_files, empty_file_is_a_document_without_tables) {
  write("empty.toml", "");
  EXPECT_EQ(load_error(path("empty.toml")), path("empty.toml") + ":1:1: required table [model] is missing");
}

TEST_F(hostile_files, json_file_named_toml_is_read_as_json) {
  // The text decides: a document that starts with '{' cannot be TOML.
  write("model.toml", kVlJson);
  EXPECT_EQ(load_model_spec(path("model.toml")).text.vocab_size, 512);
}

TEST_F(hostile_files, checkpoint_directory_with_config_json_is_read) {
  fs::create_directory(dir_ / "Qwen3-VL-Tiny");
  write("Qwen3-VL-Tiny/config.json", kVlJson);
  const model_spec spec = load_model_spec((dir_ / "Qwen3-VL-Tiny").string());
  EXPECT_EQ(spec.name, "Qwen3-VL-Tiny");
  EXPECT_EQ(spec.source_path, path("Qwen3-VL-Tiny/config.json"));
}

TEST_F(hostile_files, plugin_config_naming_a_fifo_cites_model_config) {
  ASSERT_EQ(::mkfifo(path("m.toml").c_str(), 0600), 0);
  write("plugin.toml", "[model]\nconfig = \"m.toml\"\n");
  try {
    (void)load_throughput_options(path("plugin.toml"));
    ADD_FAILURE() << "no error";
  } catch (const error& e) {
    // "config = " + 9 -> 2:10.
    EXPECT_EQ(std::string(e.what()), path("plugin.toml") + ":2:10: key 'model.config': cannot load the model: " +
                                         path("m.toml") + ": cannot open model config: not a regular file (a FIFO)");
    EXPECT_EQ(e.where().key, "model.config");
  }
}

TEST_F(hostile_files, plugin_config_with_a_deep_header_is_refused_before_parsing) {
  write("plugin.toml", "[" + repeat("x.", 40000) + "x]\n");
  try {
    (void)load_throughput_options(path("plugin.toml"));
    ADD_FAILURE() << "no error";
  } catch (const error& e) {
    EXPECT_EQ(std::string(e.what()), path("plugin.toml") + ":1:129: table header has more than 64 parts; refused "
                                                           "before parsing (no config needs that many)");
  }
}

// ---------------------------------------------------------------------------------------------------------
// config.json as hostile input.

TEST(hostile_json, valid_document_loads_and_ignores_non_flop_fields) {
  const model_spec spec = parse_hf_config(kVlJson, "ckpt/config.json");
  EXPECT_EQ(spec.model_type, "qwen3_vl");
  EXPECT_EQ(spec.name, "ckpt");
  EXPECT_EQ(spec.text.num_hidden_layers, 3);
  EXPECT_FALSE(spec.text.tie_word_embeddings);  // transformers' default when absent
}

// Edits of kVlJson, each pinning the whole message.
const hostile_edit kJsonEdits[] = {
    // Line 5 repeated as line 6: "    " + 4 -> column 5.
    {document::json, "duplicate_key_is_refused_at_the_second", "    \"num_hidden_layers\": 3,\n",
     "    \"num_hidden_layers\": 3,\n    \"num_hidden_layers\": 300,\n",
     "config.json:6:5: duplicate key \"num_hidden_layers\" in \"text_config\" (JSON leaves its meaning undefined, "
     "so flopmeter refuses it)"},
    {document::json, "duplicate_top_level_key_is_refused", "{\n  \"model_type\"",
     "{\n  \"model_type\": \"qwen3_5\",\n  \"model_type\"",
     "config.json:3:3: duplicate key \"model_type\" in the top-level object (JSON leaves its meaning undefined, "
     "so flopmeter refuses it)"},
    // "    \"head_dim\": " is 16 characters -> the literal starts at column 17, where nlohmann-json stops.
    {document::json, "nan_is_a_syntax_error_at_the_value", "\"head_dim\": 16", "\"head_dim\": NaN",
     "config.json:8:17: JSON syntax error: syntax error while parsing value - invalid literal; last read: "
     "'\"head_dim\": N'"},
    {document::json, "infinity_is_a_syntax_error_at_the_value", "\"head_dim\": 16", "\"head_dim\": Infinity",
     "config.json:8:17: JSON syntax error: syntax error while parsing value - invalid literal; last read: "
     "'\"head_dim\": I'"},
    // The bad byte at column 23 ("  \"model_type\": \"qwen3" is 22 characters, as for the NUL byte below); the
    // message quotes it as \xff, not raw.
    {document::json, "invalid_utf8_is_a_syntax_error", "\"qwen3_vl\"", "\"qwen3\xff\"",
     "config.json:2:23: JSON syntax error: syntax error while parsing value - invalid string: ill-formed UTF-8 "
     "byte; last read: '\"qwen3\\xff'"},
    // 2^63 (unsigned in nlohmann-json) and 2^64 (a float to nlohmann-json): both integers to the user.
    // "    \"hidden_size\": " + 19 -> 4:20.
    {document::json, "two_to_the_63_is_too_large", "\"hidden_size\": 64", "\"hidden_size\": 9223372036854775808",
     "config.json:4:20: key 'text_config.hidden_size': too large: must be <= 2^31 = 2147483648 (got "
     "9223372036854775808)"},
    {document::json, "two_to_the_64_is_too_large", "\"hidden_size\": 64", "\"hidden_size\": 18446744073709551616",
     "config.json:4:20: key 'text_config.hidden_size': too large: must be <= 2^31 = 2147483648 (got an integer "
     "beyond 64 bits)"},
    {document::json, "two_to_the_32_is_too_large", "\"hidden_size\": 64", "\"hidden_size\": 4294967296",
     "config.json:4:20: key 'text_config.hidden_size': too large: must be <= 2^31 = 2147483648 (got 4294967296)"},
    {document::json, "float_for_an_integer_is_a_type_error", "\"hidden_size\": 64", "\"hidden_size\": 64.0",
     "config.json:4:20: key 'text_config.hidden_size': expected an integer, got floating-point"},
    {document::json, "float_exponent_for_an_integer_is_a_type_error", "\"hidden_size\": 64", "\"hidden_size\": 6.4e1",
     "config.json:4:20: key 'text_config.hidden_size': expected an integer, got floating-point"},
    {document::json, "null_for_an_integer_is_a_type_error", "\"head_dim\": 16", "\"head_dim\": null",
     "config.json:8:17: key 'text_config.head_dim': expected an integer, got null"},
    {document::json, "string_for_an_integer_is_a_type_error", "\"head_dim\": 16", "\"head_dim\": \"16\"",
     "config.json:8:17: key 'text_config.head_dim': expected an integer, got string"},
    // "  \"model_type\": " + 16 -> 2:17.
    {document::json, "unsupported_model_type", "\"qwen3_vl\"", "\"falcon\"",
     "config.json:2:17: key 'model_type': unsupported model type \"falcon\" (flopmeter "
     "models " FLOPMETER_SUPPORTED_TYPES ")"},
    {document::json, "missing_model_type", "  \"model_type\": \"qwen3_vl\",\n", "",
     "config.json:1:1: required key 'model_type' is missing (a Hugging Face config.json names its model type at "
     "the top level)"},
    // Line 11 becomes "    \"num_experts\": 128": "    \"num_experts\": " + 19 -> 11:20.
    {document::json, "experts_on_a_dense_model_type_are_refused", "\"rope_theta\": 5000000", "\"num_experts\": 128",
     "config.json:11:20: key 'text_config.num_experts': not allowed for model_type \"qwen3_vl\", a dense model "
     "(no experts); a mixture-of-experts model has model_type \"qwen3_vl_moe\""},
    {document::json, "output_gate_on_qwen3_vl_is_refused", "\"rope_theta\": 5000000", "\"attn_output_gate\": true",
     "config.json:11:25: key 'text_config.attn_output_gate': not allowed for model_type \"qwen3_vl\", which has "
     "no attention output gate (a field of the hybrid types \"qwen3_5\", \"qwen3_5_moe\" and \"qwen3_next\")"},
    // A top-level attn_output_gate was ignored; it is read like tie_word_embeddings, so true on
    // Qwen3-VL is refused at it. Line 2 becomes two: "  \"attn_output_gate\": " + 22 -> 3:23.
    {document::json, "top_level_output_gate_on_qwen3_vl_is_refused", "  \"model_type\": \"qwen3_vl\",\n",
     "  \"model_type\": \"qwen3_vl\",\n  \"attn_output_gate\": true,\n",
     "config.json:3:23: key 'attn_output_gate': not allowed for model_type \"qwen3_vl\", which has no attention "
     "output gate (a field of the hybrid types \"qwen3_5\", \"qwen3_5_moe\" and \"qwen3_next\")"},
    // MTP layers on Qwen3-VL were billed. "    \"mtp_num_hidden_layers\": " + 29 -> 11:30.
    {document::json, "mtp_layers_on_qwen3_vl_are_refused", "\"rope_theta\": 5000000", "\"mtp_num_hidden_layers\": 2",
     "config.json:11:30: key 'text_config.mtp_num_hidden_layers': not allowed for model_type \"qwen3_vl\", which "
     "has no multi-token-prediction (MTP) layers (a field of the hybrid types \"qwen3_5\", \"qwen3_5_moe\" and "
     "\"qwen3_next\")"},
    // text_config opens on line 3: "  \"text_config\": " + 17 -> 3:18.
    {document::json, "missing_required_field_is_cited_at_its_object", "    \"head_dim\": 16,\n", "",
     "config.json:3:18: required key 'text_config.head_dim' is missing"},
    // An ESC sequence in the model type ("\u001b[2J" clears a terminal) is quoted as \u001b, never raw.
    {document::json, "control_characters_in_the_model_type_are_escaped", "\"qwen3_vl\"", "\"\\u001b[2J\"",
     "config.json:2:17: key 'model_type': unsupported model type \"\\u001b[2J\" (flopmeter "
     "models " FLOPMETER_SUPPORTED_TYPES ")"},
    // "    \"rope_theta\": 5000000" becomes "    \"layer_types\": [\"full_attention\", \"sliding\", ...]": entry 1
    // starts at 4 + 15 + 1 + 16 + 2 = 38 (+1 = column 39).
    {document::json, "layer_type_of_an_unknown_kind_is_cited_at_the_entry", "\"rope_theta\": 5000000",
     "\"layer_types\": [\"full_attention\", \"sliding\", \"full_attention\"]",
     "config.json:11:39: key 'text_config.layer_types[1]': expected \"linear_attention\" or \"full_attention\", "
     "got \"sliding\""},
    // Line 15 (12 closes text_config and 13 to 15 are vision_config): "    \"in_channels\": 3, " is 22
    // characters, "\"deepstack_visual_indexes\": [0, " 32 more -> column 55.
    {document::json, "deepstack_index_out_of_range_is_cited_at_the_entry", "  }\n",
     "  },\n"
     "  \"vision_config\": {\"depth\": 2, \"hidden_size\": 32, \"num_heads\": 2, \"intermediate_size\": 64,\n"
     "    \"out_hidden_size\": 64, \"patch_size\": 4, \"temporal_patch_size\": 2, \"spatial_merge_size\": 2,\n"
     "    \"in_channels\": 3, \"deepstack_visual_indexes\": [0, 7]}\n",
     "config.json:15:55: key 'vision_config.deepstack_visual_indexes[1]': must be a ViT block index in [0, "
     "vision_config.depth = 2) (got 7)"},
};

INSTANTIATE_TEST_SUITE_P(hostile_json, hostile_edits, ::testing::ValuesIn(kJsonEdits), testing::row_name<hostile_edit>);

TEST(hostile_json, nesting_beyond_64_is_refused_while_parsing) {
  // "    \"rope_theta\": " is 18 characters; the 65th '[' is at column 18 + 65 = 83... but two levels (the
  // root and text_config) are already open, so the 63rd '[' is the 65th level: column 18 + 63 = 81.
  EXPECT_EQ(json_error(replace_once(kVlJson, "\"rope_theta\": 5000000", "\"rope_theta\": " + repeat("[", 5000))),
            "config.json:11:81: objects and arrays nested more than 64 deep; refused (a config.json needs 3)");
}

TEST(hostile_json, trailing_garbage_is_a_syntax_error) {
  // Line 14 (after the final newline), column 1.
  EXPECT_EQ(json_error(kVlJson + "{}"),
            "config.json:14:1: JSON syntax error: syntax error while parsing value - unexpected '{'; expected end of "
            "input");
}

TEST(hostile_json, byte_order_mark_and_crlf_are_accepted_and_located) {
  std::string crlf;
  for (const char c : kVlJson) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
  EXPECT_EQ(parse_hf_config("\xEF\xBB\xBF" + crlf, "config.json").text.head_dim, 16);
  // "    \"vocab_size\": " + 18 -> 10:19.
  EXPECT_EQ(json_error(replace_once(crlf, "\"vocab_size\": 512", "\"vocab_size\": -5")),
            "config.json:10:19: key 'text_config.vocab_size': must be > 0 (got -5)");
}

TEST(hostile_json, nul_byte_in_a_string_is_a_syntax_error) {
  const std::string message = json_error(replace_once(kVlJson, "\"qwen3_vl\"", std::string("\"qwen3\0vl\"", 10)));
  // "  \"model_type\": \"qwen3" is 2 + 12 + 2 + 6 = 22 characters: the NUL is at column 23 of line 2.
  EXPECT_EQ(message, "config.json:2:23: JSON syntax error: syntax error while parsing value - invalid string: control "
                     "character U+0000 (NUL) must be escaped to \\u0000; last read: '\"qwen3<U+0000>'");
}

TEST(hostile_json, number_overflowing_a_double_is_a_syntax_error) {
  const std::string message = json_error(replace_once(kVlJson, "\"rope_theta\": 5000000", "\"rope_theta\": 1e400"));
  EXPECT_EQ(message.rfind("config.json:11:", 0), 0u) << message;
  EXPECT_NE(message.find("number overflow"), std::string::npos) << message;
}

TEST(hostile_json, empty_text_and_non_object_roots_are_refused) {
  EXPECT_EQ(json_error(""),
            "config.json:1:1: JSON syntax error: syntax error while parsing value - unexpected end of input; expected "
            "'[', '{', or a literal");
  EXPECT_EQ(json_error("[1, 2]"),
            "config.json:1:1: expected a JSON object at the top level (a Hugging Face config.json), got array");
  EXPECT_EQ(json_error("  \"qwen3_vl\""),
            "config.json:1:3: expected a JSON object at the top level (a Hugging Face config.json), got string");
}

TEST(hostile_json, comments_are_not_json) {
  const std::string message = json_error("// a comment\n" + kVlJson);
  EXPECT_EQ(message.rfind("config.json:1:", 0), 0u) << message;
  EXPECT_NE(message.find("JSON syntax error"), std::string::npos) << message;
}

TEST(hostile_json, text_config_of_the_wrong_type_or_missing) {
  EXPECT_EQ(json_error("{\"model_type\": \"qwen3_vl\", \"text_config\": [1]}"),
            "config.json:1:43: key 'text_config': expected an object, got array");
  EXPECT_EQ(json_error("{\"model_type\": \"qwen3_vl\"}"), "config.json:1:1: required table [text_config] is missing");
}

TEST(hostile_json, control_characters_in_values_are_escaped_in_messages) {
  // The config.json half is the kJsonEdits row control_characters_in_the_model_type_are_escaped.
  EXPECT_EQ(toml_error(kVl + "\"a\\u001bb\" = 1\n"),
            "h.toml:12:1: unknown key 'text_config.a\\u001bb' (not in the schema, see model_configs/SCHEMA.md)");
}

TEST(hostile_json, unicode_and_unknown_keys_are_ignored) {
  const model_spec spec = parse_hf_config(
      replace_once(kVlJson, "\"rope_theta\": 5000000", "\"rope_theta\": 5000000, \"日本語\": {\"x\": [null]}, \"\\u0000\": 1"),
      "config.json");
  EXPECT_EQ(spec.text.hidden_size, 64);
}

// ---------------------------------------------------------------------------------------------------------
// Peak lookup ignores all punctuation.

TEST(hostile_peak, every_punctuation_and_non_ascii_byte_is_ignored) {
  for (const char* name : {"H100.SXM", "h100/sxm", "H100 (SXM)", "H100·SXM", "[H100]::SXM!", "H100\tSXM"}) {
    SCOPED_TRACE(name);
    const auto match = find_peak(name, peak_precision::bf16);
    ASSERT_TRUE(match.has_value());
    EXPECT_STREQ(match->entry->name, "H100 SXM");
    EXPECT_DOUBLE_EQ(match->tflops, 989.4);
  }
  EXPECT_FALSE(find_peak("...", peak_precision::bf16).has_value());  // nothing left to match
}

// ---------------------------------------------------------------------------------------------------------
// NUL characters in strings. TOML's "\u0000" and JSON's "\u0000" are valid escapes, but a
// string flopmeter reads becomes a path, a name or a message, where a NUL cuts it short: a plugin file's
// `config = "m.toml\u0000junk"` loaded m.toml, and a message through the C ABI ended at the NUL. Every string
// of a TOML document (model or plugin) and every string a config.json field is read from is refused at its
// key; the message itself writes the character as \u0000.

TEST(hostile_nul, model_toml_string_with_a_nul_is_refused_at_its_key) {
  // `model_type = ` is 13 characters: the value starts at 2:14.
  EXPECT_EQ(toml_error(replace_once(kVl, "\"qwen3_vl\"", "\"qwen3_vl\\u0000x\"")),
            "h.toml:2:14: key 'model.model_type': contains a NUL character (\\u0000)");
  // A name is not checked against a list, so without the refusal it loaded as "tiny" + NUL + "vlm".
  // `name = ` is 7 characters -> 2:8.
  EXPECT_EQ(toml_error(replace_once(kVl, "[model]\n", "[model]\nname = \"tiny\\u0000vlm\"\n")),
            "h.toml:2:8: key 'model.name': contains a NUL character (\\u0000)");
}

TEST(hostile_nul, the_first_nul_in_document_order_is_reported_with_its_array_index) {
  // Line 12 `z = ["a", "b\u0000"]`: the second element starts at column 11 (`z = ["a", ` is 10 characters).
  // Line 13 `a = "\u0000"` sorts first by key, but comes later in the file. Both keys are unknown: the NUL is
  // refused before the keys are checked.
  EXPECT_EQ(toml_error(kVl + "z = [\"a\", \"b\\u0000\"]\n" + "a = \"\\u0000\"\n"),
            "h.toml:12:11: key 'text_config.z[1]': contains a NUL character (\\u0000)");
  // Multi-line basic strings are strings too (`y = ` is 4 characters -> 12:5).
  EXPECT_EQ(toml_error(kVl + "y = \"\"\"\nline\\u0000\"\"\"\n"),
            "h.toml:12:5: key 'text_config.y': contains a NUL character (\\u0000)");
}

TEST(hostile_nul, config_json_string_with_a_nul_is_refused_at_its_key) {
  // `  "model_type": ` is 2 + 12 + 2 = 16 characters: the value starts at 2:17. (Before: "unsupported model
  // type" quoting the value.)
  EXPECT_EQ(json_error(replace_once(kVlJson, "\"qwen3_vl\"", "\"qwen3_vl\\u0000x\"")),
            "config.json:2:17: key 'model_type': contains a NUL character (\\u0000)");
}

TEST_F(hostile_files, plugin_config_nul_in_model_config_is_refused_not_truncated) {
  write("m.toml", kVl);  // what the path cut at its NUL would name
  const std::string plugin = write("plugin.toml", "[model]\nconfig = \"m.toml\\u0000junk\"\n");
  // `config = ` is 9 characters -> 2:10.
  const std::string expected = plugin + ":2:10: key 'model.config': contains a NUL character (\\u0000)";
  EXPECT_EQ(error_message_of([&] { (void)load_throughput_options(plugin); }, plugin), expected);
  // Through the C ABI the whole message arrives: nothing in it is a NUL that would end the C string early.
  char message[1024] = {};
  flopmeter_plugin* created = flopmeter_create(plugin.c_str(), nullptr, message, sizeof message);
  EXPECT_EQ(created, nullptr);
  if (created != nullptr) flopmeter_destroy(created);
  EXPECT_EQ(std::string(message), expected);
}

TEST_F(hostile_files, plugin_config_nul_in_a_sink_path_creates_no_file) {
  write("m.toml", kVl);
  const std::string plugin = write("plugin.toml", "[model]\nconfig = \"m.toml\"\n[sinks]\nconsole = false\njsonl = \"" +
                                                      path("out.jsonl") + "\\u0000.evil\"\n");
  char message[1024] = {};
  flopmeter_plugin* created = flopmeter_create(plugin.c_str(), nullptr, message, sizeof message);
  EXPECT_EQ(created, nullptr);
  if (created != nullptr) flopmeter_destroy(created);
  // `jsonl = ` is 8 characters -> 5:9. Before: out.jsonl was created and written.
  EXPECT_EQ(std::string(message), plugin + ":5:9: key 'sinks.jsonl': contains a NUL character (\\u0000)");
  EXPECT_FALSE(fs::exists(dir_ / "out.jsonl"));
}

}  // namespace
}  // namespace flopmeter
