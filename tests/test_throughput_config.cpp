// Tests for the plugin TOML loader (plugin/accounting/throughput_config.cpp): the shipped example, defaults, how
// model.config is resolved, the train_mtp_layers override, and one test per kind of bad input, each pinning
// the whole message: file, exact line:col, key path and what is wrong.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

#include "flopmeter/error.h"
#include "flopmeter/model_config.h"
#include "flopmeter/sinks.h"
#include "flopmeter/throughput.h"
#include "accounting/throughput_config.h"  // plugin/: parse_throughput_options, the loader on text
#include "support/doc_edits.h"
#include "support/error_message.h"
#include "support/supported_types.h"

namespace flopmeter {
namespace {

namespace fs = std::filesystem;

const std::string kSourceDir = FLOPMETER_SOURCE_DIR;
const std::string kTinyVlm = kSourceDir + "/model_configs/tiny_vlm.toml";

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

using testing::edit_case;
using testing::replace_once;

// A valid document with every key set (the model by absolute path). Line numbers are in the comments: the
// bad-input tests replace text within one line, so an expected line:col is "line of the key here, column of
// the value in the edited line" (column = 1 + the length of the text before the value).
const std::string kBase =
    "[model]\n"                                  // 1
    "config = \"" + kTinyVlm + "\"\n"            // 2
    "scope = \"complete\"\n"                     // 3
    "sanity_check = true\n"                      // 4
    "[peak]\n"                                   // 5
    "gpu = \"H100 SXM\"\n"                       // 6
    "tflops_per_gpu = 989.4\n"                   // 7
    "precision = \"bf16\"\n"                     // 8
    "[parallel]\n"                               // 9
    "tp = 2\n"                                   // 10
    "cp = 1\n"                                   // 11
    "pp = 4\n"                                   // 12
    "order = \"tp-cp-dp-pp\"\n"                  // 13
    "[logging]\n"                                // 14
    "log_interval_steps = 10\n"                  // 15
    "tpi_multiplier = 1.5\n"                     // 16
    "topk = 5\n"                                 // 17
    "emit = \"all\"\n"                           // 18
    "collective_timeout_ms = 30000\n"            // 19
    "[sinks]\n"                                  // 20
    "console = false\n"                          // 21
    "jsonl = \"out/metrics_{rank}.jsonl\"\n";    // 22

// Each test gets its own temporary directory for the files it writes.
class throughput_config : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device random;
    // A parameterised test's name is "test/row": the '/' would nest the directory in one TearDown leaves behind.
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');
    dir_ = fs::temp_directory_path() / ("flopmeter_test_throughput_config_" + name + "_" + std::to_string(random()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Writes `text` to `name` under the test's directory; returns the path.
  std::string write(const std::string& name, const std::string& text) const {
    const fs::path path = dir_ / name;
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << text;
    return path.string();
  }

  // The plugin file path the bad-input tests write.
  std::string plugin_path() const { return (dir_ / "plugin.toml").string(); }

  // The message of the flopmeter::error that loading `doc` as plugin.toml throws ("" and a failure if none).
  std::string error_of(const std::string& doc) const {
    const std::string path = write("plugin.toml", doc);
    return testing::error_message_of([&] { (void)load_throughput_options(path); }, doc);
  }

  fs::path dir_;
};

// ---------------------------------------------------------------------------------------------------------
// Valid files.

TEST_F(throughput_config, example_file_loads_with_the_documented_values) {
  const std::string path = kSourceDir + "/plugin_configs/example.toml";
  const plugin_config config = load_plugin_config(path);
  const throughput_options& o = config.options;
  const sink_config& sinks = config.sinks;

  // model.config = "../model_configs/qwen3_vl_2b.toml", resolved against plugin_configs/.
  const std::string model_path = kSourceDir + "/plugin_configs/../model_configs/qwen3_vl_2b.toml";
  EXPECT_EQ(o.model.source_path, model_path);
  const model_spec expected = load_model_spec(kSourceDir + "/model_configs/qwen3_vl_2b.toml");
  EXPECT_EQ(o.model.name, "qwen3_vl_2b");
  EXPECT_EQ(o.model.model_type, expected.model_type);
  EXPECT_EQ(o.model.text.hidden_size, 2048);
  EXPECT_EQ(o.model.text.num_hidden_layers, 28);
  EXPECT_EQ(o.model.text.full_attention_interval, expected.text.full_attention_interval);
  EXPECT_EQ(o.model.text.num_full_attention_layers(), expected.text.num_full_attention_layers());
  ASSERT_TRUE(o.model.vision.has_value());
  EXPECT_EQ(o.model.vision->deepstack_visual_indexes, expected.vision->deepstack_visual_indexes);
  EXPECT_EQ(o.model.train_mtp_layers, expected.train_mtp_layers);

  EXPECT_EQ(o.scope, flop_scope::complete);
  EXPECT_FALSE(o.sanity_check);
  EXPECT_EQ(o.gpu, "H100 SXM");
  EXPECT_FALSE(o.peak_tflops_per_gpu.has_value());  // commented out in the example
  EXPECT_EQ(o.precision, peak_precision::bf16);
  EXPECT_EQ(o.parallel.tp, 1);
  EXPECT_EQ(o.parallel.cp, 1);
  EXPECT_EQ(o.parallel.pp, 1);
  EXPECT_EQ(o.rank_order, "tp-cp-dp-pp");
  EXPECT_EQ(o.tpi_multiplier, 1.0);
  EXPECT_EQ(o.topk, 3);
  EXPECT_EQ(o.emit, emit_ranks::rank0);
  EXPECT_EQ(o.collective_timeout, std::chrono::milliseconds(120000));
  EXPECT_TRUE(sinks.console);
  EXPECT_EQ(sinks.jsonl_path, "flopmeter.jsonl");
  EXPECT_TRUE(o.sinks.empty());  // the loader names sinks; it does not create them
  EXPECT_EQ(o.logger, nullptr);
}

TEST_F(throughput_config, every_key_of_the_base_document_is_read) {
  const plugin_config config = load_plugin_config(write("plugin.toml", kBase));
  const throughput_options& o = config.options;
  EXPECT_EQ(o.model.source_path, kTinyVlm);  // absolute: used as it is
  EXPECT_EQ(o.model.name, "tiny_vlm");
  EXPECT_EQ(o.scope, flop_scope::complete);
  EXPECT_TRUE(o.sanity_check);
  EXPECT_EQ(o.gpu, "H100 SXM");
  ASSERT_TRUE(o.peak_tflops_per_gpu.has_value());
  EXPECT_EQ(*o.peak_tflops_per_gpu, 989.4);
  EXPECT_EQ(o.precision, peak_precision::bf16);
  EXPECT_EQ(o.parallel.tp, 2);
  EXPECT_EQ(o.parallel.cp, 1);
  EXPECT_EQ(o.parallel.pp, 4);
  EXPECT_EQ(o.rank_order, "tp-cp-dp-pp");
  EXPECT_EQ(o.tpi_multiplier, 1.5);
  EXPECT_EQ(o.topk, 5);
  EXPECT_EQ(o.emit, emit_ranks::all);
  EXPECT_EQ(o.collective_timeout, std::chrono::milliseconds(30000));
  EXPECT_FALSE(config.sinks.console);
  EXPECT_EQ(config.sinks.jsonl_path, "out/metrics_{rank}.jsonl");  // raw: {rank} is substituted by make_sinks
}

TEST_F(throughput_config, only_the_model_config_is_required_and_the_rest_defaults) {
  const plugin_config config =
      load_plugin_config(write("plugin.toml", "[model]\nconfig = \"" + kTinyVlm + "\"\n"));
  const throughput_options& o = config.options;
  const throughput_options d;  // the struct's defaults
  EXPECT_EQ(o.model.name, "tiny_vlm");
  EXPECT_EQ(o.scope, flop_scope::complete);
  EXPECT_FALSE(o.sanity_check);
  EXPECT_FALSE(o.model.train_mtp_layers);
  EXPECT_EQ(o.gpu, "");
  EXPECT_FALSE(o.peak_tflops_per_gpu.has_value());
  EXPECT_EQ(o.precision, peak_precision::bf16);
  EXPECT_EQ(o.parallel.tp, 1);
  EXPECT_EQ(o.parallel.cp, 1);
  EXPECT_EQ(o.parallel.pp, 1);
  EXPECT_EQ(o.rank_order, d.rank_order);
  EXPECT_EQ(o.tpi_multiplier, 1.0);
  EXPECT_EQ(o.topk, 3);
  EXPECT_EQ(o.emit, emit_ranks::rank0);
  EXPECT_EQ(o.collective_timeout, std::chrono::milliseconds(120000));
  EXPECT_TRUE(config.sinks.console);
  EXPECT_EQ(config.sinks.jsonl_path, "");
}

TEST_F(throughput_config, relative_model_path_is_resolved_against_the_config_directory) {
  // A path from the temporary directory to the source tree's model config: it names the file only when
  // taken relative to the plugin file's directory, not to the test's working directory.
  const std::string relative = fs::relative(kTinyVlm, dir_).string();
  ASSERT_FALSE(relative.empty());
  const throughput_options o =
      load_throughput_options(write("plugin.toml", "[model]\nconfig = \"" + relative + "\"\n"));
  EXPECT_EQ(o.model.source_path, (dir_ / relative).string());
  EXPECT_EQ(o.model.name, "tiny_vlm");
  EXPECT_EQ(o.model.text.hidden_size, 64);
}

TEST_F(throughput_config, relative_model_path_in_a_subdirectory_of_the_config) {
  const std::string model_text = read_text(kTinyVlm);
  write("models/copy.toml", model_text);
  const throughput_options o =
      load_throughput_options(write("configs/plugin.toml", "[model]\nconfig = \"../models/copy.toml\"\n"));
  EXPECT_EQ(o.model.source_path, (dir_ / "configs" / "../models/copy.toml").string());
  EXPECT_EQ(o.model.name, "tiny_vlm");  // the model file's [model].name
}

TEST_F(throughput_config, train_mtp_layers_overrides_the_model_file_only_when_present) {
  const std::string model_text = read_text(kTinyVlm);
  write("mtp.toml", model_text + "\n[flopmeter]\ntrain_mtp_layers = true\n");
  EXPECT_TRUE(load_throughput_options(write("a.toml", "[model]\nconfig = \"mtp.toml\"\n")).model.train_mtp_layers);
  EXPECT_FALSE(load_throughput_options(write("b.toml", "[model]\nconfig = \"mtp.toml\"\ntrain_mtp_layers = false\n"))
                   .model.train_mtp_layers);
  EXPECT_TRUE(
      load_throughput_options(write("c.toml", "[model]\nconfig = \"" + kTinyVlm + "\"\ntrain_mtp_layers = true\n"))
          .model.train_mtp_layers);
}

TEST_F(throughput_config, other_accepted_values) {
  std::string doc = replace_once(kBase, "scope = \"complete\"", "scope = \"seed\"");
  doc = replace_once(doc, "tflops_per_gpu = 989.4", "tflops_per_gpu = 1979");  // an integer is a number
  doc = replace_once(doc, "precision = \"bf16\"", "precision = \"fp8\"");
  doc = replace_once(doc, "order = \"tp-cp-dp-pp\"", "order = \"tp-cp-ep-dp-pp\"");  // ep is ignored
  doc = replace_once(doc, "emit = \"all\"", "emit = \"rank0\"");
  doc = replace_once(doc, "topk = 5", "topk = 0");
  doc = replace_once(doc, "collective_timeout_ms = 30000", "collective_timeout_ms = 0");
  doc = replace_once(doc, "gpu = \"H100 SXM\"", "gpu = \"Imaginary GPU 9000\"");  // unknown: the plugin warns
  const throughput_options o = load_throughput_options(write("plugin.toml", doc));
  EXPECT_EQ(o.scope, flop_scope::seed);
  EXPECT_EQ(o.peak_tflops_per_gpu, 1979.0);
  EXPECT_EQ(o.precision, peak_precision::fp8);
  EXPECT_EQ(o.rank_order, "tp-cp-ep-dp-pp");
  EXPECT_EQ(o.emit, emit_ranks::rank0);
  EXPECT_EQ(o.topk, 0);
  EXPECT_EQ(o.collective_timeout, std::chrono::milliseconds(0));
  EXPECT_EQ(o.gpu, "Imaginary GPU 9000");
}

// ---------------------------------------------------------------------------------------------------------
// Bad input: one case per kind of problem. `from` -> `to` edits kBase within one line; the expected message
// is the plugin file's path followed by `message`.

const edit_case kBadCases[] = {
    // "topk = = 5": the second '=' is at column 8 ("topk = " is 7 characters), line 17.
    {"syntax_error", "topk = 5", "topk = = 5",
     ":17:8: TOML syntax error: Error while parsing value: could not determine value type"},
    // "scope = " is 8 characters -> column 9, line 3.
    {"bad_scope", "scope = \"complete\"", "scope = \"full\"",
     ":3:9: key 'model.scope': unknown FLOP scope 'full' (expected \"seed\" or \"complete\")"},
    {"scope_not_a_string", "scope = \"complete\"", "scope = 1",
     ":3:9: key 'model.scope': expected a string, got integer"},
    // "sanity_check = " is 15 characters -> column 16, line 4.
    {"sanity_check_not_a_boolean", "sanity_check = true", "sanity_check = \"yes\"",
     ":4:16: key 'model.sanity_check': expected a boolean, got string"},
    // "gpu = " is 6 characters -> column 7, line 6.
    {"empty_gpu", "gpu = \"H100 SXM\"", "gpu = \"\"", ":6:7: key 'peak.gpu': must not be empty"},
    // "tflops_per_gpu = " is 17 characters -> column 18, line 7. TOML spells the non-finite values nan, inf.
    {"nan_tflops", "tflops_per_gpu = 989.4", "tflops_per_gpu = nan",
     ":7:18: key 'peak.tflops_per_gpu': must be finite (got nan)"},
    {"inf_tflops", "tflops_per_gpu = 989.4", "tflops_per_gpu = inf",
     ":7:18: key 'peak.tflops_per_gpu': must be finite (got inf)"},
    {"negative_inf_tflops", "tflops_per_gpu = 989.4", "tflops_per_gpu = -inf",
     ":7:18: key 'peak.tflops_per_gpu': must be finite (got -inf)"},
    {"negative_tflops", "tflops_per_gpu = 989.4", "tflops_per_gpu = -5.5",
     ":7:18: key 'peak.tflops_per_gpu': must be >= 0.001 (got -5.5)"},
    {"zero_tflops", "tflops_per_gpu = 989.4", "tflops_per_gpu = 0",
     ":7:18: key 'peak.tflops_per_gpu': must be >= 0.001 (got 0)"},
    {"tflops_as_string", "tflops_per_gpu = 989.4", "tflops_per_gpu = \"989.4\"",
     ":7:18: key 'peak.tflops_per_gpu': expected a number, got string"},
    // A peak beyond the documented range [0.001, 100000] TFLOP/s (setting_range) is a unit
    // mix-up, not a GPU: 1e300 would give an MFU of ~0, 1e-300 or a subnormal an MFU of ~1e300 %.
    {"absurd_tflops", "tflops_per_gpu = 989.4", "tflops_per_gpu = 1e300",
     ":7:18: key 'peak.tflops_per_gpu': too large: must be <= 1e+05 (got 1e+300)"},
    {"tiny_tflops", "tflops_per_gpu = 989.4", "tflops_per_gpu = 1e-300",
     ":7:18: key 'peak.tflops_per_gpu': must be >= 0.001 (got 1e-300)"},
    {"subnormal_tflops", "tflops_per_gpu = 989.4", "tflops_per_gpu = 5e-324",
     ":7:18: key 'peak.tflops_per_gpu': must be >= 0.001 (got 5e-324)"},
    // "precision = " is 12 characters -> column 13, line 8.
    {"bad_precision", "precision = \"bf16\"", "precision = \"fp16\"",
     ":8:13: key 'peak.precision': unknown precision 'fp16' (expected \"bf16\" or \"fp8\")"},
    // "tp = " is 5 characters -> column 6, line 10.
    {"zero_tp", "tp = 2", "tp = 0", ":10:6: key 'parallel.tp': must be > 0 (got 0)"},
    {"tp_as_string", "tp = 2", "tp = \"2\"", ":10:6: key 'parallel.tp': expected an integer, got string"},
    {"tp_as_float", "tp = 2", "tp = 2.0", ":10:6: key 'parallel.tp': expected an integer, got floating-point"},
    // 2^21 > 2^20.
    {"tp_too_large", "tp = 2", "tp = 2097152",
     ":10:6: key 'parallel.tp': too large: must be <= 2^20 = 1048576 (got 2097152)"},
    // Column 6, lines 11 and 12.
    {"negative_cp", "cp = 1", "cp = -1", ":11:6: key 'parallel.cp': must be > 0 (got -1)"},
    {"zero_pp", "pp = 4", "pp = 0", ":12:6: key 'parallel.pp': must be > 0 (got 0)"},
    // "order = " is 8 characters -> column 9, line 13.
    {"order_missing_dimensions", "order = \"tp-cp-dp-pp\"", "order = \"tp-dp\"",
     ":13:9: key 'parallel.order': order \"tp-dp\" is not a '-'-separated permutation of tp, cp, dp, pp "
     "(\"cp\" is missing)"},
    {"order_duplicate", "order = \"tp-cp-dp-pp\"", "order = \"tp-cp-dp-tp\"",
     ":13:9: key 'parallel.order': order \"tp-cp-dp-tp\" is not a '-'-separated permutation of tp, cp, dp, pp "
     "(\"tp\" appears twice)"},
    {"order_unknown_name", "order = \"tp-cp-dp-pp\"", "order = \"tp-cp-dp-xp\"",
     ":13:9: key 'parallel.order': order \"tp-cp-dp-xp\" is not a '-'-separated permutation of tp, cp, dp, pp "
     "(unknown name \"xp\")"},
    // "log_interval_steps = " is 21 characters -> column 22, line 15.
    {"zero_log_interval", "log_interval_steps = 10", "log_interval_steps = 0",
     ":15:22: key 'logging.log_interval_steps': must be > 0 (got 0)"},
    // "tpi_multiplier = " is 17 characters -> column 18, line 16.
    {"tpi_multiplier_below_one", "tpi_multiplier = 1.5", "tpi_multiplier = 0.5",
     ":16:18: key 'logging.tpi_multiplier': must be >= 1 (got 0.5)"},
    {"tpi_multiplier_nan", "tpi_multiplier = 1.5", "tpi_multiplier = nan",
     ":16:18: key 'logging.tpi_multiplier': must be finite (got nan)"},
    {"tpi_multiplier_absurd", "tpi_multiplier = 1.5", "tpi_multiplier = 1e300",
     ":16:18: key 'logging.tpi_multiplier': too large: must be <= 1e+06 (got 1e+300)"},
    // "topk = " is 7 characters -> column 8, line 17.
    {"negative_topk", "topk = 5", "topk = -1", ":17:8: key 'logging.topk': must be >= 0 (got -1)"},
    {"topk_too_large", "topk = 5", "topk = 1025", ":17:8: key 'logging.topk': too large: must be <= 1024 (got 1025)"},
    // "emit = " is 7 characters -> column 8, line 18.
    {"bad_emit", "emit = \"all\"", "emit = \"some\"",
     ":18:8: key 'logging.emit': unknown emit mode 'some' (expected \"rank0\" or \"all\")"},
    // "collective_timeout_ms = " is 24 characters -> column 25, line 19.
    {"negative_collective_timeout", "collective_timeout_ms = 30000", "collective_timeout_ms = -5",
     ":19:25: key 'logging.collective_timeout_ms': must be >= 0 (got -5)"},
    // One hour (3,600,000 ms) is the longest timeout: a day-long block of on_log is a unit mix-up.
    {"collective_timeout_beyond_an_hour", "collective_timeout_ms = 30000", "collective_timeout_ms = 3600001",
     ":19:25: key 'logging.collective_timeout_ms': too large: must be <= 3600000 (got 3600001)"},
    // "console = " is 10 characters -> column 11, line 21.
    {"console_not_a_boolean", "console = false", "console = \"yes\"",
     ":21:11: key 'sinks.console': expected a boolean, got string"},
    // "jsonl = " is 8 characters -> column 9, line 22.
    {"empty_jsonl", "jsonl = \"out/metrics_{rank}.jsonl\"", "jsonl = \"\"",
     ":22:9: key 'sinks.jsonl': must not be empty"},
    {"jsonl_not_a_string", "jsonl = \"out/metrics_{rank}.jsonl\"", "jsonl = true",
     ":22:9: key 'sinks.jsonl': expected a string, got boolean"},
    // An unknown key is reported at the key itself: line 17, column 1.
    {"unknown_key_with_hint", "topk = 5", "topK = 5",
     ":17:1: unknown key 'logging.topK' (did you mean 'logging.topk'?)"},
    // Line 21 in [sinks]; a key unlike any schema key gets a pointer to the schema.
    {"unknown_key_without_hint", "console = false", "rotate = false",
     ":21:1: unknown key 'sinks.rotate' (not in the schema, see plugin_configs/SCHEMA.md)"},
    // A misspelt table header: the key inside the brackets, line 14, column 2.
    {"unknown_table_with_hint", "[logging]", "[loging]", ":14:2: unknown key 'loging' (did you mean 'logging'?)"},
    {"unknown_table", "[logging]", "[metrics]", ":14:2: unknown key 'metrics'"},
    // [model] removed: "config" is then a key of the root table (line 2, column 1) that belongs in [model].
    {"model_key_at_top_level", "[model]\n", "",
     ":1:1: unknown key 'config' (did you mean 'model.config' in table [model]?)"},
    // model.config (line 2) replaced by a comment: reported at the [model] header, 1:1.
    {"missing_model_config", "config = \"" FLOPMETER_SOURCE_DIR "/model_configs/tiny_vlm.toml\"", "# no config",
     ":1:1: required key 'model.config' is missing"},
    // "config = " is 9 characters -> column 10, line 2.
    {"empty_model_config", "config = \"" FLOPMETER_SOURCE_DIR "/model_configs/tiny_vlm.toml\"", "config = \"\"",
     ":2:10: key 'model.config': must not be empty"},
    {"model_config_not_a_string", "config = \"" FLOPMETER_SOURCE_DIR "/model_configs/tiny_vlm.toml\"",
     "config = [\"a.toml\"]", ":2:10: key 'model.config': expected a string, got array"},
};

class bad_input : public throughput_config, public ::testing::WithParamInterface<edit_case> {};

TEST_P(bad_input, message_names_file_location_key_and_problem) {
  const edit_case& c = GetParam();
  EXPECT_EQ(error_of(replace_once(kBase, c.from, c.to)), plugin_path() + c.message);
}

INSTANTIATE_TEST_SUITE_P(throughput_config, bad_input, ::testing::ValuesIn(kBadCases), testing::row_name<edit_case>);

// Documents the kBase edits cannot express.

TEST_F(throughput_config, missing_model_table) {
  // Everything before [peak] removed: reported at the document root, 1:1.
  const std::string doc = kBase.substr(kBase.find("[peak]"));
  EXPECT_EQ(error_of(doc), plugin_path() + ":1:1: required table [model] is missing");
}

TEST_F(throughput_config, model_table_of_wrong_type) {
  // "model = " is 8 characters -> the value is at 1:9.
  EXPECT_EQ(error_of("model = \"qwen3_vl_2b.toml\"\n"),
            plugin_path() + ":1:9: key 'model': expected a table, got string");
}

TEST_F(throughput_config, top_level_parallel_key_points_to_its_table) {
  EXPECT_EQ(error_of("tp = 2\n" + kBase),
            plugin_path() + ":1:1: unknown key 'tp' (did you mean 'parallel.tp' in table [parallel]?)");
}

// A file of the wrong kind where the plugin config goes says what it is. A model config: its first model
// table is cited ("[text_config]" on line 3, the header at 3:1). A config.json: TOML cannot start with '{',
// which is cited (two spaces of indentation on line 2 -> 2:3) instead of a TOML syntax error.
TEST_F(throughput_config, a_model_config_or_a_config_json_given_as_plugin_config_says_what_it_is) {
  EXPECT_EQ(error_of("[model]\nmodel_type = \"qwen3_vl\"\n[text_config]\nhidden_size = 64\n"),
            plugin_path() +
                ":3:1: key 'text_config': this is a model config, not a plugin config: a plugin config "
                "names its model config in [model] config = \"PATH\" (plugin_configs/SCHEMA.md)");
  EXPECT_EQ(error_of("\n  {\"model_type\": \"qwen3_vl\"}\n"),
            plugin_path() +
                ":2:3: this looks like JSON (a Hugging Face config.json?), not a plugin config: the "
                "plugin config is TOML and names the model's config.json or TOML in [model] config = "
                "\"PATH\" (plugin_configs/SCHEMA.md)");
}

TEST_F(throughput_config, missing_plugin_file_names_the_path) {
  const std::string path = (dir_ / "missing.toml").string();
  EXPECT_EQ(testing::error_message_of([&] { (void)load_throughput_options(path); }),
            path + ": cannot open plugin config: no such file");
}

// A model file that cannot be read is reported where the user fixes it, at model.config in
// the plugin file ("config = " is 9 characters -> 2:10), with the resolved path and the operating system's
// reason.
TEST_F(throughput_config, missing_model_file_is_cited_at_model_config_in_the_plugin_file) {
  EXPECT_EQ(error_of("[model]\nconfig = \"nope.toml\"\n"),
            plugin_path() + ":2:10: key 'model.config': cannot load the model: " + (dir_ / "nope.toml").string() +
                ": cannot open model config: no such file");
}

TEST_F(throughput_config, model_path_naming_the_plugin_file_itself_says_so) {
  // plugin_path() is dir_/plugin.toml; "config = " is 9 characters -> 2:10.
  EXPECT_EQ(error_of("[model]\nconfig = \"plugin.toml\"\n"),
            plugin_path() + ":2:10: key 'model.config': names this plugin config itself ('" + plugin_path() +
                "'); it must name a model TOML file, a Hugging Face config.json or a checkpoint directory");
}

TEST_F(throughput_config, model_path_may_be_a_config_json_or_a_checkpoint_directory) {
  // The tiny VLM as a Hugging Face config.json: the same spec as tiny_vlm.toml (name aside).
  const std::string json =
      R"({"model_type": "qwen3_5", "text_config": {"model_type": "qwen3_5_text", "hidden_size": 64,
  "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
  "intermediate_size": 128, "vocab_size": 512, "tie_word_embeddings": true, "attn_output_gate": true,
  "full_attention_interval": 2, "linear_key_head_dim": 16, "linear_value_head_dim": 16,
  "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_conv_kernel_dim": 4,
  "rope_theta": 10000000, "dtype": "bfloat16"},
 "vision_config": {"depth": 2, "hidden_size": 32, "num_heads": 2, "intermediate_size": 64, "out_hidden_size": 64,
  "patch_size": 4, "temporal_patch_size": 2, "spatial_merge_size": 2, "in_channels": 3}})";
  const std::string file = write("ckpt/tiny/config.json", json);
  const model_spec reference = load_model_spec(kTinyVlm);
  for (const std::string& config : {std::string("ckpt/tiny/config.json"), std::string("ckpt/tiny")}) {
    SCOPED_TRACE(config);
    fs::path plugin = dir_ / "plugin.toml";
    std::ofstream(plugin) << "[model]\nconfig = \"" << config << "\"\n";
    const throughput_options o = load_throughput_options(plugin.string());
    EXPECT_EQ(o.model.source_path, file);
    EXPECT_EQ(o.model.name, "tiny");  // the checkpoint directory's name
    EXPECT_EQ(o.model.text.full_attention_interval, reference.text.full_attention_interval);
    EXPECT_EQ(o.model.text.attn_output_gate, reference.text.attn_output_gate);
    EXPECT_EQ(o.model.text.linear_num_value_heads, reference.text.linear_num_value_heads);
  }
}

