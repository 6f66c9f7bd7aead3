// plugin/core/spec_rules.cpp — the model_spec rules, written once (see spec_rules.h). The loaders
// (model_config.cpp for TOML, hf_config.cpp for config.json) and validate_model_spec() all come here.

#include "core/spec_rules.h"

#include "flopmeter/error.h"
#include "flopmeter/flop_model.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace flopmeter::detail {
namespace {

constexpr std::string_view kQwen3Vl = "qwen3_vl";
constexpr std::string_view kQwen35 = "qwen3_5";
constexpr std::string_view kQwen3VlMoe = "qwen3_vl_moe";
constexpr std::string_view kQwen35Moe = "qwen3_5_moe";
// The text-only decoders (config.json keeps the decoder's fields at the top level, no text_config object):
// Qwen3 is the Qwen3-VL text decoder, Qwen3-MoE the Qwen3-VL-MoE one, Qwen3-Next the hybrid Gated DeltaNet +
// gated attention decoder with a gated shared expert (the Qwen3.5-MoE text decoder, with the MoE layout of
// Qwen3-MoE: decoder_sparse_step and mlp_only_layers are honoured).
constexpr std::string_view kQwen3 = "qwen3";
constexpr std::string_view kQwen3Moe = "qwen3_moe";
constexpr std::string_view kQwen3Next = "qwen3_next";
// transformers' Qwen3NextConfig builds layer_types with this interval when the config.json gives neither.
constexpr std::int64_t kQwen3NextDefaultInterval = 4;
constexpr std::string_view kFullAttention = "full_attention";
constexpr std::string_view kLinearAttention = "linear_attention";
constexpr std::string_view kText = "text_config";
constexpr std::string_view kVision = "vision_config";
constexpr std::string_view kDeltaNet = "Gated DeltaNet layers";
constexpr std::string_view kSlidingAttention = "sliding_attention";
constexpr std::string_view kNoSlidingWindow =
    "sliding-window attention is not supported: flopmeter bills every attention layer over the whole document "
    "(the released Qwen3 checkpoints have use_sliding_window = false and only \"full_attention\" layers)";

// Which model types a field belongs to (what transformers builds for each type). A field of another type is
// accepted only at its neutral value (0, false, []), which states that the model does not have the feature;
// any other value would change the work in a way the model type does not have, so it is an error (a qwen3_vl
// with attn_output_gate = true is not a Qwen3-VL). Every field of the schema and its owners:
//   all types: text_config.{model_type, hidden_size, num_hidden_layers, num_attention_heads,
//     num_key_value_heads, head_dim, intermediate_size, vocab_size, tie_word_embeddings, layer_types} and every
//     vision_config size (a vision tower is refused on the text-only types qwen3, qwen3_moe, qwen3_next);
//     [flopmeter].train_mtp_layers (no work without MTP layers)
//   hybrid (qwen3_5, qwen3_5_moe, qwen3_next): attn_output_gate (always true there), full_attention_interval, the five
//     linear_* sizes, mtp_num_hidden_layers (Qwen3-VL has no MTP module)
//   qwen3_vl types (qwen3_vl, qwen3_vl_moe): vision_config.deepstack_visual_indexes (transformers'
//     Qwen3_5VisionModel deletes the DeepStack mergers it inherits from Qwen3VLVisionModel)
//   moe (qwen3_vl_moe, qwen3_5_moe, qwen3_moe, qwen3_next): num_experts, num_experts_per_tok,
//     moe_intermediate_size, decoder_sparse_step, mlp_only_layers (empty on qwen3_5_moe), norm_topk_prob
//   shared expert (qwen3_5_moe, qwen3_next): shared_expert_intermediate_size
enum class belongs {
  all,
  hybrid,         // Qwen3.5, Qwen3.5 MoE, Qwen3-Next: Gated DeltaNet layers with a full attention layer every interval
  qwen3_vl,       // Qwen3-VL and Qwen3-VL MoE: DeepStack mergers
  moe,            // the mixture-of-experts types
  shared_expert,  // Qwen3.5 MoE and Qwen3-Next: the gated shared expert
};

enum class need {
  required,
  optional,   // 0 when absent
  dense_mlp,  // required when a decoder layer has a dense SwiGLU (always on a dense type; on an MoE type when
              // decoder_sparse_step or mlp_only_layers leave one)
  step,       // optional, 1 when absent (every layer an MoE block)
  interval,   // required, except on qwen3_next: transformers' default interval (4) when absent
};

struct text_int {
  std::string_view key;
  std::int64_t text_spec::*member;
  std::int64_t minimum;  // 1 for sizes, 0 for counts
  belongs owner;
  need presence;             // when the field belongs to the model type
  std::string_view feature;  // what a model of another type lacks, for its refusal ("Gated DeltaNet layers")
};

struct vision_int {
  std::string_view key;
  std::int64_t vision_spec::*member;
};

// SCHEMA.md order.
constexpr text_int kTextInts[] = {
    {"hidden_size", &text_spec::hidden_size, 1, belongs::all, need::required, {}},
    {"num_hidden_layers", &text_spec::num_hidden_layers, 1, belongs::all, need::required, {}},
    {"num_attention_heads", &text_spec::num_attention_heads, 1, belongs::all, need::required, {}},
    {"num_key_value_heads", &text_spec::num_key_value_heads, 1, belongs::all, need::required, {}},
    {"head_dim", &text_spec::head_dim, 1, belongs::all, need::required, {}},
    {"intermediate_size", &text_spec::intermediate_size, 1, belongs::all, need::dense_mlp, {}},
    {"vocab_size", &text_spec::vocab_size, 1, belongs::all, need::required, {}},
    {"full_attention_interval", &text_spec::full_attention_interval, 1, belongs::hybrid, need::interval, kDeltaNet},
    {"linear_key_head_dim", &text_spec::linear_key_head_dim, 1, belongs::hybrid, need::required, kDeltaNet},
    {"linear_value_head_dim", &text_spec::linear_value_head_dim, 1, belongs::hybrid, need::required, kDeltaNet},
    {"linear_num_key_heads", &text_spec::linear_num_key_heads, 1, belongs::hybrid, need::required, kDeltaNet},
    {"linear_num_value_heads", &text_spec::linear_num_value_heads, 1, belongs::hybrid, need::required, kDeltaNet},
    {"linear_conv_kernel_dim", &text_spec::linear_conv_kernel_dim, 1, belongs::hybrid, need::required, kDeltaNet},
    // Qwen3.5's checkpoints carry an MTP module; transformers' Qwen3-VL has none (no such config attribute).
    {"mtp_num_hidden_layers", &text_spec::mtp_num_hidden_layers, 0, belongs::hybrid, need::optional,
     "multi-token-prediction (MTP) layers"},
    {"num_experts", &text_spec::num_experts, 1, belongs::moe, need::required, {}},
    {"num_experts_per_tok", &text_spec::num_experts_per_tok, 1, belongs::moe, need::required, {}},
    {"moe_intermediate_size", &text_spec::moe_intermediate_size, 1, belongs::moe, need::required, {}},
    {"shared_expert_intermediate_size",
     &text_spec::shared_expert_intermediate_size,
     1,
     belongs::shared_expert,
     need::required,
     {}},
    {"decoder_sparse_step", &text_spec::decoder_sparse_step, 1, belongs::moe, need::step, {}},
};

constexpr vision_int kVisionInts[] = {
    {"depth", &vision_spec::depth},
    {"hidden_size", &vision_spec::hidden_size},
    {"num_heads", &vision_spec::num_heads},
    {"intermediate_size", &vision_spec::intermediate_size},
    {"out_hidden_size", &vision_spec::out_hidden_size},
    {"patch_size", &vision_spec::patch_size},
    {"temporal_patch_size", &vision_spec::temporal_patch_size},
    {"spatial_merge_size", &vision_spec::spatial_merge_size},
    {"in_channels", &vision_spec::in_channels},
};

std::string path_of(std::string_view table, std::string_view key) {
  return std::string(table) + "." + std::string(key);
}

std::string in_quotes(std::string_view text) { return quoted(text); }

// "2^31 = 2147483648" for the size bound.
std::string max_size_text() { return "2^31 = " + std::to_string(kMaxSize); }

bool is_hybrid(const model_spec& spec) {
  return spec.model_type == kQwen35 || spec.model_type == kQwen35Moe || spec.model_type == kQwen3Next;
}
bool is_moe(const model_spec& spec) {
  return spec.model_type == kQwen3VlMoe || spec.model_type == kQwen35Moe || spec.model_type == kQwen3Moe ||
         spec.model_type == kQwen3Next;
}
bool has_shared_expert(const model_spec& spec) {
  return spec.model_type == kQwen35Moe || spec.model_type == kQwen3Next;
}

std::string family_name(const model_spec& spec) { return model_family_name(spec.model_type); }

bool applies(belongs owner, const model_spec& spec) {
  switch (owner) {
    case belongs::all: return true;
    case belongs::hybrid: return is_hybrid(spec);
    case belongs::qwen3_vl: return !is_hybrid(spec);
    case belongs::moe: return is_moe(spec);
    case belongs::shared_expert: return has_shared_expert(spec);
  }
  return false;
}

std::optional<spec_violation> check_bounds(std::string field, std::int64_t value, std::int64_t minimum) {
  if (value < minimum) {
    const std::string bound = minimum == 1 ? "> 0" : ">= " + std::to_string(minimum);
    return spec_violation{std::move(field), "must be " + bound + " (got " + std::to_string(value) + ")"};
  }
  if (value > kMaxSize) {
    return spec_violation{std::move(field),
                          "too large: must be <= " + max_size_text() + " (got " + std::to_string(value) + ")"};
  }
  return std::nullopt;
}

// A field of another model type with a value that would change the work; `feature` is what the model type
// lacks ("Gated DeltaNet layers").
std::string not_this_type(const model_spec& spec, belongs owner, std::string_view feature) {
  const std::string type = in_quotes(spec.model_type);
  if ((owner == belongs::moe || owner == belongs::shared_expert) && !is_moe(spec)) {
    return "not allowed for model_type " + type + ", a dense model (no experts); a mixture-of-experts model has "
           "model_type " + in_quotes(spec.model_type + "_moe");
  }
  if (owner == belongs::shared_expert) {
    return "not allowed for model_type " + type + ": " + family_name(spec) + " MoE has no shared expert";
  }
  const char* owners = owner == belongs::hybrid ? "the hybrid types \"qwen3_5\", \"qwen3_5_moe\" and \"qwen3_next\""
                                                : "the Qwen3-VL types \"qwen3_vl\" and \"qwen3_vl_moe\"";
  return "not allowed for model_type " + type + ", which has no " + std::string(feature) + " (a field of " + owners +
         ")";
}

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

std::string layout_name(const model_spec& spec) { return "inconsistent " + family_name(spec) + " layer layout: "; }

const char* kind_name(layer_kind kind) {
  return kind == layer_kind::full_attention ? "full_attention" : "linear_attention";
}

}  // namespace

