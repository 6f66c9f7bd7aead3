// Tests of the vision-language families beyond Qwen3-VL (families/vlm_families.cpp, the vision tower of
// arch/architecture.cpp, the vision counts of count/batch_counts.cpp): one small config.json per family with its
// coefficients and a batch's FLOPs derived by hand below, Qwen2.5-VL's window pairs against a brute-force
// replica of transformers' get_window_index, frozen parts and LoRA on the new towers, the real config.json files
// through every entry point, and each bad input refused with the field and the reason.
//
// Conventions of every derivation: a GEMM d_in -> d_out costs d_in*d_out multiply-adds per token; training costs
// 6 FLOPs per multiply-add (forward, input gradient, weight gradient), the patch embedding 4 (its input is pixels);
// attention costs, per (query, key) pair and layer, heads*(qk + v) multiply-adds (QK^T and PV): 2*hidden in a ViT.

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "flopmeter/c_api.h"
#include "flopmeter/error.h"
#include "flopmeter/flop_model.h"
#include "flopmeter/megatron.h"
#include "flopmeter/model_config.h"
#include "flopmeter/model_spec.h"

namespace flopmeter {
namespace {

namespace fs = std::filesystem;

model_spec from_json(const std::string& text) { return parse_hf_config(text, "cfg.json"); }

std::string error_of(const std::string& json_text) {
  try {
    (void)from_json(json_text);
  } catch (const error& e) {
    return e.what();
  }
  return "(no error)";
}

// "cfg.json:1:COL: key 'KEY': " for the value that follows `marker` on a one-line document.
std::string at(const std::string& text, const std::string& marker, const std::string& key) {
  const std::size_t col = text.find(marker) + marker.size() + 1;
  return "cfg.json:1:" + std::to_string(col) + ": key '" + key + "': ";
}

std::string data_path(const std::string& file) { return std::string(FLOPMETER_SOURCE_DIR) + "/tests/data/vlm/" + file; }
std::string config_path(const std::string& file) {
  return std::string(FLOPMETER_SOURCE_DIR) + "/model_configs/" + file;
}

// The decoder of the small configs (qwen2: head_dim = 64 / 4 = 16): h = 64, 4 query heads, 2 kv heads, vocab 100,
// 2 layers. Per layer: q 64*64 + k 64*32 + v 64*32 + o 64*64 = 12,288; gated MLP 3*64*96 = 18,432; LM head 6,400.
// dense_per_token = 6 * (2*(12,288 + 18,432) + 6,400) = 407,040; text_attn_pair = 6 * 2 * 4*(16+16) = 1,536.
const std::string kDecoder = R"("hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, )"
                             R"("num_key_value_heads": 2, "intermediate_size": 96, "vocab_size": 100)";
constexpr std::int64_t kDense = 407040, kTextPair = 1536;

// Qwen2.5-VL, flat like the hub files: ViT width 32, 2 heads, gated MLP of 48, 3 blocks of which block 1 attends
// to the whole frame and blocks 0 and 2 inside windows of 8 pixels = 8 / 2 / 2 = 2 merged tokens a side.
std::string qwen25(const std::string& vision_extra = R"("window_size": 8, "fullatt_block_indexes": [1])") {
  return R"({"model_type": "qwen2_5_vl", )" + kDecoder +
         R"(, "vision_config": {"depth": 3, "hidden_size": 32, "num_heads": 2, "intermediate_size": 48, )"
         R"("out_hidden_size": 64, "patch_size": 2, "temporal_patch_size": 2, "spatial_merge_size": 2, )"
         R"("in_chans": 3, )" +
         vision_extra + "}}";
}

// transformers' Qwen2_5_VisionTransformerPretrainedModel.get_window_index, replayed patch by patch: each frame's
// merged grid H x W padded to whole windows of v (pad v - H % v rows, a whole empty row of windows when H is a
// multiple), every window's length the merged tokens in it that are not padding, times m^2 patches; the window
// blocks attend (length)^2 pairs per window.
std::int64_t window_pairs_by_get_window_index(const image_grid& g, std::int64_t m, std::int64_t v) {
  const std::int64_t H = g.h / m, W = g.w / m;
  const std::int64_t pad_h = v - H % v, pad_w = v - W % v;
  const std::int64_t windows_h = (H + pad_h) / v, windows_w = (W + pad_w) / v;
  std::int64_t pairs = 0;
  for (std::int64_t t = 0; t < g.t; ++t) {
    for (std::int64_t wi = 0; wi < windows_h; ++wi) {
      for (std::int64_t wj = 0; wj < windows_w; ++wj) {
        std::int64_t merged = 0;
        for (std::int64_t r = wi * v; r < (wi + 1) * v; ++r) {
          for (std::int64_t c = wj * v; c < (wj + 1) * v; ++c) merged += (r < H && c < W) ? 1 : 0;
        }
        const std::int64_t length = merged * m * m;  // cu_window_seqlens are in patches
        pairs += length * length;
      }
    }
  }
  return pairs;
}

TEST(vlm_window_pairs, closed_form_equals_get_window_index_on_every_small_grid) {
  for (std::int64_t m = 1; m <= 3; ++m) {
    for (std::int64_t v = 1; v <= 5; ++v) {
      vision_geometry geometry;
      geometry.has_vision = true;
      geometry.spatial_merge_size = m;
      geometry.vision_window = v;
      for (std::int64_t h = m; h <= 13 * m; h += m) {
        for (std::int64_t w = m; w <= 11 * m; w += m) {
          for (std::int64_t t = 1; t <= 3; t += 2) {
            const image_grid grid[] = {{t, h, w}};
            const batch_counts n = count_from_lengths({}, 0, grid, geometry);
            ASSERT_EQ(n.vision_window_pairs, window_pairs_by_get_window_index(grid[0], m, v))
                << "m=" << m << " v=" << v << " grid " << t << "x" << h << "x" << w;
          }
        }
      }
    }
  }
}

// ---- one hand-derived config per family -------------------------------------------------------------------

// Qwen2.5-VL: per patch 3 blocks of qkv 3*32*32 + proj 32*32 + gated MLP 3*32*48 = 8,704: 6 * 3 * 8,704 = 156,672.
// Pairs: block 1 per frame 6 * 2*32 = 384; blocks 0 and 2 in windows 6 * 2 * 64 = 768. Patch embedding
// 3*2*2*2 = 24 inputs -> 32: 4 * 768 = 3,072. Merger 4*32 = 128: 128 -> 128 -> 64, 6 * (16,384 + 8,192) = 147,456.
TEST(vlm_families, qwen2_5_vl_window_blocks_and_gated_mlp) {
  const model_spec spec = from_json(qwen25());
  ASSERT_TRUE(spec.vision);
  EXPECT_EQ(spec.vision->num_window_blocks(), 2);
  const coefficients c = compute_coefficients(spec);
  EXPECT_EQ(c.dense_per_token, kDense);
  EXPECT_EQ(c.text_attn_pair, kTextPair);
  EXPECT_EQ(c.vision_per_patch, 156672);
  EXPECT_EQ(c.vision_attn_pair, 384);
  EXPECT_EQ(c.vision_window_attn_pair, 768);
  EXPECT_EQ(c.patch_embed_per_patch, 3072);
  EXPECT_EQ(c.merger_per_merged_token, 147456);
  EXPECT_EQ(geometry_of(spec).vision_window, 2);

  // One document of 50 tokens; an image 1 x 10 x 6 whose merged grid 5 x 3 is not a multiple of the 2 x 2 window
  // (windows of 2x2, 2x1, 2x2, 2x1, 1x2, 1x1 merged tokens = 16, 8, 16, 8, 8, 4 patches: 256+64+256+64+64+16 =
  // 720 pairs), and a video of 3 frames of 4 x 4 patches (2 x 2 merged: one window of 16 patches, 256 pairs a
  // frame: 768). Patches 60 + 48 = 108, merged 27, per-frame pairs 60^2 + 3*16^2 = 4,368, causal 50*51/2 = 1,275.
  const std::int64_t docs[] = {50};
  const image_grid grids[] = {{1, 10, 6}, {3, 4, 4}};
  const batch_counts n = count_from_lengths(docs, 0, grids, geometry_of(spec));
  EXPECT_EQ(n.patches, 108);
  EXPECT_EQ(n.merged_tokens, 27);
  EXPECT_EQ(n.vision_pairs_per_frame, 4368);
  EXPECT_EQ(n.vision_window_pairs, 720 + 768);
  EXPECT_EQ(n.vision_cls_tokens, 0);
  EXPECT_EQ(n.image_block_pairs, 0);
  const flop_breakdown f = compute_flops(c, n, flop_scope::complete);
  EXPECT_EQ(f.vision_dense, 156672.0 * 108);
  EXPECT_EQ(f.vision_attention, 384.0 * 4368 + 768.0 * 1488);
  EXPECT_EQ(exact_total_flops(c, n, flop_scope::complete),
            std::to_string(kDense * 50 + kTextPair * 1275 + 156672 * 108 + 384 * 4368 + 768 * 1488 + 3072 * 108 +
                           147456 * 27));
  // The reference's scope bills every block over the whole item: 60^2 + 48^2 = 5,904 pairs, 384 + 768 each.
  EXPECT_EQ(compute_flops(c, n, flop_scope::seed).vision_attention, (384.0 + 768.0) * 5904);
}

// Qwen2-VL: vision_config.embed_dim (32) is the ViT's width and hidden_size (64) the merger's output. Per patch 2
// blocks of qkv 3*32*32 + proj 32*32 + fc1/fc2 2*32*128 (mlp_ratio 4): 6 * 2 * 12,288 = 147,456; pairs 6*2*64 =
// 768; merger 128 -> 128 -> 64: 147,456 (the same as Qwen2.5-VL's, both merge 2 x 2 patches of width 32).
TEST(vlm_families, qwen2_vl_embed_dim_is_the_vit_width) {
  const std::string text = R"({"model_type": "qwen2_vl", )" + kDecoder +
                           R"(, "vision_config": {"depth": 2, "embed_dim": 32, "num_heads": 2, "mlp_ratio": 4, )"
                           R"("hidden_size": 64, "in_chans": 3, "patch_size": 2, "spatial_merge_size": 2, )"
                           R"("temporal_patch_size": 2}})";
  const model_spec spec = from_json(text);
  EXPECT_EQ(spec.vision->hidden_size, 32);
  EXPECT_EQ(spec.vision->intermediate_size, 128);
  EXPECT_EQ(spec.vision->out_hidden_size, 64);
  const coefficients c = compute_coefficients(spec);
  EXPECT_EQ(c.vision_per_patch, 147456);
  EXPECT_EQ(c.vision_attn_pair, 768);
  EXPECT_EQ(c.vision_window_attn_pair, 0);
  EXPECT_EQ(c.merger_per_merged_token, 147456);
  // A video of 2 frames of 4 x 6 patches attends per frame: 2 * 24^2 = 1,152 pairs.
  const image_grid grids[] = {{2, 4, 6}};
  const batch_counts n = count_from_lengths({}, 0, grids, geometry_of(spec));
  EXPECT_EQ(n.vision_pairs_per_frame, 1152);
  EXPECT_EQ(n.vision_window_pairs, 0);
  // The trap: the merger's output must be the decoder's width.
  std::string wrong = text;
  wrong.replace(wrong.find(R"("hidden_size": 64, "in_chans")"), 17, R"("hidden_size": 32)");
  EXPECT_NE(error_of(wrong).find("key 'vision_config.hidden_size': must equal the decoder's hidden_size = 64"),
            std::string::npos)
      << error_of(wrong);
}

// InternVL (transformers' native format): InternViT width 32, 2 blocks, MLP 64, tiles of 8 pixels of 2-pixel
// patches (4 x 4 patches + the CLS token), pixel shuffle by 0.5 (2 x 2 patches per token), decoder qwen2.
// Per token (patch or CLS): 6 * 2 * (4*32*32 + 2*32*64) = 98,304; pairs 6 * 2 * 64 = 768; patch embedding (2-D,
// 3*2*2 = 12 inputs -> 32): 4 * 384 = 1,536; projector 128 -> 64 -> 64: 6 * (8,192 + 4,096) = 73,728.
const std::string kInternVl =
    R"({"model_type": "internvl", "downsample_ratio": 0.5, "text_config": {"model_type": "qwen2", )" + kDecoder +
    R"(}, "vision_config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, )"
    R"("num_attention_heads": 2, "image_size": [8, 8], "patch_size": [2, 2]}})";

