// plugin/families/vlm_tables.cpp — the vision-language families (vlm_families.h): one vlm_family per model_type,
// with its decoder's model_type, its vision_config fields in the config.json's names (SCHEMA.md's order), its build
// step (the values -> a vision_spec), what its tower is for the rules, and the keys its config.json gives the
// vision_spec members. vlm_families.cpp reads, builds and checks through them; no other file tests these types.

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "families/vlm_families.h"

namespace flopmeter::detail {
namespace {

using T = vlm_field_type;

// The Qwen3-VL / Qwen3.5 tower: check_qwen3_vision's rules.
const vision_tower_kind kQwen3Tower{true};

constexpr std::string_view kQwen2Vl = "qwen2_vl";
constexpr std::string_view kQwen25Vl = "qwen2_5_vl";
constexpr std::string_view kInternVl = "internvl";
constexpr std::string_view kGemma3 = "gemma3";

std::string n(std::int64_t v) { return std::to_string(v); }
bool whole(double x) { return std::floor(x) == x; }

// Qwen3-VL and Qwen3.5 (dense and MoE): every size as written.
std::optional<spec_violation> build_qwen3_vision(const vlm_values& v, const text_spec&, vision_spec& out) {
  out.depth = v.integer("vision_config.depth");
  out.hidden_size = v.integer("vision_config.hidden_size");
  out.num_heads = v.integer("vision_config.num_heads");
  out.intermediate_size = v.integer("vision_config.intermediate_size");
  out.out_hidden_size = v.integer("vision_config.out_hidden_size");
  out.deepstack_visual_indexes = v["vision_config.deepstack_visual_indexes"].indexes;
  out.patch_size = v.integer("vision_config.patch_size");
  out.temporal_patch_size = v.integer("vision_config.temporal_patch_size");
  out.spatial_merge_size = v.integer("vision_config.spatial_merge_size");
  out.in_channels = v.integer("vision_config.in_channels");
  return std::nullopt;
}

// Qwen2-VL: the ViT's width is embed_dim, its MLP embed_dim * mlp_ratio wide; hidden_size is the merger's output.
std::optional<spec_violation> build_qwen2_vl(const vlm_values& v, const text_spec&, vision_spec& out) {
  out.depth = v.integer("vision_config.depth");
  out.hidden_size = v.integer("vision_config.embed_dim");
  out.num_heads = v.integer("vision_config.num_heads");
  const double width = static_cast<double>(out.hidden_size) * v["vision_config.mlp_ratio"].number;
  if (!whole(width) || width > static_cast<double>(kMaxSize)) {
    return spec_violation{"vision_config.mlp_ratio",
                          "embed_dim * mlp_ratio must be a whole number of at most 2^31 (the MLP's width)"};
  }
  out.intermediate_size = static_cast<std::int64_t>(width);
  out.out_hidden_size = v.integer("vision_config.hidden_size");
  out.patch_size = v.integer("vision_config.patch_size");
  out.temporal_patch_size = v.integer("vision_config.temporal_patch_size");
  out.spatial_merge_size = v.integer("vision_config.spatial_merge_size");
  out.in_channels = v.integer("vision_config.in_chans");
  return std::nullopt;
}

// Qwen2.5-VL: a gated MLP and window attention outside fullatt_block_indexes.
std::optional<spec_violation> build_qwen2_5_vl(const vlm_values& v, const text_spec&, vision_spec& out) {
  out.depth = v.integer("vision_config.depth");
  out.hidden_size = v.integer("vision_config.hidden_size");
  out.num_heads = v.integer("vision_config.num_heads");
  out.intermediate_size = v.integer("vision_config.intermediate_size");
  out.out_hidden_size = v.integer("vision_config.out_hidden_size");
  out.patch_size = v.integer("vision_config.patch_size");
  out.temporal_patch_size = v.integer("vision_config.temporal_patch_size");
  out.spatial_merge_size = v.integer("vision_config.spatial_merge_size");
  out.in_channels = v.integer("vision_config.in_chans");
  out.mlp = vision_mlp_kind::gated;
  out.window_size = v.integer("vision_config.window_size");
  out.fullatt_block_indexes = v["vision_config.fullatt_block_indexes"].indexes;
  return std::nullopt;
}

// InternVL and Gemma 3: 2-D patches of square images, the projector to the decoder's width.
std::optional<spec_violation> build_tiled(const vlm_values& v, const text_spec& text, vision_spec& out) {
  out.depth = v.integer("vision_config.num_hidden_layers");
  out.hidden_size = v.integer("vision_config.hidden_size");
  out.num_heads = v.integer("vision_config.num_attention_heads");
  out.intermediate_size = v.integer("vision_config.intermediate_size");
  out.image_size = v.integer("vision_config.image_size");
  out.patch_size = v.integer("vision_config.patch_size");
  out.in_channels = v.integer("vision_config.num_channels");
  out.temporal_patch_size = 1;
  out.out_hidden_size = text.hidden_size;
  if (out.image_size % out.patch_size != 0) {
    return spec_violation{"vision_config.image_size", "must be a multiple of patch_size = " + n(out.patch_size) +
                                                          " (got " + n(out.image_size) + ")"};
  }
  return std::nullopt;
}

// InternVL: pixel shuffle by r merges 1/r x 1/r patches into one token: 1/r must be a whole number.
std::optional<spec_violation> build_internvl(const vlm_values& v, const text_spec& text, vision_spec& out) {
  if (auto bad = build_tiled(v, text, out)) return bad;
  const double inverse = 1.0 / v["downsample_ratio"].number;
  const double rounded = std::round(inverse);
  if (std::fabs(inverse - rounded) > 1e-9 || rounded < 1) {
    return spec_violation{"downsample_ratio",
                          "1 / downsample_ratio must be a whole number of patches a side (0.5: 2 x 2 patches per "
                          "token)"};
  }
  out.spatial_merge_size = static_cast<std::int64_t>(rounded);
  out.cls_token = true;
  out.projector = vision_projector_kind::pixel_shuffle_mlp;
  return std::nullopt;
}

// Gemma 3: AvgPool2d of kernel (image_size / patch_size) / sqrt(mm_tokens_per_image).
std::optional<spec_violation> build_gemma3(const vlm_values& v, const text_spec& text, vision_spec& out) {
  if (auto bad = build_tiled(v, text, out)) return bad;
  const std::int64_t side = out.image_size / out.patch_size;
  const std::int64_t tokens = v.integer("mm_tokens_per_image");
  const auto per_side = static_cast<std::int64_t>(std::llround(std::sqrt(static_cast<double>(tokens))));
  if (per_side * per_side != tokens || side % per_side != 0) {
    return spec_violation{
        "mm_tokens_per_image",
        "must be a square k^2 whose side k divides image_size / patch_size = " + n(side) + " (got " + n(tokens) + ")"};
  }
  out.spatial_merge_size = side / per_side;
  out.projector = vision_projector_kind::avgpool_linear;
  out.bidirectional_image = true;
  return std::nullopt;
}

// The Qwen3-VL vision tower (Qwen3-VL and Qwen3.5, dense and MoE): every field required, SCHEMA.md's order.
// Qwen3-VL merges DeepStack features from the ViT blocks deepstack_visual_indexes names: one merger each, the
// largest vision term after the blocks. Reading an absent list as [] undercounts it (4x for the usual three);
// transformers itself would fill in its class default, [8, 16, 24], which a config.json saved with only its
// differences from the defaults leaves out. Neither guess is safe: the file must say which. Qwen3.5 has no
// DeepStack: an absent list is [] (its checkpoints write [] or leave it out).
std::vector<vlm_field> qwen3_vision_fields(bool deepstack) {
  return {
      {"vision_config.depth", T::integer, true, 0, "ViT blocks"},
      {"vision_config.hidden_size", T::integer, true, 0, "the ViT's width"},
      {"vision_config.num_heads", T::integer, true, 0, "ViT attention heads (divide hidden_size)"},
      {"vision_config.intermediate_size", T::integer, true, 0, "plain GELU MLP width (not gated)"},
      {"vision_config.out_hidden_size", T::integer, true, 0, "the patch merger's output width (= decoder width)"},
      {"vision_config.deepstack_visual_indexes", T::index_list, deepstack, 0,
       "ViT blocks with a DeepStack merger each (Qwen3-VL; Qwen3.5: [])",
       deepstack ? ": Qwen3-VL adds one merger per listed ViT block (transformers' default is [8, 16, 24]; write [] "
                   "for none)"
                 : ""},
      {"vision_config.patch_size", T::integer, true, 0, "patch edge in pixels"},
      {"vision_config.temporal_patch_size", T::integer, true, 0, "frames per temporal patch"},
      {"vision_config.spatial_merge_size", T::integer, true, 0, "patches a side per merged token"},
      {"vision_config.in_channels", T::integer, true, 0, "image channels"},
  };
}

}  // namespace

const std::vector<const vlm_family*>& all_vlm_families() {
  static const vlm_family qwen3_vl{"qwen3_vl", "Qwen3-VL",         "qwen3_vl",  false, qwen3_vision_fields(true),
                                   true,       build_qwen3_vision, kQwen3Tower, {}};
  static const vlm_family qwen3_5{"qwen3_5", "Qwen3.5",          "qwen3_5",   false, qwen3_vision_fields(false),
                                  true,      build_qwen3_vision, kQwen3Tower, {}};
  static const vlm_family qwen3_vl_moe{
      "qwen3_vl_moe", "Qwen3-VL",         "qwen3_vl_moe", false, qwen3_vision_fields(true),
      true,           build_qwen3_vision, kQwen3Tower,    {}};
  static const vlm_family qwen3_5_moe{
      "qwen3_5_moe", "Qwen3.5",          "qwen3_5_moe", false, qwen3_vision_fields(false),
      true,          build_qwen3_vision, kQwen3Tower,   {}};
  static const vlm_family qwen2_vl{
      kQwen2Vl,
      "Qwen2-VL",
      "qwen2",
      true,
      {
          {"vision_config.depth", T::integer, true, 0, "ViT blocks"},
          {"vision_config.embed_dim", T::integer, true, 0, "the ViT's width"},
          {"vision_config.num_heads", T::integer, true, 0, "ViT attention heads (divide embed_dim)"},
          {"vision_config.mlp_ratio", T::number, false, 4, "MLP width = embed_dim * mlp_ratio (fc1, QuickGELU, fc2)"},
          {"vision_config.hidden_size", T::integer, true, 0,
           "the patch merger's OUTPUT width (= the decoder's hidden_size), not the ViT's width"},
          {"vision_config.patch_size", T::integer, false, 14, "patch edge in pixels"},
          {"vision_config.temporal_patch_size", T::integer, false, 2, "frames per temporal patch"},
          {"vision_config.spatial_merge_size", T::integer, false, 2, "patches a side per merged token"},
          {"vision_config.in_chans", T::integer, false, 3, "image channels (transformers also reads in_channels)"},
      },
      false,
      build_qwen2_vl,
      {},
      {{"hidden_size", "vision_config.embed_dim"},
       {"intermediate_size", "vision_config.mlp_ratio"},
       {"out_hidden_size", "vision_config.hidden_size"},
       {"in_channels", "vision_config.in_chans"}}};
  static const vlm_family qwen2_5_vl{
      kQwen25Vl,
      "Qwen2.5-VL",
      "qwen2",
      true,
      {
          {"vision_config.depth", T::integer, true, 0, "ViT blocks"},
          {"vision_config.hidden_size", T::integer, true, 0, "the ViT's width"},
          {"vision_config.num_heads", T::integer, true, 0, "ViT attention heads (divide hidden_size)"},
          {"vision_config.intermediate_size", T::integer, true, 0, "gated SiLU MLP width (gate, up, down)"},
          {"vision_config.out_hidden_size", T::integer, true, 0, "the patch merger's output width (= decoder width)"},
          {"vision_config.patch_size", T::integer, false, 14, "patch edge in pixels"},
          {"vision_config.temporal_patch_size", T::integer, false, 2, "frames per temporal patch"},
          {"vision_config.spatial_merge_size", T::integer, false, 2, "patches a side per merged token"},
          {"vision_config.in_chans", T::integer, false, 3, "image channels (transformers also reads in_channels)"},
          {"vision_config.window_size", T::integer, false, 112,
           "window edge in pixels (a multiple of patch_size * spatial_merge_size)"},
          {"vision_config.fullatt_block_indexes", T::index_list, true, 0,
           "blocks that attend to the whole frame; the others attend inside windows"},
      },
      false,
      build_qwen2_5_vl,
      {false, true, true},
      {{"in_channels", "vision_config.in_chans"}}};
  static const vlm_family internvl{
      kInternVl,
      "InternVL",
      "",
      false,
      {
          {"vision_config.num_hidden_layers", T::integer, true, 0, "InternViT blocks"},
          {"vision_config.hidden_size", T::integer, true, 0, "InternViT's width"},
          {"vision_config.num_attention_heads", T::integer, true, 0, "InternViT attention heads"},
          {"vision_config.intermediate_size", T::integer, true, 0, "MLP width (fc1, GELU, fc2)"},
          {"vision_config.image_size", T::side, false, 448, "tile edge in pixels (448 or [448, 448])"},
          {"vision_config.patch_size", T::side, false, 14, "patch edge in pixels (14 or [14, 14])"},
          {"vision_config.num_channels", T::integer, false, 3, "image channels"},
          {"downsample_ratio", T::ratio, false, 0.5,
           "pixel shuffle: 1 / downsample_ratio patches a side form one decoder token"},
      },
      false,
      build_internvl,
      {false, false, false, true, true, vision_projector_kind::pixel_shuffle_mlp},
      {{"depth", "vision_config.num_hidden_layers"},
       {"num_heads", "vision_config.num_attention_heads"},
       {"out_hidden_size", "text_config.hidden_size"},
       {"in_channels", "vision_config.num_channels"},
       {"spatial_merge_size", "downsample_ratio"}}};
  static const vlm_family gemma3{
      kGemma3,
      "Gemma 3",
      "gemma3_text",
      false,
      {
          {"vision_config.num_hidden_layers", T::integer, true, 0, "SigLIP blocks"},
          {"vision_config.hidden_size", T::integer, true, 0, "SigLIP's width"},
          {"vision_config.num_attention_heads", T::integer, true, 0, "SigLIP attention heads"},
          {"vision_config.intermediate_size", T::integer, true, 0, "MLP width (fc1, GELU, fc2)"},
          {"vision_config.image_size", T::integer, true, 0, "image edge in pixels (896)"},
          {"vision_config.patch_size", T::integer, true, 0, "patch edge in pixels (14)"},
          {"vision_config.num_channels", T::integer, false, 3, "image channels"},
          {"mm_tokens_per_image", T::integer, false, 256,
           "decoder tokens per image after average pooling (a square number)"},
      },
      false,
      build_gemma3,
      {false, false, false, false, true, vision_projector_kind::avgpool_linear, true},
      {{"depth", "vision_config.num_hidden_layers"},
       {"num_heads", "vision_config.num_attention_heads"},
       {"out_hidden_size", "text_config.hidden_size"},
       {"in_channels", "vision_config.num_channels"},
       {"spatial_merge_size", "mm_tokens_per_image"}}};
  static const std::vector<const vlm_family*> all = {&qwen3_vl, &qwen3_5,    &qwen3_vl_moe, &qwen3_5_moe,
                                                     &qwen2_vl, &qwen2_5_vl, &internvl,     &gemma3};
  return all;
}

}  // namespace flopmeter::detail
