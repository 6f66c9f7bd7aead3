// plugin/families/qwen3_vision.cpp — the rules of the Qwen3-VL / Qwen3.5 vision tower (qwen_families.h:
// check_qwen3_vision): its sizes, the DeepStack indexes, its parts and the width it writes into. vlm_families.cpp
// reads the tower through its table; the decoders are qwen_families.cpp's.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "families/qwen_families.h"

namespace flopmeter::detail {
namespace {

std::string n(std::int64_t v) { return std::to_string(v); }

// Vision tower sizes, in SCHEMA.md order (the DeepStack list is a table field of its own).
struct vision_int {
  std::string_view key;
  std::int64_t vision_spec::*member;
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

}  // namespace

std::optional<spec_violation> check_qwen3_vision(const model_spec& spec) {
  const vision_spec& v = *spec.vision;
  const std::string& type = spec.model_type;
  for (const vision_int& field : kVisionInts) {
    if (auto violation = qwen_bounds("vision_config." + std::string(field.key), v.*field.member, 1)) return violation;
  }
  // Each index adds a merger (the largest vision term after the blocks); Qwen3.5 runs none.
  if (is_qwen_hybrid(type) && !v.deepstack_visual_indexes.empty()) {
    return spec_violation{"vision_config.deepstack_visual_indexes",
                          qwen3_vl_only(type, "DeepStack mergers") + "; write [] or leave it out"};
  }
  if (v.mlp != vision_mlp_kind::plain || v.projector != vision_projector_kind::patch_merger || v.window_size != 0 ||
      !v.fullatt_block_indexes.empty() || v.cls_token || v.image_size != 0 || v.bidirectional_image) {
    return spec_violation{"vision_config",
                          "a Qwen3-VL / Qwen3.5 vision tower has a plain MLP, the patch merger, no "
                          "windows, no CLS token, any grid size and no image blocks"};
  }
  if (!bounded_patch_input_size(v)) {
    return spec_violation{"vision_config",
                          "patch embedding input in_channels * temporal_patch_size * "
                          "patch_size^2 is too large: must be <= 2^31 = " +
                              n(kMaxSize)};
  }
  if (v.hidden_size % v.num_heads != 0) {
    return spec_violation{"vision_config.num_heads", "must divide vision_config.hidden_size = " + n(v.hidden_size) +
                                                         " (got " + n(v.num_heads) + ")"};
  }
  if (v.out_hidden_size != spec.text.hidden_size) {
    return spec_violation{
        "vision_config.out_hidden_size",
        "must equal text_config.hidden_size = " + n(spec.text.hidden_size) + " (got " + n(v.out_hidden_size) + ")"};
  }
  std::set<std::int64_t> seen;
  for (std::size_t i = 0; i < v.deepstack_visual_indexes.size(); ++i) {
    const std::string field = "vision_config.deepstack_visual_indexes[" + std::to_string(i) + "]";
    const std::int64_t index = v.deepstack_visual_indexes[i];
    if (index < 0 || index >= v.depth) {
      return spec_violation{
          field, "must be a ViT block index in [0, vision_config.depth = " + n(v.depth) + ") (got " + n(index) + ")"};
    }
    if (!seen.insert(index).second) return spec_violation{field, "duplicate DeepStack index " + n(index)};
  }
  return std::nullopt;
}

}  // namespace flopmeter::detail
