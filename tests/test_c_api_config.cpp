// The C ABI's typed configuration builder (flopmeter/c_api_config.h) and a refusal's reason
// (flopmeter_on_microbatch_ex): the builder and a plugin TOML file go through one reader, so every bad value
// is refused by both with the same message, cited by key path alone when it was set in code and by
// file:line:col when a file wrote it.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <unistd.h>
#include <vector>

#include "flopmeter/c_api.h"

namespace {

namespace fs = std::filesystem;

const std::string kModel = FLOPMETER_SOURCE_DIR "/model_configs/qwen3_vl_2b.toml";

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("flopmeter_c_api_config_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

// The plugin config every case starts from (a valid one): as TOML literals, table -> key -> literal.
using tables = std::map<std::string, std::map<std::string, std::string>>;
tables base_tables() {
  return {{"model", {{"config", "\"" + kModel + "\""}}},
          {"peak", {{"tflops_per_gpu", "100.0"}}},
          {"sinks", {{"console", "false"}}}};
}

std::string toml_text(const tables& t) {
  std::string text;
  for (const auto& [table, keys] : t) {
    text += "[" + table + "]\n";
    for (const auto& [key, literal] : keys) text += key + " = " + literal + "\n";
  }
  return text;
}

// The base configuration set through the builder.
struct config {
  flopmeter_config* cfg = flopmeter_config_new();
  char error[1024] = {};
  config() {
    EXPECT_EQ(flopmeter_config_set_string(cfg, "model.config", kModel.c_str(), error, sizeof error), FLOPMETER_OK);
    EXPECT_EQ(flopmeter_config_set_double(cfg, "peak.tflops_per_gpu", 100.0, error, sizeof error), FLOPMETER_OK);
    EXPECT_EQ(flopmeter_config_set_bool(cfg, "sinks.console", 0, error, sizeof error), FLOPMETER_OK);
  }
  ~config() { flopmeter_config_destroy(cfg); }
  // create's message ("" when it made a plugin, which is destroyed).
  std::string create_error() {
    error[0] = '\0';
    flopmeter_plugin* plugin = flopmeter_create_from_config(cfg, nullptr, error, sizeof error);
    if (plugin == nullptr) return error;
    flopmeter_destroy(plugin);
    return "";
  }
};

// A bad value of one key: its TOML literal and the same value through the typed setter.
struct bad_value {
  const char* key;
  std::string literal;
  std::function<int(flopmeter_config*, const char*, char*, size_t)> set;
  const char* expected;  // the problem as both report it (hand-written from the schema's bounds and names)
};

std::function<int(flopmeter_config*, const char*, char*, size_t)> as_int(int64_t v) {
  return [v](flopmeter_config* c, const char* k, char* e, size_t n) { return flopmeter_config_set_int(c, k, v, e, n); };
}
std::function<int(flopmeter_config*, const char*, char*, size_t)> as_double(double v) {
  return
      [v](flopmeter_config* c, const char* k, char* e, size_t n) { return flopmeter_config_set_double(c, k, v, e, n); };
}
std::function<int(flopmeter_config*, const char*, char*, size_t)> as_string(std::string v) {
  return [v](flopmeter_config* c, const char* k, char* e, size_t n) {
    return flopmeter_config_set_string(c, k, v.c_str(), e, n);
  };
}
std::function<int(flopmeter_config*, const char*, char*, size_t)> as_list(std::vector<std::string> v) {
  return [v](flopmeter_config* c, const char* k, char* e, size_t n) {
    std::vector<const char*> p;
    for (const std::string& s : v) p.push_back(s.c_str());
    return flopmeter_config_set_string_list(c, k, p.data(), p.size(), e, n);
  };
}

// Every key of plugin_configs/SCHEMA.md that takes a bounded or named value, with one value it refuses.
const bad_value kBadValues[] = {
    {"model.scope", "\"all\"", as_string("all"), "unknown FLOP scope 'all'"},
    {"model.sanity_check", "1", as_int(1), "expected a boolean, got integer"},
    {"model.train_mtp_layers", "\"yes\"", as_string("yes"), "expected a boolean, got string"},
    {"training.frozen", "[\"vision\", \"vision\"]", as_list({"vision", "vision"}), "part 'vision' is named twice"},
    {"training.lora_rank", "-1", as_int(-1), "must be >= 0 (got -1)"},
    {"training.lora_targets", "[\"x_proj\"]", as_list({"x_proj"}), "unknown LoRA target 'x_proj'"},
    {"training.recompute", "\"partial\"", as_string("partial"), "unknown recompute policy 'partial'"},
    {"training.recompute_layers", "-2", as_int(-2), "must be >= 0 (got -2)"},
    {"training.recompute_every", "-3", as_int(-3), "must be >= 0 (got -3)"},
    {"training.recompute_vision", "\"no\"", as_string("no"), "expected a boolean, got string"},
    {"peak.gpu", "\"\"", as_string(""), "must not be empty"},
    {"peak.tflops_per_gpu", "-1.0", as_double(-1.0), "must be >"},
    {"peak.precision", "\"fp16\"", as_string("fp16"), "unknown precision 'fp16'"},
    {"parallel.tp", "0", as_int(0), "must be > 0 (got 0)"},
    {"parallel.cp", "-1", as_int(-1), "must be > 0 (got -1)"},
    {"parallel.pp", "2097152", as_int(2097152), "too large: must be <= 2^20 = 1048576 (got 2097152)"},
    {"parallel.tp", "2.5", as_double(2.5), "expected an integer, got floating-point"},
    {"parallel.order", "\"tp-xx\"", as_string("tp-xx"), ""},
    {"logging.log_interval_steps", "0", as_int(0), "must be > 0 (got 0)"},
    {"logging.tpi_multiplier", "0.0", as_double(0.0), "must be >"},
    {"logging.topk", "-1", as_int(-1), "(got -1)"},
    {"logging.topk_interval_logs", "-1", as_int(-1), "must be >= 0 (got -1)"},
    {"logging.emit", "\"some\"", as_string("some"), "unknown emit mode 'some'"},
    {"logging.collective_timeout_ms", "-5", as_int(-5), "(got -5)"},
    {"logging.rendezvous_timeout_ms", "0", as_int(0), "(got 0)"},
    {"logging.small_allreduce", "\"ring\"", as_string("ring"), "unknown small_allreduce 'ring'"},
    {"sinks.console", "\"off\"", as_string("off"), "expected a boolean, got string"},
    {"sinks.jsonl", "\"\"", as_string(""), "must not be empty"},
    {"sinks.tensorboard", "\"\"", as_string(""), "must not be empty"},
    {"model.config", "\"\"", as_string(""), "must not be empty"},
};

// "FILE:LINE:COL: key 'K': WHAT" -> "key 'K': WHAT".
std::string without_location(const std::string& message, const std::string& file) {
  const std::string prefix = file + ":";
  if (message.rfind(prefix, 0) != 0) return message;
  const std::size_t key = message.find(": key '");
  return key == std::string::npos ? message : message.substr(key + 2);
}

TEST(c_api_config, the_builder_and_a_plugin_file_refuse_the_same_values_with_the_same_message) {
  for (const bad_value& bad : kBadValues) {
    SCOPED_TRACE(std::string(bad.key) + " = " + bad.literal);
    const std::string dot = bad.key;
    const std::string table = dot.substr(0, dot.find('.')), key = dot.substr(dot.find('.') + 1);
    tables t = base_tables();
    t[table][key] = bad.literal;
    const fs::path file = scratch("plugin.toml");
    std::ofstream(file) << toml_text(t);
    char file_error[1024] = {};
    flopmeter_plugin* from_file = flopmeter_create(file.c_str(), nullptr, file_error, sizeof file_error);
    if (from_file != nullptr) flopmeter_destroy(from_file);
    ASSERT_EQ(from_file, nullptr);
    const std::string file_message = file_error;
    // The file's message cites the file with a line and column, and the key.
    EXPECT_EQ(file_message.rfind(file.string() + ":", 0), 0u) << file_message;

    config built;
    ASSERT_EQ(bad.set(built.cfg, bad.key, built.error, sizeof built.error), FLOPMETER_OK) << built.error;
    const std::string built_message = built.create_error();
    ASSERT_FALSE(built_message.empty());
    // Set in code: the key path, never a file, line or column.
    EXPECT_EQ(built_message.rfind("key '" + dot, 0), 0u) << built_message;
    EXPECT_EQ(built_message.find(".toml"), std::string::npos) << built_message;
    EXPECT_NE(built_message.find(bad.expected), std::string::npos) << built_message;
    EXPECT_NE(file_message.find(bad.expected), std::string::npos) << file_message;
    // The same rule: the same message, but for where (a type error set in code also shows the value).
    const std::string file_without = without_location(file_message, file.string());
    EXPECT_EQ(built_message.substr(0, file_without.size()), file_without);
  }
}

TEST(c_api_config, a_value_set_in_code_is_reported_with_the_value_and_no_line) {
  config built;
  ASSERT_EQ(flopmeter_config_set_int(built.cfg, "parallel.tp", 0, built.error, sizeof built.error), FLOPMETER_OK);
  EXPECT_EQ(built.create_error(), "key 'parallel.tp': must be > 0 (got 0)");
  ASSERT_EQ(flopmeter_config_set_double(built.cfg, "parallel.tp", 2.5, built.error, sizeof built.error), FLOPMETER_OK);
  EXPECT_EQ(built.create_error(), "key 'parallel.tp': expected an integer, got floating-point 2.5");
  ASSERT_EQ(flopmeter_config_set_string(built.cfg, "parallel.tp", "2", built.error, sizeof built.error), FLOPMETER_OK);
  EXPECT_EQ(built.create_error(), "key 'parallel.tp': expected an integer, got string \"2\"");
}

TEST(c_api_config, unknown_keys_and_bad_arguments_are_refused_by_the_setter) {
  config built;
  char* e = built.error;
  EXPECT_EQ(flopmeter_config_set_int(built.cfg, "parallel.tpx", 2, e, sizeof built.error), FLOPMETER_E_REJECTED);
  EXPECT_STREQ(e, "unknown key 'parallel.tpx' (did you mean 'parallel.tp'?)");
  EXPECT_EQ(flopmeter_config_set_int(built.cfg, "paralel.tp", 2, e, sizeof built.error), FLOPMETER_E_REJECTED);
  EXPECT_STREQ(e, "unknown key 'paralel' (did you mean 'parallel'?)");
  EXPECT_EQ(flopmeter_config_set_int(built.cfg, "parallel", 2, e, sizeof built.error), FLOPMETER_E_REJECTED);
  EXPECT_NE(std::string(e).find("key 'parallel': not a key path"), std::string::npos) << e;
  EXPECT_EQ(flopmeter_config_set_double(built.cfg, "peak.tflops_per_gpu", 1.0 / 0.0, e, sizeof built.error),
            FLOPMETER_E_REJECTED);
  EXPECT_STREQ(e, "key 'peak.tflops_per_gpu': must be finite (got inf)");
  EXPECT_EQ(flopmeter_config_set_int(nullptr, "parallel.tp", 2, e, sizeof built.error), FLOPMETER_E_NULL_ARGUMENT);
  EXPECT_EQ(flopmeter_config_set_string(built.cfg, "peak.gpu", nullptr, e, sizeof built.error),
            FLOPMETER_E_NULL_ARGUMENT);
  EXPECT_EQ(flopmeter_config_set_string_list(built.cfg, "training.frozen", nullptr, 1, e, sizeof built.error),
            FLOPMETER_E_NULL_ARGUMENT);
  EXPECT_EQ(flopmeter_create_from_config(nullptr, nullptr, e, sizeof built.error), nullptr);
  flopmeter_config_destroy(nullptr);  // allowed, does nothing
  // Refused setters left the configuration as it was: it still makes a plugin.
  EXPECT_EQ(built.create_error(), "");
}

TEST(c_api_config, a_missing_model_is_reported_without_a_location) {
  flopmeter_config* cfg = flopmeter_config_new();
  char error[512] = {};
  EXPECT_EQ(flopmeter_create_from_config(cfg, nullptr, error, sizeof error), nullptr);
  EXPECT_STREQ(error, "required table [model] is missing");
  flopmeter_config_destroy(cfg);
}

TEST(c_api_config, a_loaded_file_keeps_its_locations_and_setters_override_its_keys) {
  tables t = base_tables();
  t["parallel"]["tp"] = "0";
  t["logging"]["small_allreduce"] = "\"log_depth\"";
  const fs::path file = scratch("loaded.toml");
  std::ofstream(file) << toml_text(t);
  config built;
  ASSERT_EQ(flopmeter_config_load_file(built.cfg, file.c_str(), built.error, sizeof built.error), FLOPMETER_OK);
  int algorithm = -1;
  ASSERT_EQ(flopmeter_config_small_allreduce(built.cfg, &algorithm, built.error, sizeof built.error), FLOPMETER_OK);
  EXPECT_EQ(algorithm, FLOPMETER_SMALL_ALLREDUCE_LOG_DEPTH);
  // toml_text writes the tables in name order: [logging] (lines 1-2), [model] (3-4), [parallel] (5-6): tp at 6:1.
  EXPECT_EQ(built.create_error(), file.string() + ":6:6: key 'parallel.tp': must be > 0 (got 0)");
  ASSERT_EQ(flopmeter_config_set_int(built.cfg, "parallel.tp", 1, built.error, sizeof built.error), FLOPMETER_OK);
  EXPECT_EQ(built.create_error(), "");
  ASSERT_EQ(flopmeter_config_set_string(built.cfg, "logging.small_allreduce", "ring", built.error, sizeof built.error),
            FLOPMETER_OK);
  EXPECT_EQ(flopmeter_config_small_allreduce(built.cfg, &algorithm, built.error, sizeof built.error),
            FLOPMETER_E_REJECTED);
  EXPECT_NE(std::string(built.error).find("key 'logging.small_allreduce': unknown small_allreduce 'ring'"),
            std::string::npos)
      << built.error;
  EXPECT_EQ(flopmeter_config_load_file(built.cfg, scratch("missing.toml").c_str(), built.error, sizeof built.error),
            FLOPMETER_E_REJECTED);
  EXPECT_NE(std::string(built.error).find("missing.toml"), std::string::npos) << built.error;
}

TEST(c_api_config, an_empty_configuration_uses_the_automatic_collectives) {
  flopmeter_config* cfg = flopmeter_config_new();
  int algorithm = -1;
  char error[256] = {};
  EXPECT_EQ(flopmeter_config_small_allreduce(cfg, &algorithm, error, sizeof error), FLOPMETER_OK);
  EXPECT_EQ(algorithm, FLOPMETER_SMALL_ALLREDUCE_AUTOMATIC);
  flopmeter_config_destroy(cfg);
}

// ---- flopmeter_on_microbatch_ex: a refusal carries its reason ----

TEST(c_api_refusal, a_rejected_microbatch_says_why_and_is_counted_once) {
  config built;
  char error[512] = {};
  flopmeter_plugin* plugin = flopmeter_create_from_config(built.cfg, nullptr, error, sizeof error);
  ASSERT_NE(plugin, nullptr) << error;
  // cu_seqlens must start at 0; this one starts at 3 (the reason names the entry and the value).
  const int64_t cu_seqlens[] = {3, 10, 20};
  flopmeter_microbatch mb{};
  mb.struct_size = sizeof mb;
  mb.cu_seqlens = cu_seqlens;
  mb.num_cu_seqlens = 3;
  char why[256];
  std::memset(why, 'x', sizeof why);
  EXPECT_EQ(flopmeter_on_microbatch_ex(plugin, &mb, why, sizeof why), FLOPMETER_E_REJECTED);
  EXPECT_NE(std::string(why).find("cu_seqlens[0] must be 0 (got 3)"), std::string::npos) << why;
  // label_tokens above the 20 real tokens of [0, 10, 20].
  const int64_t good[] = {0, 10, 20};
  mb.cu_seqlens = good;
  mb.has_loss = 1;
  mb.loss_sum = 1.0;
  mb.label_tokens = 21;
  EXPECT_EQ(flopmeter_on_microbatch_ex(plugin, &mb, why, sizeof why), FLOPMETER_E_REJECTED);
  EXPECT_NE(std::string(why).find("label_tokens 21"), std::string::npos) << why;
  EXPECT_NE(std::string(why).find("20"), std::string::npos) << why;
  // A buffer too small: cut, NUL-terminated; size 0 or NULL: nothing written.
  char small[8];
  std::memset(small, 'x', sizeof small);
  EXPECT_EQ(flopmeter_on_microbatch_ex(plugin, &mb, small, sizeof small), FLOPMETER_E_REJECTED);
  EXPECT_EQ(std::strlen(small), 7u);
  EXPECT_EQ(std::string(small), std::string(why).substr(0, 7));
  char untouched[4] = {'a', 'b', 'c', 'd'};
  EXPECT_EQ(flopmeter_on_microbatch_ex(plugin, &mb, untouched, 0), FLOPMETER_E_REJECTED);
  EXPECT_EQ(untouched[0], 'a');
  EXPECT_EQ(flopmeter_on_microbatch_ex(plugin, &mb, nullptr, 64), FLOPMETER_E_REJECTED);
  // A valid one: FLOPMETER_OK and the buffer untouched.
  mb.label_tokens = 20;
  std::memset(why, 'y', sizeof why);
  EXPECT_EQ(flopmeter_on_microbatch_ex(plugin, &mb, why, sizeof why), FLOPMETER_OK);
  EXPECT_EQ(why[0], 'y');
  // A NULL array with a count: refused by the C ABI with its reason.
  mb.cu_seqlens = nullptr;
  EXPECT_EQ(flopmeter_on_microbatch_ex(plugin, &mb, why, sizeof why), FLOPMETER_E_REJECTED);
  EXPECT_STREQ(why, "an array pointer is NULL with a non-zero count");
  // Each refusal counted once: 6 calls refused above (5 by the counting, 1 by the C ABI).
  flopmeter_health_counters h{};
  h.struct_size = sizeof h;
  ASSERT_EQ(flopmeter_health(plugin, &h), FLOPMETER_OK);
  EXPECT_EQ(h.bad_microbatches, 6u);
  ASSERT_EQ(flopmeter_flush(plugin), FLOPMETER_OK);
  mb.cu_seqlens = good;
  EXPECT_EQ(flopmeter_on_microbatch_ex(plugin, &mb, why, sizeof why), FLOPMETER_E_AFTER_FLUSH);
  EXPECT_STREQ(why, flopmeter_status_string(FLOPMETER_E_AFTER_FLUSH));
  ASSERT_EQ(flopmeter_destroy(plugin), FLOPMETER_OK);
  EXPECT_EQ(flopmeter_on_microbatch_ex(plugin, &mb, why, sizeof why), FLOPMETER_E_INVALID_HANDLE);
  EXPECT_STREQ(why, flopmeter_status_string(FLOPMETER_E_INVALID_HANDLE));
  EXPECT_EQ(flopmeter_on_microbatch_ex(nullptr, &mb, why, sizeof why), FLOPMETER_E_NULL_ARGUMENT);
  EXPECT_STREQ(why, "the plugin handle is NULL");
}

TEST(c_api_refusal, the_flop_models_count_says_why_for_every_refusal) {
  char error[256] = {};
  flopmeter_model* model = flopmeter_model_load(kModel.c_str(), error, sizeof error);
  ASSERT_NE(model, nullptr) << error;
  // Document 1 of [4, -2] has a negative length.
  const int64_t lengths[] = {4, -2};
  flopmeter_microbatch mb{};
  mb.struct_size = sizeof mb;
  mb.document_lengths = lengths;
  mb.num_document_lengths = 2;
  flopmeter_counts counts{};
  counts.struct_size = sizeof counts;
  EXPECT_EQ(flopmeter_model_count(model, &mb, &counts, error, sizeof error), FLOPMETER_E_REJECTED);
  EXPECT_STREQ(error, "document_lengths[1]: document length must be >= 0 (got -2)");
  EXPECT_EQ(flopmeter_model_count(model, &mb, nullptr, error, sizeof error), FLOPMETER_E_NULL_ARGUMENT);
  EXPECT_STREQ(error, "out is NULL");
  counts.struct_size = 4;
  EXPECT_EQ(flopmeter_model_count(model, &mb, &counts, error, sizeof error), FLOPMETER_E_STRUCT_SIZE);
  EXPECT_STREQ(error, "flopmeter_counts.struct_size is below its first version");
  ASSERT_EQ(flopmeter_model_destroy(model), FLOPMETER_OK);
  counts.struct_size = sizeof counts;
  EXPECT_EQ(flopmeter_model_count(model, &mb, &counts, error, sizeof error), FLOPMETER_E_INVALID_HANDLE);
  EXPECT_STREQ(error, "not a live model (destroyed already, or never loaded)");
}

}  // namespace