TEST_F(throughput_config, model_file_errors_propagate_unchanged) {
  const std::string model = write("bad_model.toml", "[model]\nmodel_type = \"falcon\"\n[text_config]\n");
  // The model loader's own message: "model_type = " is 13 characters -> 2:14 in the model file.
  EXPECT_EQ(error_of("[model]\nconfig = \"bad_model.toml\"\n"),
            model + ":2:14: key 'model.model_type': unknown model type \"falcon\" (supported: " +
                detail::supported_model_types_text() + ")");
}

TEST_F(throughput_config, text_form_names_its_source_and_resolves_the_model_against_base_dir) {
  // detail::parse_throughput_options is load_throughput_options without the file (the fuzzer's entry).
  const std::string model = write("models/m.toml", read_text(kTinyVlm));
  const throughput_options o =
      detail::parse_throughput_options("[model]\nconfig = \"m.toml\"\n", "inline.toml", (dir_ / "models").string());
  EXPECT_EQ(o.model.source_path, model);
  try {
    (void)detail::parse_throughput_options("[model]\nconfig = \"m.toml\"\n[logging]\ntopk = -1\n", "inline.toml", "");
    ADD_FAILURE() << "no error";
  } catch (const error& e) {
    EXPECT_EQ(std::string(e.what()), "inline.toml:4:8: key 'logging.topk': must be >= 0 (got -1)");
  }
}

