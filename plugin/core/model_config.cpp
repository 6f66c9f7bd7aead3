// plugin/core/model_config.cpp — the model TOML loader, the dispatch between the model file formats, and
// validate_model_spec(). The rules of a model_spec live in spec_rules.cpp (one set, shared with the
// config.json loader in hf_config.cpp); the generic TOML parts (file reading, syntax errors, locations,
// unknown keys, typed getters) in toml_reader.h, shared with the plugin config loader.
//
// Error tiers: every problem throws flopmeter::error. Messages from a file cite FILE:LINE:COL and the key
// path, e.g. "m.toml:6:15: key 'text_config.hidden_size': must be > 0 (got 0)". validate_model_spec() has no
// locations: its source is "model_spec 'NAME'" and its key the same field path.
//
// Reading order (so the most useful error comes first): the pre-scan of the text (toml_reader.h), unknown
// keys in every table, [model], then the rules of spec_rules.cpp: types and presence, each field's bounds,
// the cross-field invariants; [flopmeter] last.

#include "flopmeter/model_config.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <toml++/toml.h>

#include "flopmeter/error.h"
#include "core/hf_config.h"
#include "core/spec_rules.h"
#include "core/toml_reader.h"

namespace flopmeter {

// ---------------------------------------------------------------------------------------------------------
// model_spec's small methods

layer_kind text_spec::layer_type(std::int64_t index) const {
  return full_attention_interval <= 0 || (index + 1) % full_attention_interval == 0 ? layer_kind::full_attention
                                                                                    : layer_kind::linear_attention;
}

// Layers i in [0, L) with (i+1) % k == 0 are i+1 = k, 2k, ..., floor(L/k)*k: floor(L/k) of them.
std::int64_t text_spec::num_full_attention_layers() const {
  if (num_hidden_layers < 1) return 0;
  return full_attention_interval <= 0 ? num_hidden_layers : num_hidden_layers / full_attention_interval;
}

// Counted arithmetically (no per-layer storage): the stride gives num_hidden_layers / decoder_sparse_step MoE
// layers ((i+1) % step == 0 for i in [0, L)), less the distinct mlp_only_layers entries that sit on the stride.
std::int64_t text_spec::num_moe_layers() const {
  if (!is_moe() || decoder_sparse_step < 1 || num_hidden_layers < 1) return 0;
  std::int64_t count = num_hidden_layers / decoder_sparse_step;
  std::vector<std::int64_t> forced_dense = mlp_only_layers;
  std::sort(forced_dense.begin(), forced_dense.end());
  forced_dense.erase(std::unique(forced_dense.begin(), forced_dense.end()), forced_dense.end());
  for (const std::int64_t index : forced_dense) {
    if (index >= 0 && index < num_hidden_layers && (index + 1) % decoder_sparse_step == 0) --count;
  }
  return count;
}

std::int64_t vision_spec::patch_input_size() const {
  return in_channels * temporal_patch_size * patch_size * patch_size;
}

std::int64_t vision_spec::num_mergers() const {
  return 1 + static_cast<std::int64_t>(deepstack_visual_indexes.size());
}

namespace {

// Keys of each table, in SCHEMA.md order. The unknown-key check is the TOML loader's own (config.json
// carries many fields that do not change FLOPs, which its loader ignores).
constexpr std::string_view kRootKeys[] = {"model", "text_config", "vision_config", "flopmeter"};
constexpr std::string_view kModelKeys[] = {"name", "hf_model", "model_type"};
constexpr std::string_view kTextKeys[] = {
    "model_type",          "hidden_size",           "num_hidden_layers",      "num_attention_heads",
    "num_key_value_heads", "head_dim",              "intermediate_size",      "vocab_size",
    "tie_word_embeddings", "attn_output_gate",      "full_attention_interval", "layer_types",
    "linear_key_head_dim", "linear_value_head_dim", "linear_num_key_heads",   "linear_num_value_heads",
    "linear_conv_kernel_dim", "mtp_num_hidden_layers",
    // mixture of experts (qwen3_vl_moe, qwen3_5_moe only)
    "num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size",
    "decoder_sparse_step", "mlp_only_layers", "norm_topk_prob"};
constexpr std::string_view kVisionKeys[] = {
    "depth",          "hidden_size",              "num_heads",  "intermediate_size",
    "out_hidden_size", "deepstack_visual_indexes", "patch_size", "temporal_patch_size",
    "spatial_merge_size", "in_channels"};
constexpr std::string_view kFlopmeterKeys[] = {"train_mtp_layers"};

// Where a key written at the top level belongs (for "did you mean 'model.model_type' in table [model]?").
constexpr detail::key_home kHomes[] = {{"model", kModelKeys},
                                       {"text_config", kTextKeys},
                                       {"vision_config", kVisionKeys},
                                       {"flopmeter", kFlopmeterKeys}};

constexpr std::string_view kSchemaDoc = "model_configs/SCHEMA.md";

// Keys that mark a flopmeter plugin config (plugin/accounting/throughput_config.cpp), which users pass where
// a model config is expected: its top-level tables beside [model], and the keys of its [model] table.
constexpr std::string_view kPluginRootKeys[] = {"peak", "parallel", "logging", "sinks"};
constexpr std::string_view kPluginModelKeys[] = {"config", "scope", "sanity_check"};

std::string in_quotes(std::string_view text) { return detail::quoted(text); }

// A parsed model TOML seen through the rules' field paths ("text_config.layer_types[2]" is TOML++'s own
// path syntax, so at_path() resolves it).
class toml_fields final : public detail::field_reader, private detail::toml_reader {
 public:
  toml_fields(std::string source_name, const toml::table& root)
      : toml_reader(std::move(source_name)), root_(root) {}