bool is_supported_model_type(std::string_view model_type) {
  return model_type == kQwen3Vl || model_type == kQwen35 || model_type == kQwen3VlMoe || model_type == kQwen35Moe ||
         is_text_only_model_type(model_type);
}

bool is_text_only_model_type(std::string_view model_type) {
  return model_type == kQwen3 || model_type == kQwen3Moe || model_type == kQwen3Next;
}

std::string text_model_type(std::string_view model_type) {
  return is_text_only_model_type(model_type) ? std::string(model_type) : std::string(model_type) + "_text";
}

std::string model_family_name(std::string_view model_type) {
  if (model_type == kQwen3 || model_type == kQwen3Moe) return "Qwen3";
  if (model_type == kQwen3Next) return "Qwen3-Next";
  if (model_type == kQwen35 || model_type == kQwen35Moe) return "Qwen3.5";
  return "Qwen3-VL";
}

std::string supported_model_types_text() {
  return R"("qwen3_vl", "qwen3_5", "qwen3_vl_moe", "qwen3_5_moe", "qwen3", "qwen3_moe", "qwen3_next")";
}

std::optional<spec_violation> check_fields(const model_spec& spec) {
  if (!is_supported_model_type(spec.model_type)) {
    return spec_violation{"model_type", "unknown model type " + in_quotes(spec.model_type) + " (supported: " +
                                            supported_model_types_text() + ")"};
  }
  const text_spec& t = spec.text;
  const std::string type = in_quotes(spec.model_type);
  for (const text_int& field : kTextInts) {
    const std::int64_t value = t.*field.member;
    const std::string path = path_of(kText, field.key);
    if (!applies(field.owner, spec)) {
      if (value != 0) return spec_violation{path, not_this_type(spec, field.owner, field.feature)};
    } else if (field.presence == need::dense_mlp && is_moe(spec) && value == 0) {
      continue;  // checked below, once the MoE layout is known to be valid
    } else if (auto violation = check_bounds(path, value, field.minimum)) {
      return violation;
    }
  }
  // transformers' Qwen3.5 and Qwen3-Next attention (Qwen3NextAttention) always builds q_proj as hidden -> 2 x
  // heads x head_dim, query and sigmoid gate; its configs have no switch for it. So the gate comes with the type.
  if (is_hybrid(spec) && !t.attn_output_gate) {
    return spec_violation{"text_config.attn_output_gate",
                          "must be true for model_type " + type + ": " + family_name(spec) +
                              " attention always has the sigmoid output "
                              "gate (transformers builds q_proj as hidden -> 2 x heads x head_dim, with no setting to "
                              "turn it off); write true or leave the key out"};
  }
  if (!is_hybrid(spec) && t.attn_output_gate) {
    return spec_violation{"text_config.attn_output_gate",
                          not_this_type(spec, belongs::hybrid, "attention output gate")};
  }
  if (!is_moe(spec)) {
    if (!t.mlp_only_layers.empty()) {
      return spec_violation{"text_config.mlp_only_layers", not_this_type(spec, belongs::moe, {})};
    }
    if (t.norm_topk_prob) return spec_violation{"text_config.norm_topk_prob", not_this_type(spec, belongs::moe, {})};
  } else {
    if (t.num_experts_per_tok > t.num_experts) {
      return spec_violation{"text_config.num_experts_per_tok", "must be <= text_config.num_experts = " +
                                                                   std::to_string(t.num_experts) + " (got " +
                                                                   std::to_string(t.num_experts_per_tok) + ")"};
    }
    const bool qwen35 = spec.model_type == kQwen35Moe;
    if (qwen35 && t.decoder_sparse_step != 1) {
      return spec_violation{"text_config.decoder_sparse_step",
                            "must be 1 for model_type " + type + ": every Qwen3.5 MoE layer is an MoE block (got " +
                                std::to_string(t.decoder_sparse_step) + ")"};
    }
    if (qwen35 && !t.mlp_only_layers.empty()) {
      return spec_violation{"text_config.mlp_only_layers",
                            "must be empty for model_type " + type + ": every Qwen3.5 MoE layer is an MoE block"};
    }
    std::set<std::int64_t> seen;
    for (std::size_t i = 0; i < t.mlp_only_layers.size(); ++i) {
      const std::string path = "text_config.mlp_only_layers[" + std::to_string(i) + "]";
      const std::int64_t index = t.mlp_only_layers[i];
      if (index < 0 || index >= t.num_hidden_layers) {
        return spec_violation{path, "must be a decoder layer index in [0, text_config.num_hidden_layers = " +
                                        std::to_string(t.num_hidden_layers) + ") (got " + std::to_string(index) + ")"};
      }
      if (!seen.insert(index).second) return spec_violation{path, "duplicate layer index " + std::to_string(index)};
    }
    if (t.num_moe_layers() == 0) {
      return spec_violation{t.mlp_only_layers.empty() ? "text_config.decoder_sparse_step" : "text_config.mlp_only_layers",
                            "no decoder layer would be an MoE block (decoder_sparse_step = " +
                                std::to_string(t.decoder_sparse_step) + ", num_hidden_layers = " +
                                std::to_string(t.num_hidden_layers) + ")"};
    }
    if (t.num_dense_mlp_layers() > 0) {
      if (auto violation = check_bounds("text_config.intermediate_size", t.intermediate_size, 1)) return violation;
    }
  }
  if (spec.vision && is_text_only_model_type(spec.model_type)) {
    return spec_violation{"vision_config",
                          "not allowed for model_type " + type + ", a text-only " + family_name(spec) +
                              " decoder (no vision tower); a vision-language " +
                              "model has model_type \"qwen3_vl\", \"qwen3_5\" or their \"_moe\" types"};
  }
  if (spec.vision) {
    const vision_spec& v = *spec.vision;
    for (const vision_int& field : kVisionInts) {
      if (auto violation = check_bounds(path_of(kVision, field.key), v.*field.member, 1)) return violation;
    }
    // Each index adds a merger (the largest vision term after the blocks); Qwen3.5 runs none.
    if (!applies(belongs::qwen3_vl, spec) && !v.deepstack_visual_indexes.empty()) {
      return spec_violation{"vision_config.deepstack_visual_indexes",
                            not_this_type(spec, belongs::qwen3_vl, "DeepStack mergers") + "; write [] or leave it out"};
    }
    if (!bounded_patch_input_size(v)) {
      return spec_violation{"vision_config", "patch embedding input in_channels * temporal_patch_size * "
                                             "patch_size^2 is too large: must be <= " + max_size_text()};
    }
  }
  return std::nullopt;
}

