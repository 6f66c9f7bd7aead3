// plugin/config/model_toml.cpp — the model TOML loader (parse_model_spec, flopmeter/model_config.h). The rules of
// a model_spec live in spec_rules.cpp (one set, shared with the config.json loader in hf_config.cpp); the
// generic TOML parts (syntax errors, locations, unknown keys, typed getters) in toml_reader.h, shared with
// the plugin config loader.
//
// Messages cite FILE:LINE:COL and the key path, e.g. "m.toml:6:15: key 'text_config.hidden_size': must be > 0
// (got 0)".
//
// Reading order (so the most useful error comes first): the pre-scan of the text (toml_reader.h), unknown
// keys in every table, [model], then the rules of spec_rules.cpp: types and presence, each field's bounds,
// the cross-field invariants; [flopmeter] last.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <toml++/toml.h>

#include "flopmeter/array_view.h"
#include "flopmeter/error.h"
#include "flopmeter/model_config.h"
#include "families/families.h"
#include "families/vlm_families.h"
#include "util/printable_text.h"
#include "families/spec_rules.h"
#include "config/toml_reader.h"

namespace flopmeter {
namespace {

// Keys of each table, in SCHEMA.md order. The unknown-key check is the TOML loader's own (config.json
// carries many fields that do not change FLOPs, which its loader ignores). [text_config] and [vision_config]
// allow exactly the fields the model type's adapter reads; [model] and [flopmeter] are the TOML format's own.
constexpr std::string_view kRootKeys[] = {"model", "text_config", "vision_config", "flopmeter"};
constexpr std::string_view kModelKeys[] = {"name", "hf_model", "model_type"};
constexpr std::string_view kFlopmeterKeys[] = {"train_mtp_layers"};

// The keys of the Qwen3-VL adapters (the decoder's table, the same on every Qwen type, and the vision tower's):
// the keys of a file whose model type is not known yet, and of a vision table on a text-only type (refused by
// the rules with a reason rather than as an unknown key), and the hints for a key written at the top level.
const std::vector<std::string_view>& text_keys() {
  static const std::vector<std::string_view> keys = [] {
    std::vector<std::string_view> all;
    for (const detail::family_field& field : detail::find_decoder("qwen3_vl")->fields) {
      if (field.in_toml) all.push_back(field.key);
    }
    return all;
  }();
  return keys;
}

const std::vector<std::string_view>& vision_keys() {
  static const std::vector<std::string_view> keys = [] {
    std::vector<std::string_view> all;
    constexpr std::string_view prefix = "vision_config.";
    for (const detail::vlm_field& field : detail::find_vlm_family("qwen3_vl")->fields) {
      all.push_back(field.path.substr(prefix.size()));
    }
    return all;
  }();
  return keys;
}

// Where a key written at the top level belongs (for "did you mean 'model.model_type' in table [model]?").
const std::vector<detail::key_home>& homes() {
  static const std::vector<detail::key_home> table = {{"model", kModelKeys},
                                                      {"text_config", text_keys()},
                                                      {"vision_config", vision_keys()},
                                                      {"flopmeter", kFlopmeterKeys}};
  return table;
}

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
  toml_fields(std::string source_name, const toml::table& root) : toml_reader(std::move(source_name)), root_(root) {}

