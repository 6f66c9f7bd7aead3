// plugin/accounting/throughput_config.cpp — the plugin TOML loader: load_plugin_config() (schema in
// plugin_configs/SCHEMA.md).
//
// Every problem throws flopmeter::error citing FILE:LINE:COL and the key path (formats in toml_reader.h),
// e.g. "plugin.toml:14:8: key 'logging.topk': must be >= 0 (got -1)". The model file named by model.config
// is read with load_model_spec(); an error inside it propagates unchanged (it names the model file's line
// and column), one that stops the file from being read at all (missing, unreadable, a directory without a
// config.json, this plugin file itself) is reported at model.config in the plugin file.
//
// Reading order (so the most useful error comes first): unknown keys in every table, then [model], [peak],
// [parallel], [logging], [sinks], keys in SCHEMA.md order; the model file is loaded last, once this file is
// known to be valid. What needs the world size (the layout dividing it, the rank order's meaning) and the
// GPU name lookup are checked when the plugin starts, not here.

#include <chrono>
#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include <toml++/toml.h>

#include "flopmeter/error.h"
#include "flopmeter/flop_model.h"
#include "flopmeter/layout.h"
#include "flopmeter/model_config.h"
#include "flopmeter/peak_table.h"
#include "flopmeter/throughput.h"
#include "accounting/sanitize_options.h"
#include "accounting/plugin_document.h"
#include "accounting/throughput_config.h"
#include "families/spec_rules.h"
#include "config/toml_reader.h"

namespace flopmeter {
namespace {

// Keys of each table, in SCHEMA.md order.
constexpr std::string_view kRootKeys[] = {"model", "training", "peak", "parallel", "logging", "sinks"};
constexpr std::string_view kModelKeys[] = {"config", "scope", "sanity_check", "train_mtp_layers"};
constexpr std::string_view kTrainingKeys[] = {"frozen",           "lora_rank",        "lora_targets",
                                              "recompute",        "recompute_layers", "recompute_every",
                                              "recompute_vision", "indexer_trains"};
constexpr std::string_view kPeakKeys[] = {"gpu", "tflops_per_gpu", "precision"};
constexpr std::string_view kParallelKeys[] = {"tp", "cp", "pp", "order"};
constexpr std::string_view kLoggingKeys[] = {"log_interval_steps",    "tpi_multiplier", "topk",
                                             "topk_interval_logs",    "emit",           "collective_timeout_ms",
                                             "rendezvous_timeout_ms", "small_allreduce"};
constexpr std::string_view kSinksKeys[] = {"console", "jsonl", "tensorboard"};

// Where a key written at the top level belongs (for "did you mean 'parallel.tp' in table [parallel]?").
constexpr detail::key_home kHomes[] = {{"model", kModelKeys},       {"training", kTrainingKeys}, {"peak", kPeakKeys},
                                       {"parallel", kParallelKeys}, {"logging", kLoggingKeys},   {"sinks", kSinksKeys}};

constexpr std::string_view kSchemaDoc = "plugin_configs/SCHEMA.md";

// Bounds. Parallel sizes: 2^20 GPUs per dimension is beyond any job and catches typos. topk: rows per side
// of the top-k tables; more than 1024 is no longer a summary. Counts and milliseconds: the reader's 2^31.
constexpr detail::int_bounds kParallelSize{1, std::int64_t{1} << 20};
constexpr detail::int_bounds kTopk{detail::kMinTopk, detail::kMaxTopkInFile};
constexpr detail::int_bounds kPositive{1};
constexpr detail::int_bounds kNonNegative{0};
// Timeouts: at most an hour (setting_range::max_timeout_ms); a rendezvous needs a positive one.
constexpr detail::int_bounds kTimeoutMs{detail::kMinCollectiveTimeoutMs, setting_range::max_timeout_ms};
constexpr detail::int_bounds kRendezvousTimeoutMs{detail::kMinRendezvousTimeoutMs, setting_range::max_timeout_ms};

// A string from the file as shown between single quotes in a message: control characters escaped as
// detail::quoted writes them (\u001b), so a value cannot drive the terminal the message is printed on.
std::string escaped(std::string_view text) {
  const std::string shown = detail::quoted(text);
  return shown.substr(1, shown.size() - 2);
}

// A string key with a fixed set of values.
template <class T>
struct choice {
  const char* name;
  T value;
};

// Reads one parsed plugin document into throughput_options. One instance per document.
class options_loader : private detail::toml_reader {
 public:
  options_loader(std::string source_name, std::string base_dir)
      : toml_reader(std::move(source_name)), base_dir_(std::move(base_dir)) {}