TEST(vlm_families, internvl_cls_token_per_tile_and_pixel_shuffle_projector) {
  const model_spec spec = from_json(kInternVl);
  EXPECT_TRUE(spec.vision->cls_token);
  EXPECT_EQ(spec.vision->spatial_merge_size, 2);
  const coefficients c = compute_coefficients(spec);
  EXPECT_EQ(c.dense_per_token, kDense);
  EXPECT_EQ(c.vision_per_patch, 98304);
  EXPECT_EQ(c.vision_attn_pair, 768);
  EXPECT_EQ(c.patch_embed_per_patch, 1536);
  EXPECT_EQ(c.merger_per_merged_token, 73728);
  // An image of 3 tiles is the item 3 x 4 x 4: 48 patches, 3 CLS tokens, per tile (16 + 1)^2 pairs: 867; merged
  // 3 * 4 = 12 tokens. The CLS tokens run through the blocks (98,304 each), not the patch embedding nor the
  // projector.
  const std::int64_t docs[] = {30};
  const image_grid grids[] = {{3, 4, 4}};
  const batch_counts n = count_from_lengths(docs, 0, grids, geometry_of(spec));
  EXPECT_EQ(n.vision_cls_tokens, 3);
  EXPECT_EQ(n.vision_pairs_per_frame, 867);
  EXPECT_EQ(n.merged_tokens, 12);
  const flop_breakdown f = compute_flops(c, n, flop_scope::complete);
  EXPECT_EQ(f.vision_dense, 98304.0 * (48 + 3));
  EXPECT_EQ(f.vision_attention, 768.0 * 867);
  EXPECT_EQ(f.patch_embed, 1536.0 * 48);
  EXPECT_EQ(f.merger, 73728.0 * 12);
}

