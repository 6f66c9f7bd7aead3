// plugin/core/model_config.cpp — the model TOML loader and the model_spec invariants. The generic TOML parts
// (file reading, syntax errors, locations, unknown keys, typed getters) live in toml_reader.h, shared with
// the plugin config loader (throughput_config.cpp).
//
// Error tiers: every problem throws flopmeter::error. Messages from a file cite FILE:LINE:COL and the key
// path (formats in toml_reader.h), e.g. "m.toml:6:15: key 'text_config.hidden_size': must be > 0 (got 0)".
// validate_model_spec() has no locations; its messages name the model_spec field ("text.hidden_size").
//
// Reading order (so the most useful error comes first): unknown keys in every table, then [model], then
// [text_config], [vision_config], [flopmeter]; within a table, keys in the order of model_configs/SCHEMA.md.

#include "flopmeter/model_config.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <iterator>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <toml++/toml.h>

#include "flopmeter/error.h"
#include "flopmeter/flop_model.h"
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

// Largest accepted size (2^31). Every size field is bounded by it so that the FLOP model's int64 products
// of a few sizes with token counts cannot overflow; no real model comes near it.
constexpr std::int64_t kMaxSize = std::int64_t{1} << 31;

constexpr std::string_view kQwen3Vl = "qwen3_vl";
constexpr std::string_view kQwen35 = "qwen3_5";
constexpr std::string_view kQwen3VlMoe = "qwen3_vl_moe";
constexpr std::string_view kQwen35Moe = "qwen3_5_moe";
constexpr std::string_view kSupportedTypes = R"("qwen3_vl", "qwen3_5", "qwen3_vl_moe", "qwen3_5_moe")";
constexpr std::string_view kFullAttention = "full_attention";
constexpr std::string_view kLinearAttention = "linear_attention";

// Keys of each table, in SCHEMA.md order.
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
// The MoE keys: an error on a dense model type (they would change the work in a way a dense model does not do).
constexpr std::string_view kMoeKeys[] = {"num_experts",          "num_experts_per_tok",
                                         "moe_intermediate_size", "shared_expert_intermediate_size",
                                         "decoder_sparse_step",  "mlp_only_layers",
                                         "norm_topk_prob"};
constexpr std::string_view kVisionKeys[] = {
    "depth",          "hidden_size",              "num_heads",  "intermediate_size",
    "out_hidden_size", "deepstack_visual_indexes", "patch_size", "temporal_patch_size",
    "spatial_merge_size", "in_channels"};
constexpr std::string_view kFlopmeterKeys[] = {"train_mtp_layers"};

bool is_known_type(std::string_view type) {
  return type == kQwen3Vl || type == kQwen35 || type == kQwen3VlMoe || type == kQwen35Moe;
}
// Qwen3.5 family: Gated DeltaNet layers with one full-attention layer every full_attention_interval.
bool is_hybrid_type(std::string_view type) { return type == kQwen35 || type == kQwen35Moe; }
bool is_moe_type(std::string_view type) { return type == kQwen3VlMoe || type == kQwen35Moe; }

// The text model_type that goes with a top-level model_type.
std::string expected_text_model_type(std::string_view model_type) {
  return std::string(model_type) + "_text";
}

std::string in_quotes(std::string_view text) { return "\"" + std::string(text) + "\""; }

// in_channels * temporal_patch_size * patch_size^2, or std::nullopt when it exceeds kMaxSize. Each factor is
// in [1, 2^31], so every partial product checked here fits in int64.
std::optional<std::int64_t> bounded_patch_input_size(const vision_spec& v) {
  std::int64_t product = 1;
  for (const std::int64_t factor : {v.in_channels, v.temporal_patch_size, v.patch_size, v.patch_size}) {
    product *= factor;
    if (product > kMaxSize) return std::nullopt;
  }
  return product;
}

// Where a key written at the top level belongs (for "did you mean 'model.model_type' in table [model]?").
constexpr detail::key_home kHomes[] = {{"model", kModelKeys},
                                       {"text_config", kTextKeys},
                                       {"vision_config", kVisionKeys},
                                       {"flopmeter", kFlopmeterKeys}};

constexpr std::string_view kSchemaDoc = "model_configs/SCHEMA.md";