  detail::plugin_file load(const toml::table& root) const {
    // A model config given where the plugin config goes (both are TOML): say so, not "unknown key".
    for (const char* model_table : {"text_config", "vision_config"}) {
      if (const toml::node* node = root.get(model_table)) {
        throw error(location(node->source(), model_table),
                    "this is a model config, not a plugin config: a plugin config names its model config in "
                    "[model] config = \"PATH\" (" +
                        std::string(kSchemaDoc) + ")");
      }
    }
    check_keys(root, "", kRootKeys, kSchemaDoc, kHomes);
    const toml::table* model = optional_table(root, "model");
    const toml::table* training = optional_table(root, "training");
    const toml::table* peak = optional_table(root, "peak");
    const toml::table* parallel = optional_table(root, "parallel");
    const toml::table* logging = optional_table(root, "logging");
    const toml::table* sinks = optional_table(root, "sinks");
    if (model == nullptr) fail_at(root.source(), "required table [model] is missing");
    check_keys(*model, "model", kModelKeys, kSchemaDoc);
    if (training != nullptr) check_keys(*training, "training", kTrainingKeys, kSchemaDoc);
    if (peak != nullptr) check_keys(*peak, "peak", kPeakKeys, kSchemaDoc);
    if (parallel != nullptr) check_keys(*parallel, "parallel", kParallelKeys, kSchemaDoc);
    if (logging != nullptr) check_keys(*logging, "logging", kLoggingKeys, kSchemaDoc);
    if (sinks != nullptr) check_keys(*sinks, "sinks", kSinksKeys, kSchemaDoc);

    detail::plugin_file file;
    plugin_config& config = file.config;
    throughput_options& options = config.options;
    const std::string model_path = model_config_path(*model);
    if (const toml::node* node = model->get("scope")) {
      options.scope = parse_flop_scope(string_value(*node, "model.scope"), location(node->source(), "model.scope"));
    }
    options.sanity_check = optional_bool(*model, "model", "sanity_check", false);
    const std::optional<bool> train_mtp_layers = optional_bool(*model, "model", "train_mtp_layers");
    if (training != nullptr) read_training(*training, options.training);
    if (peak != nullptr) read_peak(*peak, options);
    if (parallel != nullptr) {
      read_parallel(*parallel, options);
      // The layout is checked against the world at create (plugin_factory.cpp), which reports it here.
      file.parallel_at = location(parallel->source(), "parallel");
    }
    if (logging != nullptr) read_logging(*logging, options);
    if (logging != nullptr) {
      config.rendezvous_timeout = std::chrono::milliseconds(optional_int(
          *logging, "logging", "rendezvous_timeout_ms", kRendezvousTimeoutMs, config.rendezvous_timeout.count()));
      config.small_allreduce = read_logging_small_allreduce(*logging);
    }
    if (sinks != nullptr) read_sinks(*sinks, config.sinks, file.sinks_at);
    // The files this configuration comes from, which no sink may write into (make_sinks refuses them): this
    // file, and the model config (a file, or a checkpoint directory's config.json). Absolute now, like the
    // sink paths, so a later chdir() changes nothing.
    for (const std::string& path : {source_name(), model_path, model_path + "/config.json"}) {
      if (path.empty()) continue;  // a document built in code has no file
      std::error_code ec;
      const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
      file.sinks_at.config_files.push_back(ec ? path : absolute.string());
    }

    options.model = load_model(*model->get("config"), model_path);
    if (train_mtp_layers) options.model.train_mtp_layers = *train_mtp_layers;
    // recompute_layers counts per pipeline stage: the layout's pp says how many stages.
    options.training.recompute.pipeline_stages = options.parallel.pp;
    if (training != nullptr) {
      // Whether the regime fits the model (nothing trains, MoE experts as LoRA targets, ...): at [training].
      try {
        validate_training_regime(options.model, options.training);
      } catch (const error& e) {
        fail_at(training->source(), "table [training]: " + e.description());
      }
    }
    // The keys above were read against the bounds sanitize_options uses (a value outside is reported at its
    // line); the options as a whole pass the same check as create()'s, so a file never builds options that
    // create() refuses.
    detail::sanitize_options(options);
    return file;
  }

 private:
  // model.config, relative to base_dir_ (the plugin file's directory) unless absolute.
  std::string model_config_path(const toml::table& model) const {
    const std::string config = required_string(model, "model", "config");
    if (config.empty()) fail_key(*model.get("config"), "model.config", "must not be empty");
    const std::filesystem::path path(config);
    if (path.is_absolute()) return config;
    return (std::filesystem::path(base_dir_) / path).string();
  }