  bool has_table(std::string_view table) const override { return optional_table(root_, table) != nullptr; }
  bool has(std::string_view path) const override { return node(path) != nullptr; }
  std::int64_t integer(std::string_view path) const override {
    return int_value(*node(path), std::string(path),
                     {std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()});
  }
  bool boolean(std::string_view path) const override { return bool_value(*node(path), std::string(path)); }
  // TOML has no null: a nullable field (a family's sliding_window, q_lora_rank) is written "none".
  bool is_null(std::string_view path) const override {
    const toml::node* value = node(path);
    return value != nullptr && value->is_string() && value->as_string()->get() == "none";
  }
  std::string string(std::string_view path) const override { return string_value(*node(path), std::string(path)); }
  std::size_t array_size(std::string_view path) const override {
    const toml::node& value = *node(path);
    if (!value.is_array()) fail_type(value, std::string(path), "an array");
    return value.as_array()->size();
  }
  double number(std::string_view path) const override {
    return double_value(*node(path), std::string(path), detail::double_bounds{});
  }
  bool is_array(std::string_view path) const override { return node(path) != nullptr && node(path)->is_array(); }
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
    // A vision-language family's wrapper keys (InternVL's downsample_ratio, Gemma 3's mm_tokens_per_image) sit at
    // the top level, as in its config.json.
    const detail::vlm_family* vlm = nullptr;
    if (const toml::table* m = root.get_as<toml::table>("model")) {
      const toml::node* t = m->get("model_type");
      if (t != nullptr && t->is_string()) vlm = detail::find_vlm_family(t->as_string()->get());
    }
    std::vector<std::string_view> root_keys(std::begin(kRootKeys), std::end(kRootKeys));
    std::vector<std::string_view> vlm_vision_keys;
    if (vlm != nullptr) {
      for (const detail::vlm_field& f : vlm->fields) {
        const std::string_view prefix = "vision_config.";
        if (f.path.substr(0, prefix.size()) == prefix) {
          vlm_vision_keys.push_back(f.path.substr(prefix.size()));
        } else {
          root_keys.push_back(f.path);
        }
      }
    }
    check_keys(root, "", root_keys, kSchemaDoc, homes());
    const toml::table* model = optional_table(root, "model");
    const toml::table* text = optional_table(root, "text_config");
    const toml::table* vision = optional_table(root, "vision_config");
    const toml::table* options = optional_table(root, "flopmeter");
    if (model == nullptr) fail_at(root.source(), "required table [model] is missing");
    if (text == nullptr) fail_at(root.source(), "required table [text_config] is missing");
    check_keys(*model, "model", kModelKeys, kSchemaDoc);
    // [text_config]'s keys are the model type's: its family adapter's field table.
    const toml::node* type_node = model->get("model_type");
    const detail::family_adapter* family =
        type_node != nullptr && type_node->is_string() ? detail::find_family(type_node->as_string()->get()) : nullptr;
    if (vlm != nullptr) {
      // The decoder's family: fixed by the model type, or named by text_config.model_type (InternVL).
      std::string decoder(vlm->decoder);
      const toml::node* decoder_node = text->get("model_type");
      if (decoder.empty() && decoder_node != nullptr && decoder_node->is_string()) {
        decoder = decoder_node->as_string()->get();
      }
      family = vlm->decoder.empty() ? detail::find_family(decoder) : detail::find_decoder(decoder);
      if (family != nullptr && vlm->decoder.empty() && family->check != nullptr) family = nullptr;  // as decoder_of
    }
    if (family != nullptr) {
      std::vector<std::string_view> keys;
      for (const detail::family_field& field : family->fields) {
        if (field.in_toml) keys.push_back(field.key);
      }
      if (vlm != nullptr && family->field("model_type") == nullptr) keys.push_back("model_type");
      check_keys(*text, "text_config", keys, kSchemaDoc);
    } else if (vlm == nullptr) {
      check_keys(*text, "text_config", text_keys(), kSchemaDoc);
    }
    if (vision != nullptr)
      check_keys(*vision, "vision_config", vlm != nullptr ? vlm_vision_keys : vision_keys(), kSchemaDoc);
    if (options != nullptr) check_keys(*options, "flopmeter", kFlopmeterKeys, kSchemaDoc);

    std::optional<std::string> name = optional_string(*model, "model", "name");
    if (name && name->empty()) fail_key(*model->get("name"), "model.name", "must not be empty");
    (void)optional_string(*model, "model", "hf_model");  // documentation only; type-checked
    const std::string model_type = required_string(*model, "model", "model_type");
    if (!detail::is_supported_model_type(model_type)) {
      fail_key(
          *model->get("model_type"), "model.model_type",
          "unknown model type " + in_quotes(model_type) + " (supported: " + detail::supported_model_types_text() + ")");
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

}  // namespace

model_spec parse_model_spec(const std::string& toml_text, const std::string& source_name) {
  const toml::table root = detail::parse_toml(toml_text, source_name);
  model_spec spec = spec_loader(source_name).load(root);
  spec.source_path = source_name;
  return spec;
}

}  // namespace flopmeter
