// flopmeter/model_spec.h — the architecture facts one FLOP model is built from.
//
// A `model_spec` is plain data: what `load_model_spec()` reads from a model TOML file (see
// model_configs/SCHEMA.md; field names follow the Hugging Face config.json names) and what the FLOP model
// (flop_model.h) and the Megatron constant (megatron.h) consume. It owns all of its members.
// Thread-safety: a model_spec is a value; const access from many threads needs no synchronization.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "flopmeter/export.h"

namespace flopmeter FLOPMETER_EXPORT {

// Which token mixer a decoder layer uses.
enum class layer_kind {
  full_attention,     // softmax attention over the document (causal), GQA, optional output gate
  linear_attention,   // Qwen3.5 Gated DeltaNet
  sliding_attention,  // softmax attention over the last text_spec::sliding_window keys (i - w < j <= i)
  chunked_attention,  // softmax attention inside chunks of text_spec::attention_chunk_size tokens, causal
  mamba,              // a Mamba-2 mixer (text_spec's mamba_* sizes)
  mlp_only,           // no token mixer, a dense MLP only (Nemotron-H's "-" block; text_spec::block_layers)
  moe_only,           // no token mixer, an MoE block only (Nemotron-H's "E" block; text_spec::block_layers)
  short_conv,         // LFM2's gated short convolution (text_spec::short_conv_kernel)
};

// A run of consecutive decoder layers of one kind (the layer_types list of a config.json, run-length encoded).
struct layer_run {
  layer_kind kind = layer_kind::full_attention;
  std::int64_t count = 0;  // >= 1
};

// Decoder (language model) facts. All sizes are element counts, all > 0 unless stated.
struct text_spec {
  std::int64_t hidden_size = 0;
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0;   // divides num_attention_heads (GQA groups)
  std::int64_t head_dim = 0;
  std::int64_t intermediate_size = 0;     // SwiGLU width: gate and up are hidden->I, down is I->hidden
  std::int64_t vocab_size = 0;
  bool tie_word_embeddings = false;       // no FLOP effect: the logits matmul runs either way
  bool attn_output_gate = false;          // Qwen3.5: q_proj also produces a sigmoid gate (2x its width); the
                                          // Qwen3.5 types require true (their attention always has it), others false
  bool plain_mlp = false;                 // every MLP (dense, routed and shared experts) has 2 matrices: up
                                          // hidden->I, an activation, down I->hidden (Apertus' xIELU, Nemotron-H's
                                          // squared ReLU); false: SwiGLUs (gate, up, down)
  bool block_layers = false;              // Nemotron-H: a layer is one block, a token mixer (attention, Mamba) with
                                          // no MLP or an MLP / MoE (mlp_only, moe_only) with no mixer
  bool mamba_beside_attention = false;    // Falcon-H1: every attention layer also runs the Mamba-2 mixer on the
                                          // same input
  bool shared_expert_ungated = false;     // shared_expert_intermediate_size's shared expert has no sigmoid gate
                                          // (Nemotron-H, Granite 4.0-H); false: Qwen's gate hidden->1
  // Layer layout. For Qwen3.5 layer i is full attention when (i+1) % full_attention_interval == 0 and Gated
  // DeltaNet otherwise; 0 means every layer is full attention (Qwen3-VL). Nothing is stored per layer:
  // layer_type(i) and the counts below are arithmetic, so a spec's size and cost do not grow with the layer count.
  std::int64_t full_attention_interval = 0;
  // Gated DeltaNet sizes; required when any layer is linear_attention, 0 otherwise.
  std::int64_t linear_key_head_dim = 0;
  std::int64_t linear_value_head_dim = 0;
  std::int64_t linear_num_key_heads = 0;
  std::int64_t linear_num_value_heads = 0;
  std::int64_t linear_conv_kernel_dim = 0;
  // Multi-token-prediction layers present in the checkpoint (Qwen3.5: 1). They cost work only when the
  // run trains them (model_spec::train_mtp_layers).
  std::int64_t mtp_num_hidden_layers = 0;

  // Mixture of experts (model types qwen3_vl_moe, qwen3_5_moe, qwen3_moe and qwen3_next; every field 0 / empty /
  // false for a dense model type). Hugging Face names. A layer's MLP is an MoE block when num_experts > 0, the layer is not in
  // mlp_only_layers, and (i+1) % decoder_sparse_step == 0; otherwise it is a dense SwiGLU of
  // intermediate_size. Qwen3.5 MoE makes every layer (and its MTP layer) an MoE block: step 1, no exceptions.
  std::int64_t num_experts = 0;                      // routed experts per MoE layer; the router is hidden->E
  std::int64_t num_experts_per_tok = 0;              // top-k: routed experts each token visits (<= num_experts)
  std::int64_t moe_intermediate_size = 0;            // SwiGLU width of one routed expert
  std::int64_t shared_expert_intermediate_size = 0;  // SwiGLU width of the shared expert; 0 = none (Qwen3-VL MoE)
  std::int64_t decoder_sparse_step = 0;              // MoE every decoder_sparse_step-th layer; 1 when MoE, 0 dense
  std::vector<std::int64_t> mlp_only_layers;         // layer indexes forced dense; distinct, each < num_hidden_layers
  bool norm_topk_prob = false;                       // renormalise the top-k weights; no FLOP effect
  // DeepSeek-V3 / GLM-4.5 MoE layout and shared experts: layers below first_k_dense_replace are dense
  // SwiGLUs of intermediate_size; n_shared_experts > 0 adds an ungated shared SwiGLU of
  // n_shared_experts x moe_intermediate_size on every MoE layer (shared_expert_intermediate_size is Qwen's gated
  // one). 0 for the other families.
  std::int64_t first_k_dense_replace = 0;
  std::int64_t n_shared_experts = 0;