std::optional<spec_violation> check_invariants(const model_spec& spec) {
  const text_spec& t = spec.text;
  const bool hybrid = is_hybrid(spec);
  if (t.num_attention_heads % t.num_key_value_heads != 0) {
    return spec_violation{"text_config.num_key_value_heads",
                          "must divide text_config.num_attention_heads = " + std::to_string(t.num_attention_heads) +
                              " (got " + std::to_string(t.num_key_value_heads) + ")"};
  }
  if (hybrid && t.linear_num_value_heads % t.linear_num_key_heads != 0) {
    return spec_violation{"text_config.linear_num_value_heads",
                          "must be a multiple of text_config.linear_num_key_heads = " +
                              std::to_string(t.linear_num_key_heads) + " (got " +
                              std::to_string(t.linear_num_value_heads) + ")"};
  }
  // Layer layout: the interval leaves at least one full attention layer (layer i is full attention when
  // (i + 1) % interval == 0; nothing is stored per layer).
  if (hybrid && t.full_attention_interval > t.num_hidden_layers) {
    return spec_violation{"text_config.full_attention_interval",
                          layout_name(spec) + "full_attention_interval = " + std::to_string(t.full_attention_interval) +
                              " exceeds num_hidden_layers = " + std::to_string(t.num_hidden_layers) +
                              ", so no layer would be full attention"};
  }
  if (spec.vision) {
    const vision_spec& v = *spec.vision;
    if (v.hidden_size % v.num_heads != 0) {
      return spec_violation{"vision_config.num_heads", "must divide vision_config.hidden_size = " +
                                                           std::to_string(v.hidden_size) + " (got " +
                                                           std::to_string(v.num_heads) + ")"};
    }
    if (v.out_hidden_size != t.hidden_size) {
      return spec_violation{"vision_config.out_hidden_size", "must equal text_config.hidden_size = " +
                                                                 std::to_string(t.hidden_size) + " (got " +
                                                                 std::to_string(v.out_hidden_size) + ")"};
    }
    std::set<std::int64_t> seen;
    for (std::size_t i = 0; i < v.deepstack_visual_indexes.size(); ++i) {
      const std::string field = "vision_config.deepstack_visual_indexes[" + std::to_string(i) + "]";
      const std::int64_t index = v.deepstack_visual_indexes[i];
      if (index < 0 || index >= v.depth) {
        return spec_violation{field, "must be a ViT block index in [0, vision_config.depth = " +
                                         std::to_string(v.depth) + ") (got " + std::to_string(index) + ")"};
      }
      if (!seen.insert(index).second) return spec_violation{field, "duplicate DeepStack index " + std::to_string(index)};
    }
  }
  return std::nullopt;
}