// The InternVL default: a frozen InternViT under a trained projector and decoder. The ViT runs forward only
// (2 FLOPs per multiply-add: 2 * 2 * 8,192 = 32,768 per token; its attention 2 * 2 * 64 = 256 per pair; the patch
// embedding 2 * 384 = 768); the projector's input needs no gradient from the ViT, but its LayerNorm trains, so
// both of its GEMMs run forward, input and weight gradients: 73,728 as in full training; the decoder is unchanged.
TEST(vlm_regimes, frozen_internvit_with_a_trained_projector) {
  const model_spec spec = from_json(kInternVl);
  training_regime regime;
  regime.vision_frozen = true;
  const regime_coefficients rc = compute_coefficients(spec, regime);
  EXPECT_EQ(rc.with_items.vision_per_patch, 32768);
  EXPECT_EQ(rc.with_items.vision_attn_pair, 256);
  EXPECT_EQ(rc.with_items.patch_embed_per_patch, 768);
  EXPECT_EQ(rc.with_items.merger_per_merged_token, 73728);
  EXPECT_EQ(rc.with_items.dense_per_token, kDense);
  // LoRA (rank 4 on q_proj and v_proj) over the frozen ViT and a frozen projector: the vision side runs forward
  // only (the projector 2 * 12,288 = 24,576), the decoder's base weights are frozen.
  regime.merger_frozen = true;
  regime.lora_rank = 4;
  regime.lora_targets = {lora_target::q_proj, lora_target::v_proj};
  const regime_coefficients lora = compute_coefficients(spec, regime);
  EXPECT_EQ(lora.with_items.merger_per_merged_token, 24576);
  EXPECT_EQ(lora.with_items.vision_per_patch, 32768);
  EXPECT_GT(lora.with_items.dense.lora_adapters, 0);
}