  // Attention windows. The attention layers' kinds, when not all full attention and not the Qwen3.5 interval:
  // layer_runs in layer order, counts summing to num_hidden_layers (empty: full_attention_interval decides).
  // Sliding layers attend to the last sliding_window keys; chunked layers inside chunks of attention_chunk_size.
  std::vector<layer_run> layer_runs;
  std::int64_t sliding_window = 0;        // w >= 1 when a layer slides, 0 otherwise
  std::int64_t attention_chunk_size = 0;  // c >= 1 when a layer is chunked, 0 otherwise

  // Multi-head latent attention (DeepSeek-V3, Kimi-K2): every attention layer is MLA when kv_lora_rank > 0.
  //   q: q_lora_rank > 0: q_a_proj h -> q_lora_rank, q_b_proj q_lora_rank -> heads*(qk_nope + qk_rope);
  //      q_lora_rank = 0 (V2-Lite style, null in config.json): q_proj h -> heads*(qk_nope + qk_rope)
  //   kv_a_proj_with_mqa h -> kv_lora_rank + qk_rope; kv_b_proj kv_lora_rank -> heads*(qk_nope + v_head_dim)
  //   o_proj heads*v_head_dim -> h. head_dim and num_key_value_heads are not used by MLA.
  std::int64_t q_lora_rank = 0;
  std::int64_t kv_lora_rank = 0;
  std::int64_t qk_nope_head_dim = 0;
  std::int64_t qk_rope_head_dim = 0;
  std::int64_t v_head_dim = 0;
  bool is_mla() const { return kv_lora_rank > 0; }

  // Indexer-selected sparse attention (DeepSeek-V3.2's and GLM-5's DSA; MLA models only; all 0 / empty without it).
  // index_topk > 0: the main attention of query i (0-based in its document) attends min(i + 1, index_topk) keys, the
  // pairs of a sliding window of index_topk, on every MLA layer. The lightning indexer (index_n_heads heads of
  // index_head_dim) scores every causal pair of the document on each MLA layer not listed in indexer_shared_layers
  // (GLM's "shared" indexer_types: those layers reuse the previous layer's indices and run no indexer).
  std::int64_t index_topk = 0;
  std::int64_t index_n_heads = 0;
  std::int64_t index_head_dim = 0;
  std::vector<std::int64_t> indexer_shared_layers;  // distinct, each in [1, num_hidden_layers)
  bool has_indexer() const { return index_topk > 0; }
  // Mamba-2 mixer (nemotron_h, granitemoehybrid, falcon_h1); every field 0 when no layer has one. Inner width
  // d_in = mamba_num_heads x mamba_head_dim; in_proj hidden -> 2 d_in + 2 n_groups state + heads, a depthwise conv
  // of mamba_conv_kernel over d_in + 2 n_groups state channels, the scan (Megatron's 3.5 d_in state multiply-adds
  // per token), out_proj d_in -> hidden. mamba_n_groups divides mamba_num_heads.
  std::int64_t mamba_num_heads = 0;
  std::int64_t mamba_head_dim = 0;
  std::int64_t mamba_n_groups = 0;
  std::int64_t mamba_state_size = 0;
  std::int64_t mamba_conv_kernel = 0;
  // LFM2's gated short convolution: in_proj hidden -> 3 hidden (B, C, x), a depthwise causal conv of this kernel over
  // hidden channels, out_proj hidden -> hidden; 0 when no layer has one.
  std::int64_t short_conv_kernel = 0;

