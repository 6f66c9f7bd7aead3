// examples/vlm/model.h — a small Qwen3.5 / Qwen3-VL style vision-language model in LibTorch, built from the
// same flopmeter model TOML that flopmeter's FLOP model reads, so the model that runs and the model that is
// counted are one description (model_configs/SCHEMA.md).
//
// What runs (every size from `flopmeter::model_spec`):
//   vision tower   patch embedding (a Linear of in_channels*temporal_patch_size*patch_size^2 -> hv, the
//                  same map as Qwen's Conv3d whose stride equals its kernel), `depth` blocks of
//                  LayerNorm + bidirectional attention within each temporal patch of each item + LayerNorm +
//                  GELU MLP, then the patch merger (and one DeepStack merger per deepstack index). Qwen2.5-VL
//                  (qwen2_5_vl): RMSNorm and a gated SiLU MLP (gate, up, down), and every block not in
//                  fullatt_block_indexes attends inside the windows transformers' get_window_index builds
//                  (square windows of window_size / patch_size / spatial_merge_size merged tokens a side per
//                  temporal patch, smaller at the right and bottom edges), the others per temporal patch.
//   decoder        token embedding with the merged vision tokens written over the image placeholders,
//                  `num_hidden_layers` layers of RMSNorm + token mixer + RMSNorm + MLP, final RMSNorm and
//                  the LM head (tied to the embedding when tie_word_embeddings). The token mixer is GQA
//                  softmax attention per document (with Qwen3.5's sigmoid output gate when attn_output_gate),
//                  on a sliding_attention layer restricted to the last sliding_window keys (each query against
//                  exactly its window, as a varlen windowed kernel runs it), on a chunked_attention layer
//                  inside chunks of attention_chunk_size tokens from the document's start (causal in each), DeepSeek-V3's multi-head latent
//                  attention on an MLA model (q_a/q_b or q, kv_a, kv_b, o; MoE layers from
//                  first_k_dense_replace on with ungated shared experts), or a Gated DeltaNet (causal depthwise conv + gated delta rule per document). The MLP is a
//                  SwiGLU, or on an MoE model (qwen3_vl_moe / qwen3_5_moe) in its MoE layers an MoE block:
//                  a router (hidden -> num_experts, softmax, top-k, renormalised when norm_topk_prob), a
//                  dropless dispatch (every token goes through exactly its k experts, SwiGLUs of
//                  moe_intermediate_size, weighted by its routing probabilities; no capacity, no dropping)
//                  and, when shared_expert_intermediate_size > 0, a shared SwiGLU expert on every token
//                  scaled by its sigmoid gate (hidden -> 1), as Qwen3-VL MoE and Qwen3.5 MoE do.
// Not modelled (element-wise, no matmul work, so it changes no FLOP count): RoPE / M-RoPE, the ViT's position
// embeddings, dropout. Attention runs per document, the delta rule restarts at every document, and padding
// tokens run through every projection, the conv and the delta rule but attend to nothing.
//
// FLOP attribution: every block of matmul work runs inside a RecordFunction user scope named
// "flopmeter_cat:<category>" (the k* names below), so a profiler observer can attribute each GEMM —
// tests/test_example_flops.cpp does, and compares the sums with flopmeter's FLOP model. Without an observer
// these scopes cost one branch each.
//
// Ownership: the model owns its parameters (torch::nn::Module). Thread-safety: like any torch module, one
// forward/backward at a time.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data.h"
#include "flopmeter/flop_model.h"
#include "flopmeter/model_spec.h"