// Qwen2.5-VL with a frozen ViT and merger: the attention runs forward only, 2 FLOPs x 64 multiply-adds per pair
// and block: the two window blocks 256 per windowed pair, the per-frame block 128.
TEST(vlm_regimes, frozen_windowed_vit_bills_its_window_pairs_forward_only) {
  training_regime regime;
  regime.vision_frozen = true;
  regime.merger_frozen = true;
  const regime_coefficients rc = compute_coefficients(from_json(qwen25()), regime);
  EXPECT_EQ(rc.with_items.vision_window_attn_pair, 256);
  EXPECT_EQ(rc.with_items.vision_attn_pair, 128);
  EXPECT_EQ(rc.with_items.vision_per_patch, 156672 / 3);
}

// Gemma 3: decoder gemma3_text of 3 layers (sliding_window_pattern 3: layers 0 and 1 slide over 8 keys, layer 2
// is full), head_dim 16; SigLIP width 32, 2 blocks, MLP 64, 16-pixel images of 2-pixel patches (8 x 8), pooled
// to mm_tokens_per_image = 4 tokens (kernel 4). Per pair of a layer 4*(16+16) = 128: text_attn_pair 6 * 128 = 768,
// the sliding window's 6 * 2 * 128 = 1,536 and the image block's 6 * 3 * 128 = 2,304 (all three layers). The
// projector 32 -> 64: 6 * 2,048 = 12,288 per pooled token.
const std::string kGemma3 =
    R"({"model_type": "gemma3", "mm_tokens_per_image": 4, "text_config": {"model_type": "gemma3_text", )"
    R"("hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, )"
    R"("head_dim": 16, "intermediate_size": 96, "vocab_size": 100, "sliding_window": 8, )"
    R"("sliding_window_pattern": 3}, "vision_config": {"hidden_size": 32, "intermediate_size": 64, )"
    R"("num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 16, "patch_size": 2}})";