// Reads one parsed document into a model_spec, checking as it goes. One instance per document.
class spec_loader : private detail::toml_reader {
 public:
  explicit spec_loader(std::string source_name) : toml_reader(std::move(source_name)) {}

  model_spec load(const toml::table& root) {
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

    model_spec spec;
    read_model(*model, spec);
    read_text(*text, spec);
    if (vision != nullptr) spec.vision = read_vision(*vision, spec.text);
    if (options != nullptr) {
      spec.train_mtp_layers = optional_bool(*options, "flopmeter", "train_mtp_layers", false);
    }
    check_coefficients(root, spec);
    return spec;
  }

 private:
  // A size: integer in [1, 2^31].
  std::int64_t required_size(const toml::table& table, std::string_view path, std::string_view key) const {
    return required_int(table, path, key, {1, kMaxSize});
  }

  // Every combination of sizes: each coefficient, and the sums reports form from them, must fit in int64 (the
  // FLOP model saturates instead of wrapping and names the fields of the product that is too large). The
  // error cites where the first of those fields is set, and names them all. MTP layers are counted as if
  // trained: a plugin config can turn that on.
  void check_coefficients(const toml::table& root, const model_spec& spec) const {
    model_spec trained = spec;
    trained.train_mtp_layers = true;
    try {
      (void)compute_coefficients(trained);
    } catch (const coefficient_overflow& e) {
      const toml::node* first = nullptr;
      std::string first_key;
      std::string keys;
      for (const std::string& field : e.fields()) {
        // model_spec paths "text.X" / "vision.X" are the TOML keys "text_config.X" / "vision_config.X".
        const bool vision = field.rfind("vision.", 0) == 0;
        const std::string key = field.substr(field.find('.') + 1);
        const std::string path = (vision ? "vision_config." : "text_config.") + key;
        keys += (keys.empty() ? "" : ", ") + path;
        const toml::table* table = root.get_as<toml::table>(vision ? "vision_config" : "text_config");
        if (first == nullptr && table != nullptr && table->get(key) != nullptr) {
          first = table->get(key);
          first_key = path;
        }
      }
      const std::string what = "coefficient " + e.coefficient() + " would exceed 2^63 FLOPs: the product of " + keys +
                               " is too large";
      if (first != nullptr) fail_key(*first, first_key, what);
      fail_at(root.source(), what);
    }
  }

  // --- tables --------------------------------------------------------------------------------------------

  void read_model(const toml::table& model, model_spec& spec) const {
    if (auto name = optional_string(model, "model", "name")) {
      if (name->empty()) fail_key(*model.get("name"), "model.name", "must not be empty");
      spec.name = std::move(*name);
    } else {
      spec.name = std::filesystem::path(source_name()).stem().string();
    }
    (void)optional_string(model, "model", "hf_model");  // documentation only; type-checked
    spec.model_type = required_string(model, "model", "model_type");
    if (!is_known_type(spec.model_type)) {
      fail_key(*model.get("model_type"), "model.model_type",
               "unknown model type " + in_quotes(spec.model_type) + " (supported: " + std::string(kSupportedTypes) + ")");
    }
  }

