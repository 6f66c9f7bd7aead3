// plugin/families/qwen_families.cpp — the Qwen3 family adapters (qwen_families.h): one field table for the seven Qwen
// types, in SCHEMA.md's order and the config.json's names, which fields each type has, the build step and the
// rules (what transformers builds for each type).
//
// Which model types a field belongs to: a field of another type is accepted only at its neutral value (0, false,
// []), which states that the model does not have the feature; any other value would change the work in a way the
// model type does not have, so it is an error (a qwen3_vl with attn_output_gate = true is not a Qwen3-VL).
//   all types: model_type, hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim,
//     intermediate_size, vocab_size, tie_word_embeddings, layer_types; a vision tower only on the vision-language
//     types (vlm_families.cpp reads it)
//   hybrid (qwen3_5, qwen3_5_moe, qwen3_next): attn_output_gate (always true there), full_attention_interval, the
//     five linear_* sizes, mtp_num_hidden_layers (Qwen3-VL has no MTP module)
//   moe (qwen3_vl_moe, qwen3_5_moe, qwen3_moe, qwen3_next): num_experts, num_experts_per_tok,
//     moe_intermediate_size, decoder_sparse_step, mlp_only_layers (empty on qwen3_5_moe), norm_topk_prob
//   shared expert (qwen3_5_moe, qwen3_next): shared_expert_intermediate_size
//   qwen3, qwen3_moe: use_sliding_window (read from config.json; true is refused)
// Qwen3 is the Qwen3-VL text decoder, Qwen3-MoE the Qwen3-VL-MoE one, Qwen3-Next the hybrid Gated DeltaNet + gated
// attention decoder with a gated shared expert (the Qwen3.5-MoE text decoder, with the MoE layout of Qwen3-MoE).

#include "families/qwen_families.h"

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/printable_text.h"

