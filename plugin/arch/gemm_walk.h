// plugin/arch/gemm_walk.h — internal: the one walk over every GEMM of a model in a training regime.
//
// walk_gemms() visits each GEMM (and each weightless product: the attention core, the delta rule) once per layer
// group, in each block's forward order, with what its backward computes under the regime: whether its input needs
// a gradient (the input-gradient GEMM runs) and whether its weight trains (the weight-gradient GEMM runs). A
// fold turns the visits into numbers: training_regime.cpp folds them into the coefficients (forward 2, input
// gradient 2, weight gradient 2 FLOPs per multiply-add; a weightless product 2 forward and 4 backward when a
// gradient flows through it); another fold (a recomputed forward where a backward runs, ...) reads the same
// visits. The data flow that decides the two flags is derived in gemm_walk.cpp.
// Not installed. Thread-safety: pure; the visitor is called on the caller's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "arch/flop_terms.h"
#include "flopmeter/flop_model.h"
#include "flopmeter/model_spec.h"

namespace flopmeter::detail {

enum class model_part : std::uint8_t { vision, merger, text, mtp };

// The coefficient a GEMM's work feeds. The first nine are dense_per_token's parts, in dense_terms' order.
enum class coefficient_slot : std::uint8_t {
  attention_projections,
  linear_attention,
  dense_mlp,
  moe_router,
  moe_routed_experts,
  moe_shared_expert,
  moe_shared_expert_gate,
  logits,
  lora_adapters,
  text_attn_pair,
  window_attn_pair_0,
  window_attn_pair_1,
  vision_per_patch,
  vision_attn_pair,
  patch_embed_per_patch,
  merger_per_merged_token,
  mtp_per_token,
  mtp_attn_pair,
  vision_window_attn_pair,
  image_block_pair,
};
inline constexpr std::size_t kCoefficientSlots = 20;
inline constexpr std::size_t kDenseSlots = 9;  // attention_projections .. lora_adapters

struct gemm_visit {
  model_part part = model_part::text;
  std::size_t group = 0;        // the layer group within its part (0 for the LM head, eh_proj, the vision parts)
  factor layers{1, nullptr};    // how many layers run it
  int order = 0;                // position in its block's forward order (every product, from 0)
  int matmul = 0;               // its number among the block's matmuls, from 1 (projections, LoRA's A and B after
                                // their base, the router, each of the experts' gate, up and down as one grouped
                                // matmul); 0 for the attention core, the conv and the delta rule
  bool last = false;            // the block's final GEMM, whose output only the residual add reads (the gated
                                // MLP's down_proj, or its LoRA B when adapted; the ViT's fc2)
  const char* name = "";        // "q_proj", "attention_core", "lm_head", ... (Hugging Face names where they exist)
  bool weightless = false;      // a product of two activations: no weight, its backward forms both operands' gradients
  bool input_gradient = false;  // its input needs a gradient (weightless: a gradient flows through it)
  bool weight_trains = false;   // its weight gradient runs
  term macs;                    // forward multiply-adds per unit (token, pair, patch, merged token) of one layer
  coefficient_slot slot = coefficient_slot::attention_projections;

  bool backward_runs() const { return input_gradient || weight_trains; }
  // Passes of the forward's size: forward 1, + 1 per gradient GEMM; a weightless product 1 + 2 (both operands).
  int128 passes() const {
    if (weightless) return input_gradient ? 3 : 1;
    return 1 + (input_gradient ? 1 : 0) + (weight_trains ? 1 : 0);
  }
};

using gemm_visitor = std::function<void(const gemm_visit&)>;

// Visits every GEMM of `spec` under `regime` (assumed valid: validate_training_regime). `items`: the micro-batch
// has an image or video (a trainable vision side then sends a gradient into a frozen decoder). Text-only parts
// (text, LM head, MTP when spec.train_mtp_layers) are visited for the decoder; vision and merger parts when the
// model has a vision tower.
void walk_gemms(const model_spec& spec, const training_regime& regime, bool items, const gemm_visitor& visit);

// The decoder layers [from, to) whose number i+1 is a multiple of `every`, walked as `walk_gemms` walks them with
// input gradient `g` (a fold that selects layers, e.g. the checkpointed ones, walks them again). Visits carry
// part text, their group's layer count among the selected layers.
void walk_decoder_layers(const model_spec& spec, const training_regime& regime, std::int64_t from, std::int64_t to,
                         std::int64_t every, bool g, const gemm_visitor& visit);

// The coefficients the walk's visits fold into (training_regime.cpp): each slot's pass-weighted multiply-adds x 2.
// Throws coefficient_overflow.
coefficients fold_coefficients(const model_spec& spec, const training_regime& regime, bool items);

// The first decoder layer with a LoRA adapter, or num_hidden_layers when none has one.
std::int64_t first_adapted_layer(const model_spec& spec, const training_regime& regime);

}  // namespace flopmeter::detail