namespace vlm {

// RecordFunction user-scope prefix and the categories of matmul work.
inline constexpr const char* kScopePrefix = "flopmeter_cat:";
inline constexpr const char* kTextAttnProj = "text_attn_proj";    // q (+gate), k, v, o projections
inline constexpr const char* kTextAttnCore = "text_attn_core";    // QK^T and PV per document
inline constexpr const char* kTextWindowAttnCore =
    "text_window_attn_core";                                      // the same inside a sliding window or chunk
inline constexpr const char* kGdnProj = "gdn_proj";               // in_proj_qkv, _z, _a, _b, out_proj
inline constexpr const char* kGdnConv = "gdn_conv";               // depthwise causal conv1d
inline constexpr const char* kGdnDeltaRule = "gdn_delta_rule";    // the gated delta rule recurrence
inline constexpr const char* kTextMlp = "text_mlp";               // SwiGLU gate, up, down (dense layers)
inline constexpr const char* kMoeRouter = "moe_router";           // router hidden -> num_experts
inline constexpr const char* kMoeRoutedExperts = "moe_routed_experts";  // the k experts of every token
inline constexpr const char* kMoeSharedExpert = "moe_shared_expert";    // shared SwiGLU expert
inline constexpr const char* kMoeSharedExpertGate = "moe_shared_expert_gate";  // its sigmoid gate hidden -> 1
inline constexpr const char* kLogits = "logits";                  // LM head
inline constexpr const char* kPatchEmbed = "patch_embed";         // patch embedding
inline constexpr const char* kVisionDense = "vision_dense";       // ViT qkv, proj, MLP
inline constexpr const char* kVisionAttnCore = "vision_attn_core";  // ViT QK^T and PV per temporal patch
inline constexpr const char* kVisionWindowAttnCore = "vision_window_attn_core";  // the same per Qwen2.5-VL window
inline constexpr const char* kMerger = "merger";                  // patch merger + DeepStack mergers
inline constexpr const char* kLoraAdapters = "lora_adapters";     // LoRA x A and (x A) B of adapted projections

// One row as tensors: what forward() consumes. The tensors live on one device (the model's); the host
// vectors are the same facts the Python side of a trainer would keep on the host.
struct model_batch {
  torch::Tensor input_ids;                     // [T] int64
  torch::Tensor labels;                        // [T] int64, kIgnoreLabel where no label
  std::vector<std::int64_t> document_lengths;  // in row order
  std::int64_t padding_tokens = 0;             // at the end of the row
  torch::Tensor pixel_patches;                 // [patches, patch_input_size] float; undefined without images
  std::vector<image_item> images;              // grids, in the order of pixel_patches and placeholders
  torch::Tensor image_positions;               // [merged tokens] int64 row positions of the placeholders
  // The batch description a varlen kernel consumes, travelling with the batch (not used by forward()):
  torch::Tensor cu_seqlens;                    // [documents + 1] int32, 0 then the running document ends
  torch::Tensor grid_thw;                      // [images, 3] int64 (t, h, w) in patches; undefined without
};

// The row as CPU tensors.
model_batch to_model_batch(const packed_row& row);

// The same batch with every tensor on `device` (non-blocking copies; a no-op for the CPU).
model_batch to_device(model_batch batch, const torch::Device& device);

class vision_tower_impl;
class decoder_layer_impl;
class rms_norm_impl;

class vlm_model_impl : public torch::nn::Module {
 public:
  // Throws std::invalid_argument when the spec asks for something this example does not build.
  explicit vlm_model_impl(const flopmeter::model_spec& spec);
  ~vlm_model_impl() override;

  // The summed cross-entropy over the label tokens of the row (a scalar; divide for a mean).
  torch::Tensor forward(const model_batch& batch);

  const flopmeter::model_spec& spec() const { return spec_; }

  // Stops the named parts' weights from training (requires_grad false): vision = patch embedding and ViT
  // blocks, merger = the patch merger and the DeepStack mergers, text = embeddings, decoder layers and norms,
  // the LM head. Autograd then computes no gradient for them, and only the input gradients something
  // trainable upstream needs: the training regime flopmeter bills (flopmeter::training_regime).
  void freeze(bool vision, bool merger, bool text);
  // LoRA adapters of `rank` on every decoder projection named in `targets` (Hugging Face names: q_proj, k_proj,
  // v_proj, o_proj, in_proj_qkv, in_proj_z, out_proj, MLA's q_a_proj, q_b_proj, kv_a_proj_with_mqa, kv_b_proj,
  // and gate_proj, up_proj, down_proj of dense SwiGLU MLPs;
  // MoE experts get none). Their matmuls run in the kLoraAdapters scope. Returns the adapters added. Call
  // freeze(..., text = true) too for a LoRA run: the base weights do not train.
  int add_lora(std::int64_t rank, const std::vector<std::string>& targets);
  // Activation checkpointing (checkpoint.h), as flopmeter bills it (flopmeter::recompute_options): "full",
  // "full_early_stop" and "op" checkpoint whole decoder layers (all, the first `layers`, or every `every`-th)
  // and, with `vision`, the ViT blocks, the last two keeping the outputs of the products their policy saves;
  // "selective" checkpoints their softmax attention cores only. The forward they run again is in the
  // kRecomputeScope user scope. Throws std::invalid_argument for more than one pipeline stage.
  void set_recompute(const flopmeter::recompute_options& options);

 private:
  bool checkpointed_layer(std::int64_t i) const;

  flopmeter::model_spec spec_;
  torch::Tensor embed_tokens_;  // [vocab, h]
  torch::Tensor lm_head_;       // [vocab, h]; the same tensor as embed_tokens_ when tied
  std::shared_ptr<vision_tower_impl> vision_;
  std::vector<std::shared_ptr<decoder_layer_impl>> layers_;
  std::shared_ptr<rms_norm_impl> final_norm_;
  flopmeter::recompute_options recompute_;
};
TORCH_MODULE_IMPL(vlm_model, vlm_model_impl);

}  // namespace vlm