std::optional<spec_violation> check_written_layer_types(const model_spec& spec, const std::vector<layer_kind>& written) {
  const text_spec& t = spec.text;
  if (static_cast<std::int64_t>(written.size()) != t.num_hidden_layers) {
    return spec_violation{"text_config.layer_types", layout_name(spec) + std::to_string(written.size()) +
                                                         " entries but num_hidden_layers = " +
                                                         std::to_string(t.num_hidden_layers)};
  }
  for (std::size_t i = 0; i < written.size(); ++i) {
    const layer_kind expected = t.layer_type(static_cast<std::int64_t>(i));
    if (written[i] == expected) continue;
    const std::string reason = is_hybrid(spec) ? "full_attention_interval = " +
                                                     std::to_string(t.full_attention_interval) + " makes it " +
                                                     in_quotes(kind_name(expected))
                                               : "model_type " + in_quotes(spec.model_type) + " has only full_attention layers";
    return spec_violation{"text_config.layer_types[" + std::to_string(i) + "]",
                          layout_name(spec) + "layer " + std::to_string(i) + " is " + in_quotes(kind_name(written[i])) +
                              " but " + reason};
  }
  return std::nullopt;
}

std::optional<spec_violation> check_coefficients(const model_spec& spec) {
  // MTP layers are counted as if trained: a plugin config can turn that on after loading.
  model_spec trained = spec;
  trained.train_mtp_layers = true;
  try {
    (void)compute_coefficients(trained);
  } catch (const coefficient_overflow& e) {
    std::string fields;
    std::string first;
    std::vector<std::string> also;
    for (const std::string& field : e.fields()) {
      // The FLOP model names model_spec members ("text.X", "vision.X"): the schema paths are "text_config.X"
      // and "vision_config.X".
      const bool vision = field.rfind("vision.", 0) == 0;
      const std::string path = std::string(vision ? "vision_config." : "text_config.") + field.substr(field.find('.') + 1);
      fields += (fields.empty() ? "" : ", ") + path;
      if (first.empty()) {
        first = path;
      } else {
        also.push_back(path);
      }
    }
    return spec_violation{first.empty() ? std::string("text_config") : first,
                          "coefficient " + e.coefficient() + " would exceed 2^63 FLOPs: the product of " + fields +
                              " is too large",
                          also};
  }
  return std::nullopt;
}