  // The model file model.config names. Its own errors keep their location (the model file's line and
  // column); a file that cannot be read at all is reported at model.config in this file, which is where the
  // user has to fix it. A model path that is this plugin file gets its own message.
  model_spec load_model(const toml::node& config, const std::string& model_path) const {
    std::error_code ec;
    if (std::filesystem::equivalent(model_path, source_name(), ec) && !ec) {
      fail_key(config, "model.config",
               "names this plugin config itself ('" + escaped(model_path) +
                   "'); it must name a model TOML file, a Hugging "
                   "Face config.json or a checkpoint directory");
    }
    try {
      return load_model_spec(model_path);
    } catch (const error& e) {
      if (e.where().line > 0) throw;  // a problem inside the model file: its own file:line:col says where
      fail_key(config, "model.config", std::string("cannot load the model: ") + e.what());
    }
  }

  // [training]: frozen = ["vision", "merger", "text"] (any subset), lora_rank, lora_targets, recompute (a
  // policy name), recompute_layers, recompute_every, recompute_vision, indexer_trains.
  void read_training(const toml::table& training, training_regime& regime) const {
    const auto strings = [&](const char* key, const auto& each) {
      const toml::node* node = training.get(key);
      if (node == nullptr) return;
      const std::string path = std::string("training.") + key;
      const toml::array* array = node->as_array();
      if (array == nullptr) fail_type(*node, path, "an array of strings");
      for (std::size_t i = 0; i < array->size(); ++i) {
        const toml::node& element = *array->get(i);
        const std::string element_path = path + "[" + std::to_string(i) + "]";
        each(element, element_path, string_value(element, element_path));
      }
    };
    strings("frozen", [&](const toml::node& element, const std::string& path, const std::string& part) {
      if (part != "vision" && part != "merger" && part != "text") {
        fail_key(element, path, "unknown part '" + escaped(part) + "' (expected \"vision\", \"merger\" or \"text\")");
      }
      const bool named = part == "vision"   ? regime.vision_frozen
                         : part == "merger" ? regime.merger_frozen
                                            : regime.text_frozen;
      if (named) fail_key(element, path, "part '" + part + "' is named twice");
      add_frozen_part(regime, part, path);
    });
    regime.lora_rank = optional_int(training, "training", "lora_rank", {0, std::int64_t{1} << 20}, 0);
    strings("lora_targets", [&](const toml::node& element, const std::string& path, const std::string& name) {
      try {
        regime.lora_targets.push_back(parse_lora_target(name, path));
      } catch (const error&) {
        std::string known;
        // Every LoRA target, in enum order (kv_b_proj is the last).
        for (unsigned t = 0; t <= static_cast<unsigned>(lora_target::kv_b_proj); ++t) {
          known += std::string(t == 0 ? "" : ", ") + to_string(static_cast<lora_target>(t));
        }
        fail_key(element, path, "unknown LoRA target '" + escaped(name) + "' (expected one of " + known + ")");
      }
    });
    recompute_options& recompute = regime.recompute;
    if (const toml::node* node = training.get("recompute")) {
      const std::string name = string_value(*node, "training.recompute");
      try {
        recompute.policy = parse_recompute_policy(name, "training.recompute");
      } catch (const error&) {
        fail_key(*node, "training.recompute",
                 "unknown recompute policy '" + escaped(name) +
                     "' (expected one of \"none\", \"full\", \"full_early_stop\", \"selective\", \"op\")");
      }
    }
    constexpr detail::int_bounds kLayers{0, std::int64_t{1} << 31};
    recompute.layers = optional_int(training, "training", "recompute_layers", kLayers, 0);
    recompute.every = optional_int(training, "training", "recompute_every", kLayers, 0);
    recompute.vision = optional_bool(training, "training", "recompute_vision", false);
    regime.indexer_trains = optional_bool(training, "training", "indexer_trains", false);
  }

  void read_peak(const toml::table& peak, throughput_options& options) const {
    if (auto gpu = optional_string(peak, "peak", "gpu")) {
      if (gpu->empty()) fail_key(*peak.get("gpu"), "peak.gpu", "must not be empty");
      // Unknown names are allowed: the plugin warns and skips MFU. "auto" (any case, is_auto_gpu) is kept as
      // written: the plugin reads the device's name when it starts (resolve_peak).
      options.gpu = std::move(*gpu);
    }
    options.peak_tflops_per_gpu =
        optional_double(peak, "peak", "tflops_per_gpu",
                        {setting_range::min_peak_tflops_per_gpu, detail::lower_bound::inclusive,
                         setting_range::max_peak_tflops_per_gpu});
    constexpr choice<peak_precision> precisions[] = {{"bf16", peak_precision::bf16}, {"fp8", peak_precision::fp8}};
    options.precision = optional_choice(peak, "peak", "precision", "precision", precisions, options.precision);
  }