TEST_F(throughput_config, plugin_file_errors_come_before_the_model_file_is_read) {
  // The model file does not exist, but the bad topk in the same plugin file is reported first.
  EXPECT_EQ(error_of("[model]\nconfig = \"nope.toml\"\n[logging]\ntopk = -1\n"),
            plugin_path() + ":4:8: key 'logging.topk': must be >= 0 (got -1)");
}

// [logging] rendezvous_timeout_ms: read into plugin_config (the C ABI's own Gloo group uses it), 60000 by default,
// and a bad value names file:line:col and the key ("rendezvous_timeout_ms = " is 24 characters -> column 25).
TEST_F(throughput_config, rendezvous_timeout_is_read_with_its_default_and_bounds) {
  EXPECT_EQ(load_plugin_config(write("default.toml", kBase)).rendezvous_timeout, std::chrono::milliseconds(60000));
  const std::string with_timeout = replace_once(kBase, "collective_timeout_ms = 30000\n",
                                                "collective_timeout_ms = 30000\nrendezvous_timeout_ms = 2500\n");
  EXPECT_EQ(load_plugin_config(write("set.toml", with_timeout)).rendezvous_timeout, std::chrono::milliseconds(2500));
  EXPECT_EQ(error_of(replace_once(with_timeout, "rendezvous_timeout_ms = 2500", "rendezvous_timeout_ms = 0")),
            plugin_path() + ":20:25: key 'logging.rendezvous_timeout_ms': must be > 0 (got 0)");
  EXPECT_EQ(error_of(replace_once(with_timeout, "rendezvous_timeout_ms = 2500", "rendezvous_timeout_ms = 3600001")),
            plugin_path() + ":20:25: key 'logging.rendezvous_timeout_ms': too large: must be <= 3600000 (got 3600001)");
}

