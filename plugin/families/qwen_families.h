// plugin/families/qwen_families.h — internal: the Qwen3 family adapters (qwen_families.cpp). The text-only types
// qwen3, qwen3_moe and qwen3_next are model types of their own (find_family); the decoders of the vision-language
// types qwen3_vl, qwen3_vl_moe, qwen3_5 and qwen3_5_moe are found by find_decoder, and vlm_families.cpp reads their
// vision tower (the Qwen3-VL patch-merger ViT) with check_qwen3_vision's rules.
// Not installed. Thread-safety: immutable tables and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "families/families.h"
#include "families/spec_rules.h"
#include "flopmeter/model_spec.h"

namespace flopmeter::detail {

// qwen3, qwen3_moe, qwen3_next: registered by model_type (families.cpp lists them first).
const std::vector<const family_adapter*>& qwen_text_adapters();
// The decoders of qwen3_vl, qwen3_5, qwen3_vl_moe, qwen3_5_moe, each under its vision-language model_type.
const std::vector<const family_adapter*>& qwen_vlm_decoders();

// Whether `model_type` is a vision-language type with the Qwen3-VL vision tower (qwen3_vl, qwen3_5 and their _moe).
bool has_qwen3_vision_tower(std::string_view model_type);
// The rules of that tower (spec.vision set): sizes, DeepStack indexes, its parts, the width it writes into
// (qwen3_vision.cpp).
std::optional<spec_violation> check_qwen3_vision(const model_spec& spec);

// What qwen3_vision.cpp shares with the decoders' rules: whether a type is one of the hybrid types (qwen3_5,
// qwen3_5_moe, qwen3_next); the refusal of a field only the Qwen3-VL types have (`feature`: "DeepStack mergers") on
// another type; a size's bounds (minimum, 2^31), named at `field`.
bool is_qwen_hybrid(std::string_view type);
std::string qwen3_vl_only(const std::string& type, std::string_view feature);
std::optional<spec_violation> qwen_bounds(std::string field, std::int64_t value, std::int64_t minimum);

}  // namespace flopmeter::detail