  void read_parallel(const toml::table& parallel, throughput_options& options) const {
    constexpr std::string_view p = "parallel";
    options.parallel.tp = optional_int(parallel, p, "tp", kParallelSize, options.parallel.tp);
    options.parallel.cp = optional_int(parallel, p, "cp", kParallelSize, options.parallel.cp);
    options.parallel.pp = optional_int(parallel, p, "pp", kParallelSize, options.parallel.pp);
    if (const toml::node* node = parallel.get("order")) {
      options.rank_order = string_value(*node, "parallel.order");
      // parallel_layout owns the order's grammar; a world of 1 with sizes 1 checks only the order.
      try {
        (void)parallel_layout(parallel_sizes{}, 1, options.rank_order);
      } catch (const error& e) {
        fail_key(*node, "parallel.order", e.description());
      }
    }
  }

  void read_logging(const toml::table& logging, throughput_options& options) const {
    constexpr std::string_view p = "logging";
    // Checked, then ignored: the trainer decides when on_log fires (kept so that existing files still load).
    (void)optional_int(logging, p, "log_interval_steps", kPositive, 1);
    options.tpi_multiplier = optional_double(
        logging, p, "tpi_multiplier",
        {setting_range::min_tpi_multiplier, detail::lower_bound::inclusive, setting_range::max_tpi_multiplier},
        options.tpi_multiplier);
    options.topk = optional_int(logging, p, "topk", kTopk, options.topk);
    // 0: by the job's size (throughput.h); at most 2^31 like every count in a file.
    options.topk_interval_logs =
        optional_int(logging, p, "topk_interval_logs", kNonNegative, options.topk_interval_logs);
    constexpr choice<emit_ranks> emits[] = {{"rank0", emit_ranks::rank0}, {"all", emit_ranks::all}};
    options.emit = optional_choice(logging, p, "emit", "emit mode", emits, options.emit);
    options.collective_timeout = std::chrono::milliseconds(
        optional_int(logging, p, "collective_timeout_ms", kTimeoutMs, options.collective_timeout.count()));
  }

  void read_sinks(const toml::table& sinks, sink_config& config, detail::sink_provenance& provenance) const {
    config.console = optional_bool(sinks, "sinks", "console", config.console);
    // Each path keeps where it was written: make_sinks opens it when the plugin starts and reports a failure
    // there (file:line:col, key), which is where the user fixes it.
    if (auto jsonl = optional_string(sinks, "sinks", "jsonl")) {
      const toml::node& node = *sinks.get("jsonl");
      if (jsonl->empty()) fail_key(node, "sinks.jsonl", "must not be empty");
      config.jsonl_path = std::move(*jsonl);  // "{rank}" is substituted by make_sinks
      provenance.jsonl_at = location(node.source(), "sinks.jsonl");
    }
    if (auto tensorboard = optional_string(sinks, "sinks", "tensorboard")) {
      const toml::node& node = *sinks.get("tensorboard");
      if (tensorboard->empty()) fail_key(node, "sinks.tensorboard", "must not be empty");
      config.tensorboard_dir = std::move(*tensorboard);  // "{rank}" is substituted by make_sinks
      provenance.tensorboard_at = location(node.source(), "sinks.tensorboard");
    }
  }

  // The value of a string key that names one of `choices`, or `fallback` when absent. Errors read like
  // parse_flop_scope's: "unknown precision 'fp16' (expected "bf16" or "fp8")".
  template <class T, std::size_t N>
  T optional_choice(const toml::table& table, std::string_view path, std::string_view key, const char* what,
                    const choice<T> (&choices)[N], T fallback) const {
    const toml::node* node = table.get(key);
    if (node == nullptr) return fallback;
    const std::string key_path = detail::join(path, key);
    const std::string value = string_value(*node, key_path);
    std::string expected;
    for (std::size_t i = 0; i < N; ++i) {
      if (value == choices[i].name) return choices[i].value;
      if (i > 0) expected += i + 1 == N ? " or " : ", ";
      expected += "\"" + std::string(choices[i].name) + "\"";
    }
    fail_key(*node, key_path, std::string("unknown ") + what + " '" + escaped(value) + "' (expected " + expected + ")");
  }