// [logging] small_allreduce: read into plugin_config (the C ABI's own Gloo group runs its logs' collectives by
// it), automatic by default; a value that names no algorithm is refused at file:line:col with the key and the
// three names ("small_allreduce = " is 18 characters -> column 19 of line 20).
TEST_F(throughput_config, small_allreduce_is_read_with_its_default_and_its_three_names) {
  EXPECT_EQ(load_plugin_config(write("default.toml", kBase)).small_allreduce, small_allreduce::automatic);
  const auto with = [](const std::string& value) {
    return replace_once(kBase, "collective_timeout_ms = 30000\n",
                        "collective_timeout_ms = 30000\nsmall_allreduce = " + value + "\n");
  };
  EXPECT_EQ(load_plugin_config(write("a.toml", with("\"automatic\""))).small_allreduce, small_allreduce::automatic);
  EXPECT_EQ(load_plugin_config(write("b.toml", with("\"backend\""))).small_allreduce, small_allreduce::backend);
  EXPECT_EQ(load_plugin_config(write("l.toml", with("\"log_depth\""))).small_allreduce, small_allreduce::log_depth);
  EXPECT_EQ(error_of(with("\"recursive_doubling\"")),
            plugin_path() +
                ":20:19: key 'logging.small_allreduce': unknown small_allreduce 'recursive_doubling' "
                "(expected \"automatic\", \"backend\" or \"log_depth\")");
  EXPECT_EQ(error_of(with("4")).rfind(plugin_path() + ":20:19: key 'logging.small_allreduce': ", 0), 0u)
      << error_of(with("4"));
}