  void read_text(const toml::table& text, model_spec& spec) const {
    constexpr std::string_view p = "text_config";
    text_spec& t = spec.text;
    const bool hybrid = is_hybrid_type(spec.model_type);
    const bool moe = is_moe_type(spec.model_type);

    if (const toml::node* node = text.get("model_type")) {
      const std::string expected = expected_text_model_type(spec.model_type);
      const std::string value = string_value(*node, "text_config.model_type");
      if (value != expected) {
        fail_key(*node, "text_config.model_type",
                 "must be " + in_quotes(expected) + " for model.model_type " + in_quotes(spec.model_type) + " (got " +
                     in_quotes(value) + ")");
      }
    }
    t.hidden_size = required_size(text, p, "hidden_size");
    t.num_hidden_layers = required_size(text, p, "num_hidden_layers");
    t.num_attention_heads = required_size(text, p, "num_attention_heads");
    t.num_key_value_heads = required_size(text, p, "num_key_value_heads");
    if (t.num_attention_heads % t.num_key_value_heads != 0) {
      fail_key(*text.get("num_key_value_heads"), "text_config.num_key_value_heads",
               "must divide text_config.num_attention_heads = " + std::to_string(t.num_attention_heads) + " (got " +
                   std::to_string(t.num_key_value_heads) + ")");
    }
    t.head_dim = required_size(text, p, "head_dim");
    // An MoE model needs intermediate_size only for its dense layers (checked in read_moe).
    t.intermediate_size = moe ? optional_int(text, p, "intermediate_size", {1, kMaxSize}, 0)
                              : required_size(text, p, "intermediate_size");
    t.vocab_size = required_size(text, p, "vocab_size");
    t.tie_word_embeddings = required_bool(text, p, "tie_word_embeddings");
    t.attn_output_gate = optional_bool(text, p, "attn_output_gate", false);

    // Gated DeltaNet sizes and the interval: required for qwen3_5; for qwen3_vl type-checked and ignored.
    constexpr std::string_view linear_keys[] = {"linear_key_head_dim", "linear_value_head_dim",
                                                "linear_num_key_heads", "linear_num_value_heads",
                                                "linear_conv_kernel_dim"};
    std::int64_t* const linear_fields[] = {&t.linear_key_head_dim, &t.linear_value_head_dim,
                                           &t.linear_num_key_heads, &t.linear_num_value_heads,
                                           &t.linear_conv_kernel_dim};
    if (hybrid) {
      t.full_attention_interval = required_size(text, p, "full_attention_interval");
      for (std::size_t i = 0; i < std::size(linear_keys); ++i) {
        *linear_fields[i] = required_size(text, p, linear_keys[i]);
      }
      if (t.linear_num_value_heads % t.linear_num_key_heads != 0) {
        fail_key(*text.get("linear_num_value_heads"), "text_config.linear_num_value_heads",
                 "must be a multiple of text_config.linear_num_key_heads = " + std::to_string(t.linear_num_key_heads) +
                     " (got " + std::to_string(t.linear_num_value_heads) + ")");
      }
    } else {
      (void)optional_int(text, p, "full_attention_interval", {1, kMaxSize}, 0);
      for (const std::string_view key : linear_keys) (void)optional_int(text, p, key, {1, kMaxSize}, 0);
    }
    read_layer_types(text, spec);
    t.mtp_num_hidden_layers = optional_int(text, p, "mtp_num_hidden_layers", {0, kMaxSize}, 0);
    read_moe(text, spec);
  }