  bool has_table(std::string_view table) const override { return optional_table(root_, table) != nullptr; }
  bool has(std::string_view path) const override { return node(path) != nullptr; }
  std::int64_t integer(std::string_view path) const override {
    return int_value(*node(path), std::string(path),
                     {std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()});
  }
  bool boolean(std::string_view path) const override { return bool_value(*node(path), std::string(path)); }
  std::string string(std::string_view path) const override { return string_value(*node(path), std::string(path)); }
  std::size_t array_size(std::string_view path) const override {
    const toml::node& value = *node(path);
    if (!value.is_array()) fail_type(value, std::string(path), "an array");
    return value.as_array()->size();
  }
  std::string model_type_path() const override { return "model.model_type"; }
  error_location where(std::string_view path) const override {
    // A path the document lacks (a default the rules found wrong) is cited at the nearest enclosing table.
    std::string_view at = path;
    while (!at.empty() && node(at) == nullptr) {
      const std::size_t cut = at.find_last_of(".[");
      at = cut == std::string_view::npos ? std::string_view{} : at.substr(0, cut);
    }
    const toml::node* found = at.empty() ? nullptr : node(at);
    return location(found != nullptr ? found->source() : root_.source(), std::string(path));
  }
  error_location where_missing(std::string_view table) const override {
    const toml::node* found = node(table);
    return location(found != nullptr ? found->source() : root_.source());
  }

 private:
  const toml::node* node(std::string_view path) const { return root_.at_path(path).node(); }

  const toml::table& root_;
};

// [model] and [flopmeter]: what only the TOML format has. The rest goes through the rules.
class spec_loader : private detail::toml_reader {
 public:
  explicit spec_loader(std::string source_name) : toml_reader(std::move(source_name)) {}