// [sinks] paths keep where they were written, and make_sinks reports a path it cannot open
// there. kBase line 22 is `jsonl = "out/metrics_{rank}.jsonl"`: "jsonl = " is 8 characters -> 22:9.
TEST_F(throughput_config, sink_paths_carry_their_location_into_open_errors) {
  const std::string missing = (dir_ / "missing").string();
  const std::string doc =
      replace_once(kBase, "jsonl = \"out/metrics_{rank}.jsonl\"",
                   "jsonl = \"" + missing + "/metrics_{rank}.jsonl\"\ntensorboard = \"" + write("file", "x") + "/tb\"");
  const detail::plugin_file config = detail::load_plugin_file(write("plugin.toml", doc));
  EXPECT_EQ(format_error(config.sinks_at.jsonl_at, "x"), plugin_path() + ":22:9: key 'sinks.jsonl': x");
  // The next line, "tensorboard = " is 14 characters -> 23:15.
  EXPECT_EQ(format_error(config.sinks_at.tensorboard_at, "x"), plugin_path() + ":23:15: key 'sinks.tensorboard': x");
  // Rank 2 of a job: "{rank}" -> "2"; <dir>/missing is the first missing directory (ENOENT).
  EXPECT_EQ(
      testing::error_message_of([&] { (void)detail::make_sinks(config.config.sinks, config.sinks_at, 2, nullptr); }),
      plugin_path() + ":22:9: key 'sinks.jsonl': cannot open \"" + missing +
          "/metrics_2.jsonl\" for append: No such file or directory (the directory \"" + missing +
          "\" does not exist: create it first, or change [sinks] jsonl)");
  // With the JSONL path fixed, the TensorBoard directory under a regular file fails at its own line (ENOTDIR).
  sink_config tensorboard_only = config.config.sinks;
  tensorboard_only.jsonl_path.clear();
  const std::string message =
      testing::error_message_of([&] { (void)detail::make_sinks(tensorboard_only, config.sinks_at, 2, nullptr); });
  if (message.find("built without TensorBoard support") != std::string::npos) GTEST_SKIP() << message;
  EXPECT_EQ(message, plugin_path() + ":23:15: key 'sinks.tensorboard': cannot create the directory \"" +
                         (dir_ / "file" / "tb").string() +
                         "\" for TensorBoard event files: Not a directory (a part of the path that must be a "
                         "directory is a file)");
}