TEST(vlm_families, gemma3_image_blocks_and_pooled_projector) {
  const model_spec spec = from_json(kGemma3);
  EXPECT_EQ(spec.vision->spatial_merge_size, 4);
  const coefficients c = compute_coefficients(spec);
  EXPECT_EQ(c.text_attn_pair, 768);
  EXPECT_EQ(c.window_attn_pair[0], 1536);
  EXPECT_EQ(c.image_block_pair, 2304);
  EXPECT_EQ(c.merger_per_merged_token, 12288);
  EXPECT_EQ(c.vision_per_patch, 6 * 2 * (4 * 32 * 32 + 2 * 32 * 64));
  // A document of 20 tokens holding two pan-and-scan crops of 4 tokens each (the item 2 x 8 x 8): each crop's 4
  // tokens attend to each other, 4 * 3 / 2 = 6 pairs beyond the causal ones, 12 in all, wherever they sit.
  const std::int64_t docs[] = {20};
  const image_grid grids[] = {{2, 8, 8}};
  const batch_counts n = count_from_lengths(docs, 0, grids, geometry_of(spec));
  EXPECT_EQ(n.image_block_pairs, 12);
  EXPECT_EQ(n.merged_tokens, 8);
  EXPECT_EQ(n.vision_pairs_per_frame, 2 * 64 * 64);
  // Causal 210; the sliding window of 8: 8*9/2 + 12*8 = 132.
  const flop_breakdown f = compute_flops(c, n, flop_scope::complete);
  EXPECT_EQ(f.text_attention, 768.0 * 210 + 1536.0 * 132 + 2304.0 * 12);
  // An image that does not fit the sliding window would attend differently in the sliding layers: refused.
  std::string big = kGemma3;
  big.replace(big.find(R"("sliding_window": 8)"), 19, R"("sliding_window": 3)");
  EXPECT_NE(error_of(big).find("key 'mm_tokens_per_image': must be <= text_config.sliding_window = 3"),
            std::string::npos)
      << error_of(big);
}

// ---- bad input: the field and the reason ------------------------------------------------------------------

TEST(vlm_bad_input, grid_not_a_multiple_of_the_merge_size) {
  const image_grid grids[] = {{1, 4, 4}, {1, 3, 4}};
  try {
    (void)count_from_lengths({}, 0, grids, geometry_of(from_json(qwen25())));
    FAIL() << "accepted";
  } catch (const error& e) {
    EXPECT_STREQ(e.what(), "grid_thw[1] = (1, 3, 4): h and w must be multiples of spatial_merge_size 2");
  }
}

TEST(vlm_bad_input, fullatt_block_index_outside_the_depth) {
  const std::string text = qwen25(R"("window_size": 8, "fullatt_block_indexes": [1, 3])");
  EXPECT_EQ(error_of(text), at(text, R"("fullatt_block_indexes": [1, )", "vision_config.fullatt_block_indexes[1]") +
                                "block index 3 is outside the depth: must be in [0, depth = 3)");
}

TEST(vlm_bad_input, window_size_not_a_multiple_of_patch_times_merge) {
  const std::string text = qwen25(R"("window_size": 6, "fullatt_block_indexes": [1])");
  EXPECT_EQ(error_of(text), at(text, R"("window_size": )", "vision_config.window_size") +
                                "must be a positive multiple of patch_size * spatial_merge_size = 4 (windows are "
                                "whole merged tokens; got 6)");
}