  layer_kind layer_type(std::int64_t index) const;  // index in [0, num_hidden_layers)
  std::int64_t num_full_attention_layers() const;   // full_attention layers (MLA layers on an MLA model)
  std::int64_t num_linear_attention_layers() const;  // Gated DeltaNet layers
  // Softmax attention layers of any window: full, sliding and chunked (not Gated DeltaNet, Mamba or mixer-less).
  std::int64_t num_attention_layers() const;
  std::int64_t num_mamba_layers() const;  // layers that run a Mamba-2 mixer (Falcon-H1: the attention layers too)
  bool is_moe() const { return num_experts > 0; }
  // Decoder layers whose MLP is an MoE block / a dense SwiGLU (they add up to num_hidden_layers).
  std::int64_t num_moe_layers() const;
  // (block_layers: the mlp_only layers; mixer layers have no MLP.)
  std::int64_t num_dense_mlp_layers() const;
};

// How a ViT block's MLP is built: plain (fc1 hidden->I, activation, fc2 I->hidden: Qwen2-VL's QuickGELU, Qwen3-VL's
// GELU, InternViT, SigLIP) or gated (gate and up hidden->I, SiLU, down I->hidden: Qwen2.5-VL).
enum class vision_mlp_kind { plain, gated };

// What turns the ViT's patches into decoder tokens (one "merged token" each):
//   patch_merger       Qwen: spatial_merge_size^2 neighbouring patches concatenated, m^2*h -> m^2*h, GELU,
//                      m^2*h -> out_hidden_size (one more per DeepStack index on Qwen3-VL)
//   pixel_shuffle_mlp  InternVL: pixel shuffle by downsample_ratio (spatial_merge_size = 1 / downsample_ratio
//                      patches a side form one token, a reshape), LayerNorm, m^2*h -> out_hidden_size, GELU,
//                      out_hidden_size -> out_hidden_size
//   avgpool_linear     Gemma 3: average pooling of spatial_merge_size x spatial_merge_size patches (not a matmul),
//                      RMSNorm, one projection h -> out_hidden_size
enum class vision_projector_kind { patch_merger, pixel_shuffle_mlp, avgpool_linear };

// Vision tower (ViT) facts. An image or video item t x h x w (in patches) is t attention segments of h x w patches
// each: temporal frames for Qwen, tiles for InternVL, images or pan-and-scan crops for Gemma 3.
struct vision_spec {
  std::int64_t depth = 0;                  // ViT blocks
  std::int64_t hidden_size = 0;            // the ViT's width (Qwen2-VL's vision_config.embed_dim)
  std::int64_t num_heads = 0;              // divides hidden_size
  std::int64_t intermediate_size = 0;      // MLP width: hidden->I->hidden (gated: gate and up hidden->I)
  std::int64_t out_hidden_size = 0;        // projector output = decoder hidden size
  std::vector<std::int64_t> deepstack_visual_indexes;  // Qwen3-VL: one extra merger per index
  std::int64_t patch_size = 0;             // spatial patch edge in pixels
  std::int64_t temporal_patch_size = 0;    // frames per temporal patch (1 for a 2-D patch embedding)
  std::int64_t spatial_merge_size = 0;     // patches a side per merged token (Qwen's merge, InternVL's 1 /
                                           // downsample_ratio, Gemma 3's pooling kernel)
  std::int64_t in_channels = 0;

  // Added in 0.3 (defaults: the Qwen3-VL tower).
  vision_mlp_kind mlp = vision_mlp_kind::plain;
  vision_projector_kind projector = vision_projector_kind::patch_merger;
  // Qwen2.5-VL window attention: window_size (pixels, a multiple of patch_size * spatial_merge_size) > 0 makes
  // every block not listed in fullatt_block_indexes attend inside square windows of window_size / patch_size
  // patches a side (smaller at the right and bottom edges); 0: every block attends per segment.
  std::int64_t window_size = 0;
  std::vector<std::int64_t> fullatt_block_indexes;  // distinct, each in [0, depth)
  bool cls_token = false;            // InternViT: one CLS token per segment runs through every block (not the patch
                                     // embedding, not the projector)
  std::int64_t image_size = 0;       // InternVL / Gemma 3: a segment is exactly image_size / patch_size patches a side
                                     // (the learned position embeddings fix it); 0: any grid (Qwen)
  bool bidirectional_image = false;  // Gemma 3: an image's merged tokens attend to each other in the decoder

  // Inputs of the patch embedding per patch: in_channels * temporal_patch_size * patch_size^2.
  std::int64_t patch_input_size() const;
  // Number of mergers: the final one plus one per deepstack index.
  std::int64_t num_mergers() const;
  // ViT blocks that attend inside windows: depth - fullatt_block_indexes.size() when window_size > 0, else 0.
  std::int64_t num_window_blocks() const;
};

struct model_spec {
  std::string name;         // file stem or [model].name, for reports
  std::string model_type;   // "qwen3_vl", "qwen3_5" (dense) or "qwen3_vl_moe", "qwen3_5_moe" (mixture of experts);
                            // other vision-language models: "qwen2_vl", "qwen2_5_vl", "internvl", "gemma3";
                            // text only: "qwen3", "qwen3_moe", "qwen3_next", "llama", "qwen2", "qwen2_moe",
                            // "mistral", "mixtral", "gemma3_text", "gpt_oss", "deepseek_v3", "kimi_k2",
                            // "glm4_moe", "deepseek_v32", "glm_moe_dsa", "smollm3", "apertus", "ernie4_5",
                            // "ernie4_5_moe", "minimax_m2", "nemotron_h", "granitemoehybrid", "falcon_h1", "lfm2"
                            // (no vision)
  std::string source_path;  // where it was loaded from ("" when built in code)
  text_spec text;
  std::optional<vision_spec> vision;  // absent for text-only models
  bool train_mtp_layers = false;      // count the MTP layers' work (off by default)
};

}  // namespace FLOPMETER_EXPORT