// A JSONL path naming the plugin file or the model config it loads would append records to it, and the next
// run would fail on a TOML syntax error: the sinks made from that file (detail::make_sinks with the loader's
// provenance, as create_throughput_plugin does) are refused at the key (22:9, as above), whatever the spelling.
TEST_F(throughput_config, a_jsonl_path_naming_the_configuration_is_refused_at_its_key) {
  const std::string model = write("model.toml", read_text(kTinyVlm));
  const std::string base = replace_once(kBase, "config = \"" + kTinyVlm + "\"", "config = \"model.toml\"");
  // The model config, spelt through a directory and back; the plugin file itself, through a symbolic link.
  fs::create_directories(dir_ / "sub");
  fs::create_symlink(dir_ / "plugin.toml", dir_ / "link.toml");
  const std::pair<std::string, std::string> cases[] = {{(dir_ / "sub" / ".." / "model.toml").string(), model},
                                                       {(dir_ / "link.toml").string(), plugin_path()}};
  for (const auto& [jsonl, config_file] : cases) {
    const std::string doc = replace_once(base, "jsonl = \"out/metrics_{rank}.jsonl\"", "jsonl = \"" + jsonl + "\"");
    const detail::plugin_file config = detail::load_plugin_file(write("plugin.toml", doc));
    EXPECT_EQ(
        testing::error_message_of([&] { (void)detail::make_sinks(config.config.sinks, config.sinks_at, 0, nullptr); }),
        plugin_path() + ":22:9: key 'sinks.jsonl': the JSONL file \"" + jsonl + "\" is the configuration file \"" +
            config_file + "\" itself; records appended to it would corrupt it: name another file");
    EXPECT_EQ(read_text(config_file == model ? model : plugin_path()).find("{\"step\""), std::string::npos);
  }
}