  // [logging] small_allreduce, "automatic" when absent.
  small_allreduce read_logging_small_allreduce(const toml::table& logging) const {
    constexpr choice<small_allreduce> algorithms[] = {{"automatic", small_allreduce::automatic},
                                                      {"backend", small_allreduce::backend},
                                                      {"log_depth", small_allreduce::log_depth}};
    return optional_choice(logging, "logging", "small_allreduce", "small_allreduce", algorithms,
                           small_allreduce::automatic);
  }

  // Public, for the functions below the class.
 public:
  // The [logging] table's small_allreduce of a whole document (the key alone: nothing else is read).
  small_allreduce document_small_allreduce(const toml::table& root) const {
    const toml::node* logging = root.get("logging");
    if (logging == nullptr) return small_allreduce::automatic;
    if (!logging->is_table()) fail_type(*logging, "logging", "a table");
    return read_logging_small_allreduce(*logging->as_table());
  }

  // A key path set in code: "table.key" with both in the schema, refused with check_keys' message otherwise.
  void check_key_path(std::string_view key_path) const {
    const std::size_t dot = key_path.find('.');
    const std::string_view table = key_path.substr(0, dot);
    toml::table probe;
    probe.insert(std::string(table), true);
    check_keys(probe, "", kRootKeys, kSchemaDoc, kHomes);
    if (dot == std::string_view::npos || key_path.find('.', dot + 1) != std::string_view::npos) {
      throw error(error_location{"", 0, 0, std::string(key_path)},
                  "not a key path of the plugin config: give \"table.key\" (" + std::string(kSchemaDoc) + ")");
    }
    for (const detail::key_home& home : kHomes) {
      if (home.table != table) continue;
      toml::table keys;
      keys.insert(std::string(key_path.substr(dot + 1)), true);
      check_keys(keys, table, home.keys, kSchemaDoc);
    }
  }

 private:
  std::string base_dir_;
};

}  // namespace

namespace detail {

toml::table parse_plugin_document(const std::string& toml_text, const std::string& source_name) {
  // A JSON file (a Hugging Face config.json) given where the plugin config goes: say so, not "TOML syntax
  // error". TOML cannot start with '{'; the error points at it.
  const std::size_t first = toml_text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && toml_text[first] == '{') {
    const auto line_start = toml_text.rfind('\n', first);
    error_location at;
    at.file = source_name;
    at.line = static_cast<std::uint32_t>(
        std::count(toml_text.begin(), toml_text.begin() + static_cast<std::ptrdiff_t>(first), '\n') + 1);
    at.column = static_cast<std::uint32_t>(line_start == std::string::npos ? first + 1 : first - line_start);
    throw error(at,
                "this looks like JSON (a Hugging Face config.json?), not a plugin config: the plugin config is "
                "TOML and names the model's config.json or TOML in [model] config = \"PATH\" (" +
                    std::string(kSchemaDoc) + ")");
  }
  return parse_toml(toml_text, source_name);
}

plugin_file read_plugin_document(const toml::table& root, const std::string& source_name, const std::string& base_dir) {
  return options_loader(source_name, base_dir).load(root);
}

void check_plugin_key_path(std::string_view key_path) { options_loader("", "").check_key_path(key_path); }

small_allreduce read_small_allreduce(const toml::table& root, const std::string& source_name) {
  return options_loader(source_name, "").document_small_allreduce(root);
}

plugin_file parse_plugin_file(const std::string& toml_text, const std::string& source_name,
                              const std::string& base_dir) {
  return read_plugin_document(parse_plugin_document(toml_text, source_name), source_name, base_dir);
}

plugin_config parse_plugin_config(const std::string& toml_text, const std::string& source_name,
                                  const std::string& base_dir) {
  return parse_plugin_file(toml_text, source_name, base_dir).config;
}

throughput_options parse_throughput_options(const std::string& toml_text, const std::string& source_name,
                                            const std::string& base_dir) {
  return parse_plugin_config(toml_text, source_name, base_dir).options;
}

plugin_file load_plugin_file(const std::string& path) {
  return parse_plugin_file(read_file(path, "plugin config"), path, std::filesystem::path(path).parent_path().string());
}

}  // namespace detail

plugin_config load_plugin_config(const std::string& path) { return detail::load_plugin_file(path).config; }

throughput_options load_throughput_options(const std::string& path) { return load_plugin_config(path).options; }

}  // namespace flopmeter