namespace flopmeter::detail {
namespace {

constexpr std::string_view kQwen3Vl = "qwen3_vl";
constexpr std::string_view kQwen35 = "qwen3_5";
constexpr std::string_view kQwen3VlMoe = "qwen3_vl_moe";
constexpr std::string_view kQwen35Moe = "qwen3_5_moe";
constexpr std::string_view kQwen3 = "qwen3";
constexpr std::string_view kQwen3Moe = "qwen3_moe";
constexpr std::string_view kQwen3Next = "qwen3_next";
// transformers' Qwen3NextConfig builds layer_types with this interval when the config.json gives neither.
constexpr std::int64_t kQwen3NextDefaultInterval = 4;
constexpr std::string_view kFullAttention = "full_attention";
constexpr std::string_view kLinearAttention = "linear_attention";
constexpr std::string_view kSlidingAttention = "sliding_attention";
constexpr std::string_view kDeltaNet = "Gated DeltaNet layers";
constexpr std::string_view kNoSlidingWindow =
    "sliding-window attention is not supported: flopmeter bills every attention layer over the whole document "
    "(the released Qwen3 checkpoints have use_sliding_window = false and only \"full_attention\" layers)";
constexpr std::string_view kVisionHint =
    "; a vision-language model has model_type \"qwen3_vl\", \"qwen3_5\" or their \"_moe\" types";

std::string n(std::int64_t v) { return std::to_string(v); }
// `text` quoted for a message (detail::quoted, named so that a std::string argument never finds std::quoted by
// argument-dependent lookup).
std::string in_quotes(std::string_view text) { return detail::quoted(text); }
std::string text_path(std::string_view key) { return "text_config." + std::string(key); }

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

// The integer fields: the text_spec member each sets, its bound, its owners and what another type lacks.
struct qwen_int {
  std::string_view key;
  std::int64_t text_spec::*member;
  std::int64_t minimum;  // 1 for sizes, 0 for counts
  belongs owner;
  need presence;             // when the field belongs to the model type
  std::string_view feature;  // what a model of another type lacks, for its refusal ("Gated DeltaNet layers")
  std::string_view meaning;  // SCHEMA.md's description
};

// SCHEMA.md order.
constexpr qwen_int kInts[] = {
    {"hidden_size", &text_spec::hidden_size, 1, belongs::all, need::required, {}, "residual stream width"},
    {"num_hidden_layers", &text_spec::num_hidden_layers, 1, belongs::all, need::required, {}, "decoder layers"},
    {"num_attention_heads", &text_spec::num_attention_heads, 1, belongs::all, need::required, {}, "query heads"},
    {"num_key_value_heads", &text_spec::num_key_value_heads, 1, belongs::all, need::required, {}, "key/value heads"},
    {"head_dim", &text_spec::head_dim, 1, belongs::all, need::required, {}, "width of one attention head"},
    {"intermediate_size",
     &text_spec::intermediate_size,
     1,
     belongs::all,
     need::dense_mlp,
     {},
     "SwiGLU width of a dense layer"},
    {"vocab_size", &text_spec::vocab_size, 1, belongs::all, need::required, {}, "embedding rows and logits width"},
    {"full_attention_interval", &text_spec::full_attention_interval, 1, belongs::hybrid, need::interval, kDeltaNet,
     "layer i is full attention when (i + 1) % interval == 0, Gated DeltaNet otherwise"},
    {"linear_key_head_dim", &text_spec::linear_key_head_dim, 1, belongs::hybrid, need::required, kDeltaNet,
     "Gated DeltaNet key head width"},
    {"linear_value_head_dim", &text_spec::linear_value_head_dim, 1, belongs::hybrid, need::required, kDeltaNet,
     "Gated DeltaNet value head width"},
    {"linear_num_key_heads", &text_spec::linear_num_key_heads, 1, belongs::hybrid, need::required, kDeltaNet,
     "Gated DeltaNet key heads"},
    {"linear_num_value_heads", &text_spec::linear_num_value_heads, 1, belongs::hybrid, need::required, kDeltaNet,
     "Gated DeltaNet value heads"},
    {"linear_conv_kernel_dim", &text_spec::linear_conv_kernel_dim, 1, belongs::hybrid, need::required, kDeltaNet,
     "Gated DeltaNet conv kernel"},
    // Qwen3.5's checkpoints carry an MTP module; transformers' Qwen3-VL has none (no such config attribute).
    {"mtp_num_hidden_layers", &text_spec::mtp_num_hidden_layers, 0, belongs::hybrid, need::optional,
     "multi-token-prediction (MTP) layers", "MTP layers; billed when [flopmeter] train_mtp_layers = true"},
    {"num_experts", &text_spec::num_experts, 1, belongs::moe, need::required, {}, "routed experts"},
    {"num_experts_per_tok", &text_spec::num_experts_per_tok, 1, belongs::moe, need::required, {}, "top-k"},
    {"moe_intermediate_size",
     &text_spec::moe_intermediate_size,
     1,
     belongs::moe,
     need::required,
     {},
     "SwiGLU width of one routed expert"},
    {"shared_expert_intermediate_size",
     &text_spec::shared_expert_intermediate_size,
     1,
     belongs::shared_expert,
     need::required,
     {},
     "SwiGLU width of the gated shared expert"},
    {"decoder_sparse_step",
     &text_spec::decoder_sparse_step,
     1,
     belongs::moe,
     need::step,
     {},
     "MoE on layers with (i+1) % step == 0"},
};

bool is_hybrid(std::string_view type) { return type == kQwen35 || type == kQwen35Moe || type == kQwen3Next; }
bool is_moe(std::string_view type) {
  return type == kQwen3VlMoe || type == kQwen35Moe || type == kQwen3Moe || type == kQwen3Next;
}
bool has_shared_expert(std::string_view type) { return type == kQwen35Moe || type == kQwen3Next; }
bool is_text_only(std::string_view type) { return type == kQwen3 || type == kQwen3Moe || type == kQwen3Next; }

bool applies(belongs owner, std::string_view type) {
  switch (owner) {
    case belongs::all: return true;
    case belongs::hybrid: return is_hybrid(type);
    case belongs::qwen3_vl: return !is_hybrid(type);
    case belongs::moe: return is_moe(type);
    case belongs::shared_expert: return has_shared_expert(type);
  }
  return false;
}

std::string family_name(std::string_view type) {
  if (type == kQwen3 || type == kQwen3Moe) return "Qwen3";
  if (type == kQwen3Next) return "Qwen3-Next";
  if (type == kQwen35 || type == kQwen35Moe) return "Qwen3.5";
  return "Qwen3-VL";
}

// ---- the field tables ------------------------------------------------------------------------------------

using F = family_field;
using T = field_type;
using A = when_absent;

// The table of `type`: every Qwen field (a field of another type is read and refused unless neutral), each with
// the presence it has on this type.
std::vector<F> fields_of(std::string_view type) {
  std::vector<F> fields;
  fields.push_back({"model_type", T::text_model_type, A::none, 0, 0,
                    "when written: model.model_type + \"_text\" (a text-only type: itself)"});
  for (const qwen_int& q : kInts) {
    F f{q.key, T::integer, A::none, 0, q.minimum, q.meaning};
    if (applies(q.owner, type)) {
      switch (q.presence) {
        case need::required: f.absent = A::required; break;
        case need::optional: f.absent = A::fixed; break;
        case need::dense_mlp: f.absent = is_moe(type) ? A::none : A::required; break;
        case need::step:
          f.absent = A::fixed;
          f.default_value = 1;
          break;
        case need::interval:
          f.absent = type == kQwen3Next ? A::fixed : A::required;
          f.default_value = kQwen3NextDefaultInterval;
          break;
      }
    }
    fields.push_back(f);
    if (q.key == "vocab_size") {
      F tie{"tie_word_embeddings", T::boolean, A::format_default, 0, 0, "no FLOP effect; false when absent"};
      tie.top = at_top_level::allowed;
      fields.push_back(tie);
      // Absent, the output gate is what the model type has: always on Qwen3.5, never on Qwen3-VL.
      F gate{"attn_output_gate",
             T::boolean,
             A::fixed,
             is_hybrid(type) ? 1 : 0,
             0,
             "sigmoid output gate of the hybrid types' attention (true there, false elsewhere)"};
      gate.top = at_top_level::must_agree;
      fields.push_back(gate);
    }
    if (q.key == "full_attention_interval") {
      fields.push_back({"layer_types", T::layer_types, A::none, 0, 0,
                        "cross-check of the layout: \"linear_attention\" / \"full_attention\" per layer"});
    }
  }
  fields.push_back({"mlp_only_layers", T::index_list, A::none, 0, 0, "layers forced to a dense SwiGLU"});
  // transformers' default: true for the MoE types but Qwen3MoeConfig's false (no FLOP effect either way).
  fields.push_back(
      {"norm_topk_prob", T::boolean, A::fixed, is_moe(type) && type != kQwen3Moe ? 1 : 0, 0, "no FLOP effect"});
  // Qwen3 and Qwen3-MoE attend over a sliding window where use_sliding_window is true (transformers marks those
  // layers "sliding_attention"); Qwen3-Next's attention has no window (it deletes the setting).
  if (type == kQwen3 || type == kQwen3Moe) {
    F window{"use_sliding_window", T::boolean, A::fixed, 0, 0, "must be false (no window is billed)"};
    window.in_toml = false;
    fields.push_back(window);
  }
  for (F& f : fields) f.checked_by_rules = true;
  return fields;
}

// ---- the rules --------------------------------------------------------------------------------------------

std::optional<spec_violation> check_bounds(std::string field, std::int64_t value, std::int64_t minimum) {
  if (value < minimum) {
    const std::string bound = minimum == 1 ? "> 0" : ">= " + n(minimum);
    return spec_violation{std::move(field), "must be " + bound + " (got " + n(value) + ")"};
  }
  if (value > kMaxSize) {
    return spec_violation{std::move(field), "too large: must be <= 2^31 = " + n(kMaxSize) + " (got " + n(value) + ")"};
  }
  return std::nullopt;
}

// A field of another model type with a value that would change the work; `feature` is what the model type
// lacks ("Gated DeltaNet layers").
std::string not_this_type(const std::string& type, belongs owner, std::string_view feature) {
  const std::string quoted_type = in_quotes(type);
  if ((owner == belongs::moe || owner == belongs::shared_expert) && !is_moe(type)) {
    return "not allowed for model_type " + quoted_type +
           ", a dense model (no experts); a mixture-of-experts model has "
           "model_type " +
           in_quotes(type + "_moe");
  }
  if (owner == belongs::shared_expert) {
    return "not allowed for model_type " + quoted_type + ": " + family_name(type) + " MoE has no shared expert";
  }
  const char* owners = owner == belongs::hybrid ? "the hybrid types \"qwen3_5\", \"qwen3_5_moe\" and \"qwen3_next\""
                                                : "the Qwen3-VL types \"qwen3_vl\" and \"qwen3_vl_moe\"";
  return "not allowed for model_type " + quoted_type + ", which has no " + std::string(feature) + " (a field of " +
         owners + ")";
}

std::string layout_name(const std::string& type) { return "inconsistent " + family_name(type) + " layer layout: "; }

const char* kind_name(layer_kind kind) {
  return kind == layer_kind::full_attention ? "full_attention" : "linear_attention";
}

// The rules of a built Qwen decoder: each field on its own (bounds, fields of another type), then the cross-field
// invariants (GQA, Gated DeltaNet heads, the interval). A vision tower is vlm_families.cpp's (check_qwen3_vision).
std::optional<spec_violation> check_qwen(const model_spec& spec) {
  const text_spec& t = spec.text;
  const std::string& type_name = spec.model_type;
  const std::string type = in_quotes(type_name);
  const bool hybrid = is_hybrid(type_name);
  const bool moe = is_moe(type_name);
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
  for (const qwen_int& field : kInts) {
    const std::int64_t value = t.*field.member;
    const std::string path = text_path(field.key);
    if (!applies(field.owner, type_name)) {
      if (value != 0) return spec_violation{path, not_this_type(type_name, field.owner, field.feature)};
    } else if (field.presence == need::dense_mlp && moe && value == 0) {
      continue;  // checked below, once the MoE layout is known to be valid
    } else if (auto violation = check_bounds(path, value, field.minimum)) {
      return violation;
    }
  }
  // transformers' Qwen3.5 and Qwen3-Next attention (Qwen3NextAttention) always builds q_proj as hidden -> 2 x
  // heads x head_dim, query and sigmoid gate; its configs have no switch for it. So the gate comes with the type.
  if (hybrid && !t.attn_output_gate) {
    return spec_violation{"text_config.attn_output_gate",
                          "must be true for model_type " + type + ": " + family_name(type_name) +
                              " attention always has the sigmoid output "
                              "gate (transformers builds q_proj as hidden -> 2 x heads x head_dim, with no setting to "
                              "turn it off); write true or leave the key out"};
  }
  if (!hybrid && t.attn_output_gate) {
    return spec_violation{"text_config.attn_output_gate",
                          not_this_type(type_name, belongs::hybrid, "attention output gate")};
  }
  if (!moe) {
    if (!t.mlp_only_layers.empty()) {
      return spec_violation{"text_config.mlp_only_layers", not_this_type(type_name, belongs::moe, {})};
    }
    if (t.norm_topk_prob) {
      return spec_violation{"text_config.norm_topk_prob", not_this_type(type_name, belongs::moe, {})};
    }
  } else {
    if (t.num_experts_per_tok > t.num_experts) {
      return spec_violation{
          "text_config.num_experts_per_tok",
          "must be <= text_config.num_experts = " + n(t.num_experts) + " (got " + n(t.num_experts_per_tok) + ")"};
    }
    const bool qwen35 = type_name == kQwen35Moe;
    if (qwen35 && t.decoder_sparse_step != 1) {
      return spec_violation{"text_config.decoder_sparse_step", "must be 1 for model_type " + type +
                                                                   ": every Qwen3.5 MoE layer is an MoE block (got " +
                                                                   n(t.decoder_sparse_step) + ")"};
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
                                        n(t.num_hidden_layers) + ") (got " + n(index) + ")"};
      }
      if (!seen.insert(index).second) return spec_violation{path, "duplicate layer index " + n(index)};
    }
    if (t.num_moe_layers() == 0) {
      return spec_violation{
          t.mlp_only_layers.empty() ? "text_config.decoder_sparse_step" : "text_config.mlp_only_layers",
          "no decoder layer would be an MoE block (decoder_sparse_step = " + n(t.decoder_sparse_step) +
              ", num_hidden_layers = " + n(t.num_hidden_layers) + ")"};
    }
    if (t.num_dense_mlp_layers() > 0) {
      if (auto violation = check_bounds("text_config.intermediate_size", t.intermediate_size, 1)) return violation;
    }
  }
  if (spec.vision && is_text_only(type_name)) {
    return spec_violation{"vision_config", no_vision_tower(*find_family(type_name))};
  }
  // The cross-field invariants.
  if (t.num_attention_heads % t.num_key_value_heads != 0) {
    return spec_violation{"text_config.num_key_value_heads",
                          "must divide text_config.num_attention_heads = " + n(t.num_attention_heads) + " (got " +
                              n(t.num_key_value_heads) + ")"};
  }
  if (hybrid && t.linear_num_value_heads % t.linear_num_key_heads != 0) {
    return spec_violation{"text_config.linear_num_value_heads",
                          "must be a multiple of text_config.linear_num_key_heads = " + n(t.linear_num_key_heads) +
                              " (got " + n(t.linear_num_value_heads) + ")"};
  }
  // Layer layout: the interval leaves at least one full attention layer (layer i is full attention when
  // (i + 1) % interval == 0; nothing is stored per layer).
  if (hybrid && t.full_attention_interval > t.num_hidden_layers) {
    return spec_violation{"text_config.full_attention_interval",
                          layout_name(type_name) + "full_attention_interval = " + n(t.full_attention_interval) +
                              " exceeds num_hidden_layers = " + n(t.num_hidden_layers) +
                              ", so no layer would be full attention"};
  }
  return std::nullopt;
}