// A NUL in a string would cut the path short where it is opened (`config = "m.toml\u0000junk"` loaded m.toml):
// refused at its key, whatever the key ("config = " is 9 characters -> 2:10; "jsonl = " 8 -> 22:9).
TEST_F(throughput_config, nul_characters_in_strings_are_refused_at_their_key) {
  write("m.toml", read_text(kTinyVlm));
  EXPECT_EQ(error_of("[model]\nconfig = \"m.toml\\u0000junk\"\n"),
            plugin_path() + ":2:10: key 'model.config': contains a NUL character (\\u0000)");
  EXPECT_EQ(error_of(replace_once(kBase, "out/metrics_{rank}.jsonl", "out.jsonl\\u0000.evil")),
            plugin_path() + ":22:9: key 'sinks.jsonl': contains a NUL character (\\u0000)");
  EXPECT_EQ(error_of(replace_once(kBase, "\"H100 SXM\"", "\"H100\\u0000\"")),
            plugin_path() + ":6:7: key 'peak.gpu': contains a NUL character (\\u0000)");
}

// A value quoted in a message has its control characters escaped ("precision = " is 12 characters -> 8:13).
TEST_F(throughput_config, control_characters_in_a_quoted_value_are_escaped) {
  EXPECT_EQ(
      error_of(replace_once(kBase, "precision = \"bf16\"", "precision = \"\\u001b[2J\"")),
      plugin_path() + ":8:13: key 'peak.precision': unknown precision '\\u001b[2J' (expected \"bf16\" or \"fp8\")");
}

}  // namespace

