// plugin/core/spec_rules.cpp — the model_spec rules, written once (see spec_rules.h): the model types, each
// field's bounds and owners, the cross-field invariants and the coefficient bounds. The loaders (model_toml.cpp
// for TOML, hf_config.cpp for config.json, both through read_model_spec in spec_reader.cpp) and
// validate_model_spec() all come here.

#include "core/spec_rules.h"

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/families.h"
#include "core/vlm_families.h"
#include "core/spec_fields.h"
#include "flopmeter/error.h"
#include "flopmeter/flop_model.h"

namespace flopmeter::detail {
namespace {

// "2^31 = 2147483648" for the size bound.
std::string max_size_text() { return "2^31 = " + std::to_string(kMaxSize); }

std::string family_name(const model_spec& spec) { return model_family_name(spec.model_type); }

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
         is_text_only_model_type(model_type) || find_family(model_type) != nullptr ||
         find_vlm_family(model_type) != nullptr;
}

bool is_text_only_model_type(std::string_view model_type) {
  return model_type == kQwen3 || model_type == kQwen3Moe || model_type == kQwen3Next ||
         find_family(model_type) != nullptr;
}

std::string text_model_type(std::string_view model_type) {
  return is_text_only_model_type(model_type) ? std::string(model_type) : std::string(model_type) + "_text";
}

std::string model_family_name(std::string_view model_type) {
  if (const family_adapter* family = find_family(model_type)) return std::string(family->family);
  if (const vlm_family* family = find_vlm_family(model_type)) return std::string(family->family);
  if (model_type == kQwen3 || model_type == kQwen3Moe) return "Qwen3";
  if (model_type == kQwen3Next) return "Qwen3-Next";
  if (model_type == kQwen35 || model_type == kQwen35Moe) return "Qwen3.5";
  return "Qwen3-VL";
}

std::string supported_model_types_text() {
  std::string text = R"("qwen3_vl", "qwen3_5", "qwen3_vl_moe", "qwen3_5_moe", "qwen3", "qwen3_moe", "qwen3_next")";
  for (const family_adapter* family : all_families()) text += ", " + quoted(family->model_type);
  for (const vlm_family* family : all_vlm_families()) text += ", " + quoted(family->model_type);
  return text;
}

std::optional<spec_violation> check_fields(const model_spec& spec) {
  if (!is_supported_model_type(spec.model_type)) {
    return spec_violation{"model_type", "unknown model type " + in_quotes(spec.model_type) + " (supported: " +
                                            supported_model_types_text() + ")"};
  }
  if (find_family(spec.model_type) != nullptr) return check_family_spec(spec);
  if (find_vlm_family(spec.model_type) != nullptr) return check_vlm_spec(spec);
  const text_spec& t = spec.text;
  const std::string type = in_quotes(spec.model_type);
  if (!t.layer_runs.empty() || t.sliding_window != 0 || t.attention_chunk_size != 0) {
    return spec_violation{"text_config.layer_types", std::string(kNoSlidingWindow)};
  }
  if (t.is_mla() || t.q_lora_rank != 0 || t.qk_nope_head_dim != 0 || t.qk_rope_head_dim != 0 || t.v_head_dim != 0) {
    return spec_violation{"text_config.kv_lora_rank",
                          "not allowed for model_type " + type + ", which has no multi-head latent attention (MLA)"};
  }
  if (t.first_k_dense_replace != 0 || t.n_shared_experts != 0) {
    return spec_violation{
        t.first_k_dense_replace != 0 ? "text_config.first_k_dense_replace" : "text_config.n_shared_experts",
        "not allowed for model_type " + type + " (a DeepSeek-V3 / GLM-4.5 MoE field)"};
  }
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
    if (v.mlp != vision_mlp_kind::plain || v.projector != vision_projector_kind::patch_merger || v.window_size != 0 ||
        !v.fullatt_block_indexes.empty() || v.cls_token || v.image_size != 0 || v.bidirectional_image) {
      return spec_violation{"vision_config",
                            "a Qwen3-VL / Qwen3.5 vision tower has a plain MLP, the patch merger, no "
                            "windows, no CLS token, any grid size and no image blocks"};
    }
    if (!bounded_patch_input_size(v)) {
      return spec_violation{"vision_config", "patch embedding input in_channels * temporal_patch_size * "
                                             "patch_size^2 is too large: must be <= " + max_size_text()};
    }
  }
  return std::nullopt;
}

std::optional<spec_violation> check_invariants(const model_spec& spec) {
  if (find_family(spec.model_type) != nullptr) return std::nullopt;      // check_family_spec has them
  if (find_vlm_family(spec.model_type) != nullptr) return std::nullopt;  // check_vlm_spec has them
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

}  // namespace flopmeter::detail