// A layer_types list as the document writes it, against the layout the interval gives (the spec keeps no list).
std::optional<spec_violation> check_written_layer_types(const model_spec& spec,
                                                        const std::vector<layer_kind>& written) {
  const text_spec& t = spec.text;
  if (static_cast<std::int64_t>(written.size()) != t.num_hidden_layers) {
    return spec_violation{"text_config.layer_types", layout_name(spec.model_type) + std::to_string(written.size()) +
                                                         " entries but num_hidden_layers = " + n(t.num_hidden_layers)};
  }
  for (std::size_t i = 0; i < written.size(); ++i) {
    const layer_kind expected = t.layer_type(static_cast<std::int64_t>(i));
    if (written[i] == expected) continue;
    const std::string reason = is_hybrid(spec.model_type)
                                   ? "full_attention_interval = " + n(t.full_attention_interval) + " makes it " +
                                         in_quotes(kind_name(expected))
                                   : "model_type " + in_quotes(spec.model_type) + " has only full_attention layers";
    return spec_violation{"text_config.layer_types[" + std::to_string(i) + "]",
                          layout_name(spec.model_type) + "layer " + std::to_string(i) + " is " +
                              in_quotes(kind_name(written[i])) + " but " + reason};
  }
  return std::nullopt;
}

// The values into spec.text; the layer_types entries and use_sliding_window as written; then the rules, and the
// written layer_types against the layout the rules accepted.
std::optional<spec_violation> build_qwen(const field_values& v, model_spec& spec) {
  text_spec& t = spec.text;
  for (const qwen_int& q : kInts) t.*q.member = v.integer(q.key);
  t.tie_word_embeddings = v.boolean("tie_word_embeddings");
  t.attn_output_gate = v.boolean("attn_output_gate");
  t.mlp_only_layers = v["mlp_only_layers"].indexes;
  t.norm_topk_prob = v.boolean("norm_topk_prob");
  std::optional<std::vector<layer_kind>> written;
  if (v["layer_types"].present) {
    const std::vector<std::string>& names = v["layer_types"].names;
    written.emplace();
    written->reserve(names.size());
    for (std::size_t i = 0; i < names.size(); ++i) {
      const std::string at = "text_config.layer_types[" + std::to_string(i) + "]";
      if (names[i] == kFullAttention) {
        written->push_back(layer_kind::full_attention);
      } else if (names[i] == kLinearAttention) {
        written->push_back(layer_kind::linear_attention);
      } else if (names[i] == kSlidingAttention) {
        return spec_violation{at, std::string(kNoSlidingWindow)};
      } else {
        return spec_violation{at, "expected \"linear_attention\" or \"full_attention\", got " + in_quotes(names[i])};
      }
    }
  }
  if (v.adapter->field("use_sliding_window") != nullptr && v.boolean("use_sliding_window")) {
    return spec_violation{"text_config.use_sliding_window", std::string(kNoSlidingWindow)};
  }
  if (auto bad = check_qwen(spec)) return bad;
  if (written) return check_written_layer_types(spec, *written);
  return std::nullopt;
}

}  // namespace