  // The mixture-of-experts fields: an error on a dense model type; required and cross-checked on an MoE one.
  void read_moe(const toml::table& text, model_spec& spec) const {
    constexpr std::string_view p = "text_config";
    text_spec& t = spec.text;
    const std::string type = in_quotes(spec.model_type);
    if (!is_moe_type(spec.model_type)) {
      for (const std::string_view key : kMoeKeys) {
        if (const toml::node* node = text.get(key)) {
          fail_key(*node, detail::join(p, key),
                   "not allowed for model_type " + type + ", a dense model (no experts); a mixture-of-experts "
                   "model has model_type " + in_quotes(spec.model_type + "_moe"));
        }
      }
      return;
    }
    const bool qwen35 = spec.model_type == kQwen35Moe;
    t.num_experts = required_size(text, p, "num_experts");
    t.num_experts_per_tok = required_size(text, p, "num_experts_per_tok");
    if (t.num_experts_per_tok > t.num_experts) {
      fail_key(*text.get("num_experts_per_tok"), "text_config.num_experts_per_tok",
               "must be <= text_config.num_experts = " + std::to_string(t.num_experts) + " (got " +
                   std::to_string(t.num_experts_per_tok) + ")");
    }
    t.moe_intermediate_size = required_size(text, p, "moe_intermediate_size");
    if (qwen35) {
      t.shared_expert_intermediate_size = required_size(text, p, "shared_expert_intermediate_size");
    } else if (const toml::node* node = text.get("shared_expert_intermediate_size")) {
      fail_key(*node, "text_config.shared_expert_intermediate_size",
               "not allowed for model_type " + type + ": Qwen3-VL MoE has no shared expert");
    }
    t.decoder_sparse_step = optional_int(text, p, "decoder_sparse_step", {1, kMaxSize}, 1);
    if (qwen35 && t.decoder_sparse_step != 1) {
      fail_key(*text.get("decoder_sparse_step"), "text_config.decoder_sparse_step",
               "must be 1 for model_type " + type + ": every Qwen3.5 MoE layer is an MoE block (got " +
                   std::to_string(t.decoder_sparse_step) + ")");
    }
    if (const toml::node* node = text.get("mlp_only_layers")) {
      if (!node->is_array()) fail_type(*node, "text_config.mlp_only_layers", "an array");
      const toml::array& array = *node->as_array();
      if (qwen35 && !array.empty()) {
        fail_key(*node, "text_config.mlp_only_layers",
                 "must be empty for model_type " + type + ": every Qwen3.5 MoE layer is an MoE block");
      }
      std::set<std::int64_t> seen;
      for (std::size_t i = 0; i < array.size(); ++i) {
        const std::string path = "text_config.mlp_only_layers[" + std::to_string(i) + "]";
        const std::int64_t index = int_value(array[i], path, {0, kMaxSize});
        if (index >= t.num_hidden_layers) {
          fail_key(array[i], path,
                   "must be a decoder layer index in [0, text_config.num_hidden_layers = " +
                       std::to_string(t.num_hidden_layers) + ") (got " + std::to_string(index) + ")");
        }
        if (!seen.insert(index).second) fail_key(array[i], path, "duplicate layer index " + std::to_string(index));
        t.mlp_only_layers.push_back(index);
      }
    }
    t.norm_topk_prob = optional_bool(text, p, "norm_topk_prob", true);
    if (t.num_moe_layers() == 0) {
      const char* key = text.get("mlp_only_layers") != nullptr ? "mlp_only_layers" : "decoder_sparse_step";
      fail_key(*text.get(key), detail::join(p, key),
               "no decoder layer would be an MoE block (decoder_sparse_step = " + std::to_string(t.decoder_sparse_step) +
                   ", num_hidden_layers = " + std::to_string(t.num_hidden_layers) + ")");
    }
    if (t.num_dense_mlp_layers() > 0 && t.intermediate_size == 0) {
      // The dense SwiGLU layers need their width: the standard "missing key" error, at [text_config].
      t.intermediate_size = required_size(text, p, "intermediate_size");
    }
  }

  // Checks an explicit `layer_types` array (optional, one entry per layer) against the layout that the model
  // type and interval give. Nothing is stored per layer.
  void read_layer_types(const toml::table& text, const model_spec& spec) const {
    const text_spec& t = spec.text;
    const bool hybrid = is_hybrid_type(spec.model_type);
    const std::int64_t interval = hybrid ? t.full_attention_interval : 1;
    const std::string layout = hybrid ? "inconsistent Qwen3.5 layer layout: " : "inconsistent Qwen3-VL layer layout: ";
    if (hybrid && interval > t.num_hidden_layers) {
      fail_key(*text.get("full_attention_interval"), "text_config.full_attention_interval",
               layout + "full_attention_interval = " + std::to_string(interval) + " exceeds num_hidden_layers = " +
                   std::to_string(t.num_hidden_layers) + ", so no layer would be full attention");
    }
    const toml::node* node = text.get("layer_types");
    if (node == nullptr) return;
    if (!node->is_array()) fail_type(*node, "text_config.layer_types", "an array");
    const toml::array& array = *node->as_array();
    if (static_cast<std::int64_t>(array.size()) != t.num_hidden_layers) {
      fail_key(*node, "text_config.layer_types",
               layout + std::to_string(array.size()) + " entries but num_hidden_layers = " +
                   std::to_string(t.num_hidden_layers));
    }
    for (std::size_t i = 0; i < array.size(); ++i) {
      const std::string path = "text_config.layer_types[" + std::to_string(i) + "]";
      const std::string value = string_value(array[i], path);
      if (value != kFullAttention && value != kLinearAttention) {
        fail_key(array[i], path, "expected \"linear_attention\" or \"full_attention\", got " + in_quotes(value));
      }
      const std::string_view resolved =
          t.layer_type(static_cast<std::int64_t>(i)) == layer_kind::full_attention ? kFullAttention : kLinearAttention;
      if (value != resolved) {
        const std::string reason =
            hybrid ? "full_attention_interval = " + std::to_string(interval) + " makes it " + in_quotes(resolved)
                   : "model_type " + in_quotes(spec.model_type) + " has only full_attention layers";
        fail_key(array[i], path,
                 layout + "layer " + std::to_string(i) + " is " + in_quotes(value) + " but " + reason);
      }
    }
  }