TEST(vlm_bad_input, internvl_item_that_is_not_a_whole_tile) {
  const image_grid grids[] = {{2, 4, 2}};
  try {
    (void)count_from_lengths({}, 0, grids, geometry_of(from_json(kInternVl)));
    FAIL() << "accepted";
  } catch (const error& e) {
    EXPECT_STREQ(e.what(),
                 "grid_thw[0] = (2, 4, 2): not a whole tile: h and w must both be 4 (image_size / "
                 "patch_size; an image of n tiles is the item n x 4 x 4)");
  }
}

TEST(vlm_bad_input, decoder_and_ratio_fields) {
  std::string no_decoder = kInternVl;
  no_decoder.replace(no_decoder.find(R"("model_type": "qwen2", )"), 23, "");
  EXPECT_NE(error_of(no_decoder).find("required key 'text_config.model_type' is missing"), std::string::npos)
      << error_of(no_decoder);
  std::string ratio = kInternVl;
  ratio.replace(ratio.find("0.5"), 3, "0.3");
  EXPECT_EQ(error_of(ratio), at(ratio, R"("downsample_ratio": )", "downsample_ratio") +
                                 "1 / downsample_ratio must be a whole number of patches a side (0.5: 2 x 2 patches "
                                 "per token)");
}

// ---- the real config.json files, every entry point -------------------------------------------------------

// Coefficients of the published files, by hand (6 FLOPs per multiply-add; the patch embedding 4):
//   Qwen2.5-VL-3B: ViT 32 blocks of 1280, gated MLP 3420: 6*32*(4*1280^2 + 3*1280*3420) = 3,779,788,800 per patch;
//     4 per-frame blocks 6*4*2*1280 = 61,440 and 28 window blocks 6*28*2*1280 = 430,080 per pair; patch embedding
//     4*3*2*14*14*1280 = 6,021,120; merger 6*(5120^2 + 5120*2048) = 220,200,960; decoder: 36 layers of 2048, 16
//     heads of 128, 2 kv heads, MLP 11008, vocab 151936: 6*(36*(2048*2048*2 + 2*2048*256 + 3*2048*11008) +
//     2048*151936) = 18,514,182,144 per token and 6*36*2*16*128 = 884,736 per pair.
//   Gemma-3-4B: SigLIP 27 blocks of 1152, MLP 4304: 6*27*(4*1152^2 + 2*1152*4304) = 2,466,422,784; per pair
//     6*27*2*1152 = 373,248; projector 6*1152*2560 = 17,694,720; decoder 34 layers (5 full, 29 sliding over
//     1024), 8 heads of 256: per pair 6*2*8*256 = 24,576 a layer: full 122,880, window 712,704, image block
//     (all 34) 835,584.
//   Qwen2.5-VL-72B: the same ViT with a 3456-wide gated MLP: 6*32*(4*1280^2 + 3*1280*3456) = 3,806,330,880 per
//     patch (pairs and patch embedding as the 3B); merger 6*(5120^2 + 5120*8192) = 408,944,640; decoder: 80 layers
//     of 8192, 64 heads of 128, 8 kv heads, MLP 29568, vocab 152064: 6*(80*(8192*8192*2 + 2*8192*1024 +
//     3*8192*29568) + 8192*152064) = 428,750,143,488 per token and 6*80*2*64*128 = 7,864,320 per pair.
//   InternVL3-8B (as far as confirmed): InternViT 24 x 1024, MLP 4096: 6*24*(4*1024^2 + 2*1024*4096) =
//     1,811,939,328; pairs 6*24*2*1024 = 294,912; patch embedding 4*3*14*14*1024 = 2,408,448; projector
//     6*(4096*3584 + 3584*3584) = 165,150,720.
TEST(vlm_real_configs, published_coefficients_by_hand) {
  // The Qwen2.5-VL ViT's pair and patch-embedding terms do not depend on the size (same 1280-wide tower).
  const auto expect_qwen2_5_vl = [](const std::string& file, std::int64_t per_patch, std::int64_t merger,
                                    std::int64_t dense, std::int64_t text_pair) {
    const coefficients q = compute_coefficients(load_model_spec(data_path(file)));
    EXPECT_EQ(q.vision_per_patch, per_patch) << file;
    EXPECT_EQ(q.vision_attn_pair, 61440) << file;
    EXPECT_EQ(q.vision_window_attn_pair, 430080) << file;
    EXPECT_EQ(q.patch_embed_per_patch, 6021120) << file;
    EXPECT_EQ(q.merger_per_merged_token, merger) << file;
    EXPECT_EQ(q.dense_per_token, dense) << file;
    EXPECT_EQ(q.text_attn_pair, text_pair) << file;
  };
  expect_qwen2_5_vl("qwen2.5-vl-3b-instruct.json", 3779788800, 220200960, 18514182144, 884736);
  expect_qwen2_5_vl("qwen2.5-vl-72b-instruct.json", 3806330880, 408944640, 428750143488, 7864320);
  const coefficients g = compute_coefficients(load_model_spec(data_path("gemma-3-4b-it.json")));
  EXPECT_EQ(g.vision_per_patch, 2466422784);
  EXPECT_EQ(g.vision_attn_pair, 373248);
  EXPECT_EQ(g.merger_per_merged_token, 17694720);
  EXPECT_EQ(g.text_attn_pair, 122880);
  EXPECT_EQ(g.window_attn_pair[0], 712704);
  EXPECT_EQ(g.image_block_pair, 835584);
  const coefficients i = compute_coefficients(load_model_spec(data_path("internvl3-8b-hf-partial.json")));
  EXPECT_EQ(i.vision_per_patch, 1811939328);
  EXPECT_EQ(i.vision_attn_pair, 294912);
  EXPECT_EQ(i.patch_embed_per_patch, 2408448);
  EXPECT_EQ(i.merger_per_merged_token, 165150720);
  const coefficients v2 = compute_coefficients(load_model_spec(data_path("qwen2-vl-2b-instruct.json")));
  EXPECT_EQ(v2.vision_per_patch, 6LL * 32 * (4 * 1280 * 1280 + 2 * 1280 * 5120));
  EXPECT_EQ(v2.merger_per_merged_token, 6LL * (5120 * 5120 + 5120 * 1536));
}