const std::vector<const family_adapter*>& qwen_text_adapters() {
  static const family_adapter qwen3(kQwen3, "Qwen3", fields_of(kQwen3), build_qwen, check_qwen, kVisionHint);
  static const family_adapter qwen3_moe(kQwen3Moe, "Qwen3", fields_of(kQwen3Moe), build_qwen, check_qwen, kVisionHint);
  static const family_adapter qwen3_next(kQwen3Next, "Qwen3-Next", fields_of(kQwen3Next), build_qwen, check_qwen,
                                         kVisionHint);
  static const std::vector<const family_adapter*> all = {&qwen3, &qwen3_moe, &qwen3_next};
  return all;
}

const std::vector<const family_adapter*>& qwen_vlm_decoders() {
  static const family_adapter vl(kQwen3Vl, "Qwen3-VL", fields_of(kQwen3Vl), build_qwen, check_qwen);
  static const family_adapter q35(kQwen35, "Qwen3.5", fields_of(kQwen35), build_qwen, check_qwen);
  static const family_adapter vl_moe(kQwen3VlMoe, "Qwen3-VL", fields_of(kQwen3VlMoe), build_qwen, check_qwen);
  static const family_adapter q35_moe(kQwen35Moe, "Qwen3.5", fields_of(kQwen35Moe), build_qwen, check_qwen);
  static const std::vector<const family_adapter*> all = {&vl, &q35, &vl_moe, &q35_moe};
  return all;
}

// The shared helpers of the Qwen3 vision tower's rules (qwen3_vision.cpp).
bool is_qwen_hybrid(std::string_view type) { return is_hybrid(type); }
std::string qwen3_vl_only(const std::string& type, std::string_view feature) {
  return not_this_type(type, belongs::qwen3_vl, feature);
}
std::optional<spec_violation> qwen_bounds(std::string field, std::int64_t value, std::int64_t minimum) {
  return check_bounds(std::move(field), value, minimum);
}

bool has_qwen3_vision_tower(std::string_view model_type) {
  return model_type == kQwen3Vl || model_type == kQwen35 || model_type == kQwen3VlMoe || model_type == kQwen35Moe;
}

}  // namespace flopmeter::detail