  vision_spec read_vision(const toml::table& vision, const text_spec& text) const {
    constexpr std::string_view p = "vision_config";
    vision_spec v;
    v.depth = required_size(vision, p, "depth");
    v.hidden_size = required_size(vision, p, "hidden_size");
    v.num_heads = required_size(vision, p, "num_heads");
    if (v.hidden_size % v.num_heads != 0) {
      fail_key(*vision.get("num_heads"), "vision_config.num_heads",
               "must divide vision_config.hidden_size = " + std::to_string(v.hidden_size) + " (got " +
                   std::to_string(v.num_heads) + ")");
    }
    v.intermediate_size = required_size(vision, p, "intermediate_size");
    v.out_hidden_size = required_size(vision, p, "out_hidden_size");
    if (v.out_hidden_size != text.hidden_size) {
      fail_key(*vision.get("out_hidden_size"), "vision_config.out_hidden_size",
               "must equal text_config.hidden_size = " + std::to_string(text.hidden_size) + " (got " +
                   std::to_string(v.out_hidden_size) + ")");
    }
    if (const toml::node* node = vision.get("deepstack_visual_indexes")) {
      if (!node->is_array()) fail_type(*node, "vision_config.deepstack_visual_indexes", "an array");
      const toml::array& array = *node->as_array();
      std::set<std::int64_t> seen;
      for (std::size_t i = 0; i < array.size(); ++i) {
        const std::string path = "vision_config.deepstack_visual_indexes[" + std::to_string(i) + "]";
        if (!array[i].is_integer()) fail_type(array[i], path, "an integer");
        const std::int64_t index = array[i].as_integer()->get();
        if (index < 0 || index >= v.depth) {
          fail_key(array[i], path,
                   "must be a ViT block index in [0, vision_config.depth = " + std::to_string(v.depth) + ") (got " +
                       std::to_string(index) + ")");
        }
        if (!seen.insert(index).second) {
          fail_key(array[i], path, "duplicate DeepStack index " + std::to_string(index));
        }
        v.deepstack_visual_indexes.push_back(index);
      }
    }
    v.patch_size = required_size(vision, p, "patch_size");
    v.temporal_patch_size = required_size(vision, p, "temporal_patch_size");
    v.spatial_merge_size = required_size(vision, p, "spatial_merge_size");
    v.in_channels = required_size(vision, p, "in_channels");
    if (!bounded_patch_input_size(v)) {
      fail_at(vision.source(), "[vision_config]: patch embedding input in_channels * temporal_patch_size * "
                               "patch_size^2 is too large: must be <= 2^31 = " + std::to_string(kMaxSize));
    }
    return v;
  }
};

// --- validate_model_spec helpers (no locations: the message names the field) -------------------------------

[[noreturn]] void fail_spec(const model_spec& spec, const std::string& what) {
  std::string prefix = "invalid model_spec";
  if (!spec.name.empty()) prefix += " '" + spec.name + "'";
  throw error(prefix + ": " + what);
}

void check_size(const model_spec& spec, const char* field, std::int64_t value, std::int64_t minimum = 1) {
  if (value < minimum) {
    const std::string bound = minimum == 1 ? "> 0" : ">= " + std::to_string(minimum);
    fail_spec(spec, std::string(field) + " must be " + bound + " (got " + std::to_string(value) + ")");
  }
  if (value > kMaxSize) {
    fail_spec(spec, std::string(field) + " is too large: must be <= 2^31 = " + std::to_string(kMaxSize) + " (got " +
                        std::to_string(value) + ")");
  }
}