// The C ABI: a config.json in, counts and FLOPs out, with the vision counts of 0.3 in the struct; an old struct
// (without them) is refused for a model with windows in its ViT.
TEST(vlm_entry_points, c_abi_counts_and_flops) {
  char err[512] = {};
  flopmeter_model* model = flopmeter_model_load(data_path("qwen2.5-vl-3b-instruct.json").c_str(), err, sizeof err);
  ASSERT_NE(model, nullptr) << err;
  const int64_t docs[] = {1000};
  const flopmeter_grid grids[] = {{1, 36, 50}, {3, 16, 16}};
  flopmeter_microbatch mb{};
  mb.struct_size = sizeof mb;
  mb.document_lengths = docs;
  mb.num_document_lengths = 1;
  mb.grids = grids;
  mb.num_grids = 2;
  flopmeter_counts counts{};
  counts.struct_size = sizeof counts;
  ASSERT_EQ(flopmeter_model_count(model, &mb, &counts, err, sizeof err), FLOPMETER_OK) << err;
  // 1 x 36 x 50: merged 18 x 25, windows of 4: (4*16 + 2^2) * (6*16 + 1^2) * 2^4 = 68 * 97 * 16 = 105,536;
  // 3 x 16 x 16: merged 8 x 8, four whole windows per frame: 3 * 32 * 32 * 16 = 49,152.
  EXPECT_EQ(counts.vision_window_pairs, 105536 + 49152);
  flopmeter_flops flops{};
  flops.struct_size = sizeof flops;
  ASSERT_EQ(flopmeter_model_flops(model, &counts, FLOPMETER_SCOPE_COMPLETE, &flops), FLOPMETER_OK);
  // The terms of the real file, by hand (coefficients above): patches 1800 + 768 = 2568, merged 642, per-frame
  // pairs 1800^2 + 3*256^2 = 3,436,608, causal 500,500.
  EXPECT_EQ(std::string(flops.exact_total),
            std::to_string(18514182144LL * 1000 + 884736LL * 500500 + 3779788800LL * 2568 + 61440LL * 3436608 +
                           430080LL * 154688 + 6021120LL * 2568 + 220200960LL * 642));
  flopmeter_counts old = counts;
  old.struct_size = static_cast<uint32_t>(offsetof(flopmeter_counts, vision_window_pairs));
  EXPECT_EQ(flopmeter_model_flops(model, &old, FLOPMETER_SCOPE_COMPLETE, &flops), FLOPMETER_E_STRUCT_SIZE);
  flopmeter_model_destroy(model);
}