model_spec read_model_spec(const field_reader& reader, const std::string& model_type) {
  model_spec spec;
  spec.model_type = model_type;
  text_spec& t = spec.text;

  if (!reader.has_table(kText)) reader.fail("", "required table [text_config] is missing");
  if (reader.has("text_config.model_type")) {
    const std::string expected = text_model_type(model_type);
    const std::string value = reader.string("text_config.model_type");
    if (value != expected) {
      reader.fail("text_config.model_type", "must be " + in_quotes(expected) + " for " + reader.model_type_path() +
                                                " " + in_quotes(model_type) + " (got " + in_quotes(value) + ")");
    }
  }
  // Types and presence first; a field of another model type is read too, so that check_fields can refuse it
  // (at its neutral value, 0 or false, it states the absence of the feature and is accepted).
  const auto missing = [&](const std::string& path) -> void {
    throw error(reader.where_missing(kText), reader.in_document_terms("required key '" + path + "' is missing"));
  };
  for (const text_int& field : kTextInts) {
    const std::string path = path_of(kText, field.key);
    if (reader.has(path)) {
      t.*field.member = reader.integer(path);
    } else if (applies(field.owner, spec)) {
      const bool defaulted_interval = field.presence == need::interval && model_type == kQwen3Next;
      if (field.presence == need::required || (field.presence == need::interval && !defaulted_interval) ||
          (field.presence == need::dense_mlp && !is_moe(spec))) {
        missing(path);
      }
      if (field.presence == need::step) t.*field.member = 1;
      if (defaulted_interval) t.*field.member = kQwen3NextDefaultInterval;
    }
  }
  if (reader.has("text_config.mlp_only_layers")) {
    const std::size_t count = reader.array_size("text_config.mlp_only_layers");
    for (std::size_t i = 0; i < count; ++i) {
      t.mlp_only_layers.push_back(reader.integer("text_config.mlp_only_layers[" + std::to_string(i) + "]"));
    }
  }
  if (reader.has("text_config.norm_topk_prob")) {
    t.norm_topk_prob = reader.boolean("text_config.norm_topk_prob");
  } else {
    // transformers' default: true for the MoE types but Qwen3MoeConfig's false (no FLOP effect either way).
    t.norm_topk_prob = is_moe(spec) && model_type != kQwen3Moe;
  }
  // Where the document sets each field a rule may refuse, when that is not the field's own path (a
  // top-level key of config.json): a violation is cited there.
  std::vector<std::pair<std::string, std::string>> written_at;
  // A text field the document may write inside text_config or at the top level: the path it is read from
  // (empty when neither has it); text_config's value wins. When `both_must_agree` (a field that changes the
  // work), two different values are refused: the one ignored would be a silent change of the count.
  const auto text_or_top_level = [&](const std::string& path, bool both_must_agree) -> std::string {
    const std::optional<std::string> top = reader.top_level_key(path);
    if (!top) return reader.has(path) ? path : std::string();
    if (!reader.has(path)) {
      written_at.emplace_back(path, *top);
      return *top;
    }
    const bool inside = reader.boolean(path);
    if (both_must_agree && reader.boolean(*top) != inside) {
      reader.fail(*top, std::string("contradicts ") + path + " = " + (inside ? "true" : "false") +
                            " (write the value once, in text_config)");
    }
    return path;
  };
  // No FLOP effect (the logits matmul runs either way): checkpoints that disagree load.
  const std::string tie_at = text_or_top_level("text_config.tie_word_embeddings", false);
  if (!tie_at.empty()) {
    t.tie_word_embeddings = reader.boolean(tie_at);
  } else if (const std::optional<bool> fallback = reader.default_bool("text_config.tie_word_embeddings")) {
    t.tie_word_embeddings = *fallback;
  } else {
    throw error(reader.where_missing(kText), "required key 'text_config.tie_word_embeddings' is missing");
  }
  // Absent, the output gate is what the model type has: always on Qwen3.5 (see check_fields), never on
  // Qwen3-VL. A value written is checked against that, wherever it is written.
  const std::string gate_at = text_or_top_level("text_config.attn_output_gate", true);
  t.attn_output_gate = gate_at.empty() ? is_hybrid(spec) : reader.boolean(gate_at);

  // layer_types as written: type-checked here, compared with the interval by check_written_layer_types()
  // (the spec stores no per-layer list).
  std::optional<std::vector<layer_kind>> written_layers;
  if (reader.has("text_config.layer_types")) {
    const std::size_t count = reader.array_size("text_config.layer_types");
    written_layers.emplace();
    written_layers->reserve(std::min<std::size_t>(count, 1 << 16));
    for (std::size_t i = 0; i < count; ++i) {
      const std::string path = "text_config.layer_types[" + std::to_string(i) + "]";
      const std::string value = reader.string(path);
      if (value == kFullAttention) {
        written_layers->push_back(layer_kind::full_attention);
      } else if (value == kLinearAttention) {
        written_layers->push_back(layer_kind::linear_attention);
      } else if (value == kSlidingAttention) {
        reader.fail(path, std::string(kNoSlidingWindow));
      } else {
        reader.fail(path, "expected \"linear_attention\" or \"full_attention\", got " + in_quotes(value));
      }
    }
  }

  // Qwen3 and Qwen3-MoE attend over a sliding window where use_sliding_window is true (transformers marks
  // those layers "sliding_attention"); Qwen3-Next's attention has no window (it deletes the setting).
  if ((model_type == kQwen3 || model_type == kQwen3Moe) && reader.has("text_config.use_sliding_window") &&
      reader.boolean("text_config.use_sliding_window")) {
    reader.fail("text_config.use_sliding_window", std::string(kNoSlidingWindow));
  }

  if (reader.has_table(kVision) && is_text_only_model_type(model_type)) {
    spec.vision.emplace();  // refused by check_fields, at the table
  } else if (reader.has_table(kVision)) {
    vision_spec& v = spec.vision.emplace();
    for (const vision_int& field : kVisionInts) {
      const std::string path = path_of(kVision, field.key);
      if (!reader.has(path)) throw error(reader.where_missing(kVision), "required key '" + path + "' is missing");
      v.*field.member = reader.integer(path);
    }
    if (reader.has("vision_config.deepstack_visual_indexes")) {
      const std::size_t count = reader.array_size("vision_config.deepstack_visual_indexes");
      for (std::size_t i = 0; i < count; ++i) {
        v.deepstack_visual_indexes.push_back(
            reader.integer("vision_config.deepstack_visual_indexes[" + std::to_string(i) + "]"));
      }
    } else if (!is_hybrid(spec)) {
      // Qwen3-VL merges DeepStack features from the ViT blocks this list names: one merger each, the largest
      // vision term after the blocks. Reading an absent list as [] undercounts it (4x for the usual three);
      // transformers itself would fill in its class default, [8, 16, 24], which a config.json saved with only
      // its differences from the defaults leaves out. Neither guess is safe: the file must say which.
      throw error(reader.where_missing(kVision),
                  "required key 'vision_config.deepstack_visual_indexes' is missing: Qwen3-VL adds one merger per "
                  "listed ViT block (transformers' default is [8, 16, 24]; write [] for none)");
    }
    // Qwen3.5 has no DeepStack: an absent list is [] (its checkpoints write [] or leave it out).
  }

  if (auto violation = check_fields(spec)) {
    // An MoE model needs intermediate_size only for its dense layers: the rule finds it 0, the file left it out.
    if (violation->field == "text_config.intermediate_size" && !reader.has(violation->field)) missing(violation->field);
    for (const auto& [field, at] : written_at) {
      if (field == violation->field) reader.fail(at, violation->what);
    }
    reader.fail(violation->field, violation->what);
  }
  if (auto violation = check_invariants(spec)) reader.fail(violation->field, violation->what);
  if (written_layers) {
    if (auto violation = check_written_layer_types(spec, *written_layers)) reader.fail(violation->field, violation->what);
  }
  if (auto violation = check_coefficients(spec)) {
    // Cited where the file sets the first of the fields (a field left at its default is not in the file).
    std::string at = violation->field;
    for (const std::string& other : violation->also) {
      if (reader.has(at)) break;
      at = other;
    }
    if (!reader.has(at)) at = violation->field;
    reader.fail(at, violation->what);
  }
  return spec;
}

const std::vector<schema_field>& schema_fields() {
  static const std::vector<schema_field> fields = [] {
    std::vector<schema_field> all;
    all.push_back({kText, "model_type"});
    for (const text_int& field : kTextInts) {
      all.push_back({kText, field.key});
      if (field.key == "vocab_size") {
        all.push_back({kText, "tie_word_embeddings"});
        all.push_back({kText, "attn_output_gate"});
      }
      if (field.key == "full_attention_interval") all.push_back({kText, "layer_types"});
      if (field.key == "decoder_sparse_step") {
        all.push_back({kText, "mlp_only_layers"});
        all.push_back({kText, "norm_topk_prob"});
      }
    }
    for (const vision_int& field : kVisionInts) {
      all.push_back({kVision, field.key});
      if (field.key == "out_hidden_size") all.push_back({kVision, "deepstack_visual_indexes"});
    }
    return all;
  }();
  return fields;
}

}  // namespace flopmeter::detail
