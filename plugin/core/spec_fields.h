// plugin/core/spec_fields.h — internal to the model_spec rules: the model types, which fields each one has,
// and the tables of the integer fields, shared by the checks (spec_rules.cpp) and the reading of a document
// through a field_reader (spec_reader.cpp). Loaders use spec_rules.h, never this header.
// Not installed. Thread-safety: immutable tables and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/printable_text.h"
#include "flopmeter/model_spec.h"

namespace flopmeter::detail {

inline constexpr std::string_view kQwen3Vl = "qwen3_vl";
inline constexpr std::string_view kQwen35 = "qwen3_5";
inline constexpr std::string_view kQwen3VlMoe = "qwen3_vl_moe";
inline constexpr std::string_view kQwen35Moe = "qwen3_5_moe";
// The text-only decoders (config.json keeps the decoder's fields at the top level, no text_config object):
// Qwen3 is the Qwen3-VL text decoder, Qwen3-MoE the Qwen3-VL-MoE one, Qwen3-Next the hybrid Gated DeltaNet +
// gated attention decoder with a gated shared expert (the Qwen3.5-MoE text decoder, with the MoE layout of
// Qwen3-MoE: decoder_sparse_step and mlp_only_layers are honoured).
inline constexpr std::string_view kQwen3 = "qwen3";
inline constexpr std::string_view kQwen3Moe = "qwen3_moe";
inline constexpr std::string_view kQwen3Next = "qwen3_next";
// transformers' Qwen3NextConfig builds layer_types with this interval when the config.json gives neither.
inline constexpr std::int64_t kQwen3NextDefaultInterval = 4;
inline constexpr std::string_view kFullAttention = "full_attention";
inline constexpr std::string_view kLinearAttention = "linear_attention";
inline constexpr std::string_view kText = "text_config";
inline constexpr std::string_view kVision = "vision_config";
inline constexpr std::string_view kDeltaNet = "Gated DeltaNet layers";
inline constexpr std::string_view kSlidingAttention = "sliding_attention";
inline constexpr std::string_view kNoSlidingWindow =
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
inline constexpr text_int kTextInts[] = {
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

inline constexpr vision_int kVisionInts[] = {
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

inline std::string path_of(std::string_view table, std::string_view key) {
  return std::string(table) + "." + std::string(key);
}

// `text` quoted for a message (detail::quoted; spelled out so that a std::string argument never finds
// std::quoted by argument-dependent lookup).
inline std::string in_quotes(std::string_view text) { return detail::quoted(text); }

inline bool is_hybrid(const model_spec& spec) {
  return spec.model_type == kQwen35 || spec.model_type == kQwen35Moe || spec.model_type == kQwen3Next;
}
inline bool is_moe(const model_spec& spec) {
  return spec.model_type == kQwen3VlMoe || spec.model_type == kQwen35Moe || spec.model_type == kQwen3Moe ||
         spec.model_type == kQwen3Next;
}
inline bool has_shared_expert(const model_spec& spec) {
  return spec.model_type == kQwen35Moe || spec.model_type == kQwen3Next;
}

inline bool applies(belongs owner, const model_spec& spec) {
  switch (owner) {
    case belongs::all: return true;
    case belongs::hybrid: return is_hybrid(spec);
    case belongs::qwen3_vl: return !is_hybrid(spec);
    case belongs::moe: return is_moe(spec);
    case belongs::shared_expert: return has_shared_expert(spec);
  }
  return false;
}

}  // namespace flopmeter::detail