  model_spec load(const toml::table& root) const {
    refuse_plugin_config(root);
    check_keys(root, "", kRootKeys, kSchemaDoc, kHomes);
    const toml::table* model = optional_table(root, "model");
    const toml::table* text = optional_table(root, "text_config");
    const toml::table* vision = optional_table(root, "vision_config");
    const toml::table* options = optional_table(root, "flopmeter");
    if (model == nullptr) fail_at(root.source(), "required table [model] is missing");
    if (text == nullptr) fail_at(root.source(), "required table [text_config] is missing");
    check_keys(*model, "model", kModelKeys, kSchemaDoc);
    check_keys(*text, "text_config", kTextKeys, kSchemaDoc);
    if (vision != nullptr) check_keys(*vision, "vision_config", kVisionKeys, kSchemaDoc);
    if (options != nullptr) check_keys(*options, "flopmeter", kFlopmeterKeys, kSchemaDoc);

    std::optional<std::string> name = optional_string(*model, "model", "name");
    if (name && name->empty()) fail_key(*model->get("name"), "model.name", "must not be empty");
    (void)optional_string(*model, "model", "hf_model");  // documentation only; type-checked
    const std::string model_type = required_string(*model, "model", "model_type");
    if (!detail::is_supported_model_type(model_type)) {
      fail_key(*model->get("model_type"), "model.model_type",
               "unknown model type " + in_quotes(model_type) + " (supported: " + detail::supported_model_types_text() +
                   ")");
    }
    model_spec spec = detail::read_model_spec(toml_fields(source_name(), root), model_type);
    spec.name = name ? std::move(*name) : std::filesystem::path(source_name()).stem().string();
    if (options != nullptr) {
      spec.train_mtp_layers = optional_bool(*options, "flopmeter", "train_mtp_layers", false);
    }
    return spec;
  }

 private:
  // A plugin config given as a model config: said so, at its first plugin key, instead of "unknown key".
  void refuse_plugin_config(const toml::table& root) const {
    const auto refuse = [&](const toml::key& key, const std::string& path) {
      const std::string shown = detail::quoted(path);
      fail_at(key.source(), "unknown key '" + shown.substr(1, shown.size() - 2) +
                                "': this file looks like a flopmeter plugin config (top-level keys model, peak, "
                                "parallel, logging, sinks), but a model config is expected here: a model TOML with "
                                "[model], [text_config] and [vision_config] (see " +
                                std::string(kSchemaDoc) +
                                ") or a Hugging Face config.json; a plugin config names its model in [model] config");
    };
    for (auto&& [key, node] : root) {
      (void)node;
      for (const std::string_view marker : kPluginRootKeys) {
        if (key.str() == marker) refuse(key, std::string(marker));
      }
    }
    const toml::table* model = root.get_as<toml::table>("model");
    if (model == nullptr) return;
    for (auto&& [key, node] : *model) {
      (void)node;
      for (const std::string_view marker : kPluginModelKeys) {
        if (key.str() == marker) refuse(key, "model." + std::string(marker));
      }
    }
  }
};

// A file whose text starts with '{' (after whitespace or a UTF-8 byte order mark) is JSON: no TOML document
// can start so.
bool looks_like_json(const std::string& text) {
  std::size_t i = text.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
  while (i < text.size() && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r')) ++i;
  return i < text.size() && text[i] == '{';
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// Public functions

std::string detail::resolve_model_path(const std::string& path) {
  std::error_code ec;
  if (!path.empty() && std::filesystem::is_directory(path, ec)) {
    const std::filesystem::path config = std::filesystem::path(path) / "config.json";
    if (!std::filesystem::exists(config, ec)) {
      throw error(error_location{path, 0, 0, {}},
                  "cannot open model config: a directory without a config.json (name a model TOML file, a "
                  "Hugging Face config.json, or a checkpoint directory that holds one)");
    }
    return config.string();
  }
  return path;
}

model_spec load_model_spec(const std::string& path) {
  const std::string file = detail::resolve_model_path(path);
  const std::string text = detail::read_file(file, "model config");
  const bool json = std::filesystem::path(file).extension() == ".json" || looks_like_json(text);
  model_spec spec = json ? parse_hf_config(text, file) : parse_model_spec(text, file);
  spec.source_path = file;
  return spec;
}

model_spec parse_model_spec(const std::string& toml_text, const std::string& source_name) {
  const toml::table root = detail::parse_toml(toml_text, source_name);
  model_spec spec = spec_loader(source_name).load(root);
  spec.source_path = source_name;
  return spec;
}

void validate_model_spec(const model_spec& spec) {
  const std::string source = spec.name.empty() ? "model_spec" : "model_spec '" + spec.name + "'";
  std::optional<detail::spec_violation> violation = detail::check_fields(spec);
  if (!violation) violation = detail::check_invariants(spec);
  if (!violation) violation = detail::check_coefficients(spec);
  if (violation) throw error(error_location{source, 0, 0, violation->field}, violation->what);
}

}  // namespace flopmeter