// The mixture-of-experts fields: all unset on a dense model type; consistent on an MoE one.
void validate_moe(const model_spec& spec) {
  const text_spec& t = spec.text;
  const std::string type = in_quotes(spec.model_type);
  if (!is_moe_type(spec.model_type)) {
    if (t.num_experts != 0 || t.num_experts_per_tok != 0 || t.moe_intermediate_size != 0 ||
        t.shared_expert_intermediate_size != 0 || t.decoder_sparse_step != 0 || !t.mlp_only_layers.empty()) {
      fail_spec(spec, "text.num_experts, num_experts_per_tok, moe_intermediate_size, shared_expert_intermediate_size, "
                      "decoder_sparse_step and mlp_only_layers must be unset (0, empty) for model_type " + type +
                      ", a dense model");
    }
    return;
  }
  check_size(spec, "text.num_experts", t.num_experts);
  check_size(spec, "text.num_experts_per_tok", t.num_experts_per_tok);
  if (t.num_experts_per_tok > t.num_experts) {
    fail_spec(spec, "text.num_experts_per_tok (" + std::to_string(t.num_experts_per_tok) +
                        ") must be <= text.num_experts (" + std::to_string(t.num_experts) + ")");
  }
  check_size(spec, "text.moe_intermediate_size", t.moe_intermediate_size);
  check_size(spec, "text.decoder_sparse_step", t.decoder_sparse_step);
  if (spec.model_type == kQwen35Moe) {
    check_size(spec, "text.shared_expert_intermediate_size", t.shared_expert_intermediate_size);
    if (t.decoder_sparse_step != 1 || !t.mlp_only_layers.empty()) {
      fail_spec(spec, "text.decoder_sparse_step must be 1 and text.mlp_only_layers empty for model_type " + type +
                          ": every Qwen3.5 MoE layer is an MoE block");
    }
  } else if (t.shared_expert_intermediate_size != 0) {
    fail_spec(spec, "text.shared_expert_intermediate_size must be 0 for model_type " + type +
                        ": Qwen3-VL MoE has no shared expert");
  }
  std::set<std::int64_t> seen;
  for (std::size_t i = 0; i < t.mlp_only_layers.size(); ++i) {
    const std::int64_t index = t.mlp_only_layers[i];
    if (index < 0 || index >= t.num_hidden_layers) {
      fail_spec(spec, "text.mlp_only_layers[" + std::to_string(i) + "] = " + std::to_string(index) +
                          " is outside [0, text.num_hidden_layers = " + std::to_string(t.num_hidden_layers) + ")");
    }
    if (!seen.insert(index).second) {
      fail_spec(spec, "text.mlp_only_layers[" + std::to_string(i) + "] = " + std::to_string(index) + " is a duplicate");
    }
  }
  if (t.num_moe_layers() == 0) {
    fail_spec(spec, "no decoder layer is an MoE block (text.decoder_sparse_step = " +
                        std::to_string(t.decoder_sparse_step) + ", text.num_hidden_layers = " +
                        std::to_string(t.num_hidden_layers) + ")");
  }
  if (t.num_dense_mlp_layers() > 0) check_size(spec, "text.intermediate_size", t.intermediate_size);
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// Public functions

model_spec load_model_spec(const std::string& path) {
  model_spec spec = parse_model_spec(detail::read_file(path, "model config"), path);
  spec.source_path = path;
  return spec;
}

model_spec parse_model_spec(const std::string& toml_text, const std::string& source_name) {
  const toml::table root = detail::parse_toml(toml_text, source_name);
  model_spec spec = spec_loader(source_name).load(root);
  spec.source_path = source_name;
  // The loader checked everything with locations; this is the same contract for code-built specs and a
  // safety net should the two ever drift apart.
  try {
    validate_model_spec(spec);
  } catch (const error& e) {
    throw error(source_name + ": " + e.what());
  }
  return spec;
}

void validate_model_spec(const model_spec& spec) {
  if (!is_known_type(spec.model_type)) {
    fail_spec(spec, "model_type must be one of " + std::string(kSupportedTypes) + " (got " + in_quotes(spec.model_type) +
                        ")");
  }
  const bool hybrid = is_hybrid_type(spec.model_type);
  const text_spec& t = spec.text;
  check_size(spec, "text.hidden_size", t.hidden_size);
  check_size(spec, "text.num_hidden_layers", t.num_hidden_layers);
  check_size(spec, "text.num_attention_heads", t.num_attention_heads);
  check_size(spec, "text.num_key_value_heads", t.num_key_value_heads);
  if (t.num_attention_heads % t.num_key_value_heads != 0) {
    fail_spec(spec, "text.num_key_value_heads (" + std::to_string(t.num_key_value_heads) +
                        ") must divide text.num_attention_heads (" + std::to_string(t.num_attention_heads) + ")");
  }
  check_size(spec, "text.head_dim", t.head_dim);
  // An MoE model with no dense layer needs no intermediate_size (checked with the MoE fields below).
  check_size(spec, "text.intermediate_size", t.intermediate_size, is_moe_type(spec.model_type) ? 0 : 1);
  check_size(spec, "text.vocab_size", t.vocab_size);
  check_size(spec, "text.mtp_num_hidden_layers", t.mtp_num_hidden_layers, 0);

  // Layer layout (arithmetic: layer_type(i) follows from the interval).
  if (hybrid) {
    check_size(spec, "text.full_attention_interval", t.full_attention_interval);
  } else if (t.full_attention_interval != 0) {
    fail_spec(spec, "text.full_attention_interval must be 0 for model_type " + in_quotes(spec.model_type) + " (got " +
                        std::to_string(t.full_attention_interval) + ")");
  }
  if (t.num_full_attention_layers() == 0) {
    fail_spec(spec, "no full attention layer: text.full_attention_interval (" +
                        std::to_string(t.full_attention_interval) + ") exceeds text.num_hidden_layers (" +
                        std::to_string(t.num_hidden_layers) + ")");
  }
  if (t.num_linear_attention_layers() > 0) {
    check_size(spec, "text.linear_key_head_dim", t.linear_key_head_dim);
    check_size(spec, "text.linear_value_head_dim", t.linear_value_head_dim);
    check_size(spec, "text.linear_num_key_heads", t.linear_num_key_heads);
    check_size(spec, "text.linear_num_value_heads", t.linear_num_value_heads);
    check_size(spec, "text.linear_conv_kernel_dim", t.linear_conv_kernel_dim);
    if (t.linear_num_value_heads % t.linear_num_key_heads != 0) {
      fail_spec(spec, "text.linear_num_value_heads (" + std::to_string(t.linear_num_value_heads) +
                          ") must be a multiple of text.linear_num_key_heads (" +
                          std::to_string(t.linear_num_key_heads) + ")");
    }
  }

  validate_moe(spec);

  if (spec.vision) {
    const vision_spec& v = *spec.vision;
    check_size(spec, "vision.depth", v.depth);
    check_size(spec, "vision.hidden_size", v.hidden_size);
    check_size(spec, "vision.num_heads", v.num_heads);
    if (v.hidden_size % v.num_heads != 0) {
      fail_spec(spec, "vision.num_heads (" + std::to_string(v.num_heads) + ") must divide vision.hidden_size (" +
                          std::to_string(v.hidden_size) + ")");
    }
    check_size(spec, "vision.intermediate_size", v.intermediate_size);
    check_size(spec, "vision.out_hidden_size", v.out_hidden_size);
    if (v.out_hidden_size != t.hidden_size) {
      fail_spec(spec, "vision.out_hidden_size (" + std::to_string(v.out_hidden_size) +
                          ") must equal text.hidden_size (" + std::to_string(t.hidden_size) + ")");
    }
    std::set<std::int64_t> seen;
    for (std::size_t i = 0; i < v.deepstack_visual_indexes.size(); ++i) {
      const std::int64_t index = v.deepstack_visual_indexes[i];
      if (index < 0 || index >= v.depth) {
        fail_spec(spec, "vision.deepstack_visual_indexes[" + std::to_string(i) + "] = " + std::to_string(index) +
                            " is outside [0, vision.depth = " + std::to_string(v.depth) + ")");
      }
      if (!seen.insert(index).second) {
        fail_spec(spec, "vision.deepstack_visual_indexes[" + std::to_string(i) + "] = " + std::to_string(index) +
                            " is a duplicate");
      }
    }
    check_size(spec, "vision.patch_size", v.patch_size);
    check_size(spec, "vision.temporal_patch_size", v.temporal_patch_size);
    check_size(spec, "vision.spatial_merge_size", v.spatial_merge_size);
    check_size(spec, "vision.in_channels", v.in_channels);
    if (!bounded_patch_input_size(v)) {
      fail_spec(spec, "vision.patch_input_size() = in_channels * temporal_patch_size * patch_size^2 is too large: "
                      "must be <= 2^31 = " + std::to_string(kMaxSize));
    }
  }
}

}  // namespace flopmeter