// Every coefficient of two specs of one model, equal (`what` names the pair in a failure).
void expect_same_coefficients(const model_spec& a, const model_spec& b, const std::string& what) {
  const coefficients ca = compute_coefficients(a), cb = compute_coefficients(b);
  EXPECT_EQ(ca.dense_per_token, cb.dense_per_token) << what;
  EXPECT_EQ(ca.text_attn_pair, cb.text_attn_pair) << what;
  EXPECT_EQ(ca.window_attn_pair[0], cb.window_attn_pair[0]) << what;
  EXPECT_EQ(ca.vision_per_patch, cb.vision_per_patch) << what;
  EXPECT_EQ(ca.vision_attn_pair, cb.vision_attn_pair) << what;
  EXPECT_EQ(ca.vision_window_attn_pair, cb.vision_window_attn_pair) << what;
  EXPECT_EQ(ca.patch_embed_per_patch, cb.patch_embed_per_patch) << what;
  EXPECT_EQ(ca.merger_per_merged_token, cb.merger_per_merged_token) << what;
  EXPECT_EQ(ca.image_block_pair, cb.image_block_pair) << what;
  EXPECT_EQ(geometry_of(a).segment_side, geometry_of(b).segment_side) << what;
}

// The shipped TOMLs give the coefficients of the config.json they were imported from.
TEST(vlm_shipped, each_toml_equals_its_config_json) {
  const std::pair<const char*, const char*> pairs[] = {{"qwen2_vl_2b.toml", "qwen2-vl-2b-instruct.json"},
                                                       {"qwen2_vl_7b.toml", "qwen2-vl-7b-instruct.json"},
                                                       {"qwen2_5_vl_3b.toml", "qwen2.5-vl-3b-instruct.json"},
                                                       {"qwen2_5_vl_7b.toml", "qwen2.5-vl-7b-instruct.json"},
                                                       {"qwen2_5_vl_72b.toml", "qwen2.5-vl-72b-instruct.json"},
                                                       {"gemma_3_4b.toml", "gemma-3-4b-it.json"},
                                                       {"gemma_3_27b.toml", "gemma-3-27b-it.json"}};
  for (const auto& [toml, json] : pairs) {
    const model_spec a = load_model_spec(config_path(toml));
    expect_same_coefficients(a, load_model_spec(data_path(json)), toml);
    const check_report report = run_sanity_check(a, 4096);
    EXPECT_TRUE(report.pass) << toml;
  }
}

// `flopmeter import` of each family's real config.json writes a TOML the loader reads back to the same
// coefficients: InternVL's downsample_ratio and Gemma 3's mm_tokens_per_image before [model], the decoder's keys
// in [text_config] (InternVL's text_config.model_type with them), the family's vision keys in [vision_config]
// (Qwen2.5-VL's window_size and fullatt_block_indexes, InternVL's [448, 448] image_size). Before, the Qwen3-VL
// schema was written for them: an attn_output_gate line the loader refuses, and no window fields.
TEST(vlm_import, each_real_config_json_round_trips) {
  for (const char* json : {"qwen2-vl-2b-instruct.json", "qwen2-vl-7b-instruct.json", "qwen2.5-vl-3b-instruct.json",
                           "qwen2.5-vl-7b-instruct.json", "qwen2.5-vl-72b-instruct.json",
                           "internvl3-8b-hf-partial.json", "gemma-3-4b-it.json", "gemma-3-27b-it.json"}) {
    const std::string toml = import_hf_config(data_path(json));
    expect_same_coefficients(parse_model_spec(toml, "imported.toml"), load_model_spec(data_path(json)),
                             std::string(json) + "\n" + toml);
  }
  const std::string qwen = import_hf_config(data_path("qwen2.5-vl-72b-instruct.json"));
  EXPECT_NE(qwen.find("\nfullatt_block_indexes = [7, 15, 23, 31]"), std::string::npos) << qwen;
  EXPECT_EQ(qwen.find("attn_output_gate"), std::string::npos) << qwen;
  const std::string internvl = import_hf_config(data_path("internvl3-8b-hf-partial.json"));
  EXPECT_EQ(internvl.find("downsample_ratio = 0.5 "), internvl.find("downsample_ratio")) << internvl;
  EXPECT_LT(internvl.find("downsample_ratio"), internvl.find("[model]")) << internvl;
  EXPECT_NE(internvl.find("\nmodel_type = \"qwen2\""), std::string::npos) << internvl;
}

}  // namespace
}  // namespace flopmeter