// [training]: the frozen parts and LoRA are read into throughput_options::training; a bad part, a repeated part,
// an unknown target and a regime that does not fit the model are refused at their key or at the table.
TEST_F(throughput_config, training_table_sets_the_regime_and_refuses_what_does_not_fit) {
  const std::string model = "[model]\nconfig = \"" + kTinyVlm + "\"\n";
  const throughput_options o =
      load_plugin_config(write("t.toml", model + "[training]\nfrozen = [\"vision\", \"text\"]\n")).options;
  EXPECT_TRUE(o.training.vision_frozen);
  EXPECT_FALSE(o.training.merger_frozen);
  EXPECT_TRUE(o.training.text_frozen);
  const throughput_options lora =
      load_plugin_config(write("l.toml", model + "[training]\nfrozen = [\"vision\", \"merger\"]\n"
                                                 "lora_rank = 16\nlora_targets = [\"q_proj\", \"in_proj_qkv\"]\n"))
          .options;
  EXPECT_EQ(lora.training.lora_rank, 16);
  ASSERT_EQ(lora.training.lora_targets.size(), 2u);
  EXPECT_EQ(lora.training.lora_targets[1], lora_target::in_proj_qkv);
  const auto starts = [](const std::string& message, const std::string& prefix) {
    EXPECT_EQ(message.substr(0, prefix.size()), prefix) << message;
  };
  EXPECT_EQ(
      error_of(model + "[training]\nfrozen = [\"decoder\"]\n"),
      plugin_path() +
          ":4:11: key 'training.frozen[0]': unknown part 'decoder' (expected \"vision\", \"merger\" or \"text\")");
  EXPECT_EQ(error_of(model + "[training]\nfrozen = [\"text\", \"text\"]\n"),
            plugin_path() + ":4:19: key 'training.frozen[1]': part 'text' is named twice");
  starts(error_of(model + "[training]\nlora_rank = 4\nlora_targets = [\"qkv\"]\n"),
         plugin_path() + ":5:17: key 'training.lora_targets[0]': unknown LoRA target 'qkv' (expected one of q_proj, ");
  starts(error_of(model + "[training]\nfrozen = [\"vision\", \"merger\", \"text\"]\n"),
         plugin_path() +
             ":3:1: table [training]: training.frozen = [\"vision\", \"merger\", \"text\"] freezes every part "
             "of model 'tiny_vlm': nothing trains");
}

// [training] indexer_trains: read into the regime (false by default); a model without a sparse-attention indexer
// refuses it at the table, naming the key.
TEST_F(throughput_config, training_table_sets_indexer_trains) {
  const std::string dsa =
      "[model]\nconfig = \"" + std::string(FLOPMETER_SOURCE_DIR) + "/model_configs/deepseek_v3_2_exp.toml\"\n";
  EXPECT_FALSE(load_plugin_config(write("d.toml", dsa)).options.training.indexer_trains);
  EXPECT_TRUE(
      load_plugin_config(write("i.toml", dsa + "[training]\nindexer_trains = true\n")).options.training.indexer_trains);
  const std::string model = "[model]\nconfig = \"" + kTinyVlm + "\"\n";
  const std::string refused = error_of(model + "[training]\nindexer_trains = true\n");
  EXPECT_NE(refused.find(plugin_path() + ":3:1: table [training]: training.indexer_trains"), std::string::npos)
      << refused;
  EXPECT_NE(error_of(dsa + "[training]\nindexer_trains = 1\n").find("training.indexer_trains"), std::string::npos);
}

// [training] recompute keys: the policy by name, the layer selection, the ViT; recompute_layers counts per
// pipeline stage, so [parallel] pp is carried into the regime. A bad name is refused at its key, a selection
// that does not fit the model at the table.
TEST_F(throughput_config, training_table_sets_the_recompute_policy) {
  const std::string model = "[model]\nconfig = \"" + kTinyVlm + "\"\n";
  const throughput_options o =
      load_plugin_config(write("r.toml", model + "[training]\nrecompute = \"full_early_stop\"\n"
                                                 "recompute_layers = 2\nrecompute_vision = true\n"
                                                 "[parallel]\npp = 2\n"))
          .options;
  EXPECT_EQ(o.training.recompute.policy, recompute_policy::full_early_stop);
  EXPECT_EQ(o.training.recompute.layers, 2);
  EXPECT_EQ(o.training.recompute.every, 0);
  EXPECT_TRUE(o.training.recompute.vision);
  EXPECT_EQ(o.training.recompute.pipeline_stages, 2);
  EXPECT_EQ(error_of(model + "[training]\nrecompute = \"block\"\n"),
            plugin_path() +
                ":4:13: key 'training.recompute': unknown recompute policy 'block' (expected one of \"none\", "
                "\"full\", \"full_early_stop\", \"selective\", \"op\")");
  EXPECT_EQ(error_of(model + "[training]\nrecompute_every = 2\n"),
            plugin_path() +
                ":3:1: table [training]: training.recompute_every without a recompute policy: set "
                "training.recompute to \"full\", \"full_early_stop\", \"selective\" or \"op\"");
  EXPECT_EQ(error_of(model + "[training]\nrecompute = \"op\"\nrecompute_every = -1\n")
                .find(plugin_path() + ":5:19: key 'training.recompute_every'"),
            0u);
}

}  // namespace flopmeter
