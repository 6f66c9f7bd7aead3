// plugin/families/vlm_tables.cpp — the vision field tables of the vision-language families (vlm_families.h): one
// vlm_family per model_type, with its decoder's model_type and its vision_config fields in the config.json's names,
// SCHEMA.md's order; vlm_families.cpp reads and builds through them.

#include <cstdint>
#include <string_view>
#include <vector>

#include "families/vlm_families.h"

namespace flopmeter::detail {
namespace {

using T = vlm_field_type;

constexpr std::string_view kQwen2Vl = "qwen2_vl";
constexpr std::string_view kQwen25Vl = "qwen2_5_vl";
constexpr std::string_view kInternVl = "internvl";
constexpr std::string_view kGemma3 = "gemma3";

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
  static const vlm_family qwen3_vl{"qwen3_vl", "Qwen3-VL", "qwen3_vl", false, qwen3_vision_fields(true), true};
  static const vlm_family qwen3_5{"qwen3_5", "Qwen3.5", "qwen3_5", false, qwen3_vision_fields(false), true};
  static const vlm_family qwen3_vl_moe{
      "qwen3_vl_moe", "Qwen3-VL", "qwen3_vl_moe", false, qwen3_vision_fields(true), true};
  static const vlm_family qwen3_5_moe{"qwen3_5_moe", "Qwen3.5", "qwen3_5_moe", false, qwen3_vision_fields(false), true};
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
      }};
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
      }};
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
      }};
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
      }};
  static const std::vector<const vlm_family*> all = {&qwen3_vl, &qwen3_5,    &qwen3_vl_moe, &qwen3_5_moe,
                                                     &qwen2_vl, &qwen2_5_vl, &internvl,     &gemma3};
  return all;
}

}  // namespace flopmeter::detail
