// flopmeter/flop_model.h — exact training FLOPs of one packed micro-batch.
//
// What it is: the FLOP model turns a `model_spec` into per-unit coefficients (FLOPs per token, per causal
// (query, key) pair, per patch, ...) and a micro-batch description into exact integer counts of those units.
// FLOPs = sum over terms of coefficient x count. Training = forward + backward = 3x the forward matmul work;
// one multiply-add = 2 FLOPs; only matmul work is counted (norms, activations, softmax, RoPE are not).
// The derivation of every coefficient is next to its code (plugin/arch/flop_terms.cpp per GEMM family,
// flop_model.cpp and training_regime.cpp per coefficient) and, for users, in METRICS.md.
//
// Numeric types (chosen so 1M-token rows, 100k-patch items and 100k documents stay exact):
// - coefficients and counts are std::int64_t, exact; count_* functions reject input whose counts would
//   overflow int64 (an L = 1M document has L(L+1)/2 = 5e11 pairs; a 100k-patch item has 1e10 pairs).
// - a term's FLOPs = coefficient x count is formed exactly in 128-bit integer arithmetic and rounded once to
//   double: exact below 2^53 (~9e15), relative error <= 2^-53 above. Totals are sums of those doubles.
// Ownership: everything here is a value; count_* read the caller's arrays during the call only.
// Thread-safety: all functions are pure; call them from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "flopmeter/array_view.h"
#include "flopmeter/error.h"
#include "flopmeter/export.h"
#include "flopmeter/model_spec.h"

namespace flopmeter FLOPMETER_EXPORT {

// Which work is counted.
enum class flop_scope {
  seed,      // exactly the reference trainer's four terms; ViT attention billed over the whole item (t*h*w)^2
  complete,  // the work the model does: + patch embedding, patch/DeepStack mergers, ViT attention per
             //   temporal patch t*(h*w)^2, MTP layers when trained. The default.
};

const char* to_string(flop_scope scope);
// Parses "seed" / "complete"; throws flopmeter::error located at `where` otherwise (a config file's line and
// column and key, or a command-line flag as the file: {"--scope"}).
flop_scope parse_flop_scope(const std::string& text, const error_location& where);

// A decoder's attention windows (full attention is none: causal_pairs counts it); the count functions take them
// in vision_geometry, the coefficients bill them per window.
enum class window_kind : std::uint8_t {
  sliding,  // query i attends keys j with i - size < j <= i (transformers' sliding-window mask)
  chunked,  // query i attends the keys of its own chunk of `size` tokens, causally (Llama 4's chunked attention)
};
struct attention_window {
  window_kind kind = window_kind::sliding;
  std::int64_t size = 0;  // >= 1
};
// The distinct windows a decoder may use besides full attention (a model with two windows has two counts).
inline constexpr std::size_t kMaxAttentionWindows = 2;

// dense_per_token split by GEMM family; the parts sum to dense_per_token exactly. Mixture of experts (dropless
// routing: every token visits exactly num_experts_per_tok experts, none is dropped for capacity):
//   moe_router             hidden x num_experts per MoE layer (the gate that scores the experts)
//   moe_routed_experts     num_experts_per_tok SwiGLU experts, 3 x hidden x moe_intermediate_size each
//   moe_shared_expert      the shared SwiGLU expert, 3 x hidden x shared_expert_intermediate_size (Qwen3.5 MoE)
//   moe_shared_expert_gate its sigmoid gate, hidden x 1
struct dense_terms {
  std::int64_t attention_projections = 0;  // softmax attention q/k/v/o (+ output gate), or MLA's projections
  std::int64_t linear_attention = 0;       // Gated DeltaNet layers
  std::int64_t dense_mlp = 0;              // SwiGLU of intermediate_size in the dense-MLP layers
  std::int64_t moe_router = 0;
  std::int64_t moe_routed_experts = 0;
  std::int64_t moe_shared_expert = 0;
  std::int64_t moe_shared_expert_gate = 0;
  std::int64_t logits = 0;                 // LM head hidden -> vocab
  std::int64_t lora_adapters = 0;          // LoRA A and B GEMMs of every adapted projection (0 without LoRA)
};

// Training FLOPs (fwd + bwd) per unit. All exact integers.
struct coefficients {
  // The reference trainer's four, exactly as it defines them:
  std::int64_t dense_per_token = 0;   // decoder projections (incl. output gate), Gated DeltaNet, SwiGLU, logits
  std::int64_t text_attn_pair = 0;    // per causal (query, key) pair, summed over full-attention layers
  // Per (query, key) pair under attention window k (geometry_of(spec).windows[k]), summed over the layers that
  // use that window; 0 for a model without windows.
  std::int64_t window_attn_pair[kMaxAttentionWindows] = {};
  std::int64_t vision_per_patch = 0;  // ViT blocks' projections and MLP per patch
  std::int64_t vision_attn_pair = 0;  // per ViT (query, key) pair, summed over the blocks attending per segment
  // What the reference leaves out (counted in complete scope):
  std::int64_t patch_embed_per_patch = 0;     // the patch-embedding linear map
  std::int64_t merger_per_merged_token = 0;   // patch merger + DeepStack mergers, per merged token
  std::int64_t mtp_per_token = 0;             // MTP layers' dense work (0 unless train_mtp_layers)
  std::int64_t mtp_attn_pair = 0;             // MTP layers' attention per causal pair (0 unless trained)
  std::int64_t patches_per_merged_token = 1;  // spatial_merge_size^2
  dense_terms dense;                          // dense_per_token by GEMM family (sums to dense_per_token)
  // Added in 0.3 (0 for a model without them):
  std::int64_t vision_window_attn_pair = 0;  // per ViT pair inside a window, summed over Qwen2.5-VL's window blocks
  std::int64_t image_block_pair = 0;         // per decoder pair an image's bidirectional block adds (Gemma 3),
                                             //   summed over the decoder's attention layers
  // Activation recomputation (training_regime::recompute): the forward FLOPs run a second time in the
  // backward, per unit, 2 per multiply-add. Not part of the model FLOPs above (MFU); model + these = hardware
  // FLOPs (HFU). All 0 with recompute "none" and in compute_coefficients(spec).
  struct recompute_terms {
    std::int64_t text_per_token = 0;  // re-executed decoder GEMMs per device token (sums `dense`)
    std::int64_t text_attn_pair = 0;  // re-executed attention core per causal pair
    std::int64_t window_attn_pair[kMaxAttentionWindows] = {};  // re-executed core per pair under window k
    std::int64_t vision_per_patch = 0;                         // re-executed ViT block GEMMs per patch
    std::int64_t vision_attn_pair = 0;                         // re-executed ViT attention core per (query, key) pair
    dense_terms dense;                         // text_per_token by GEMM family (logits and LoRA included; logits 0)
    std::int64_t vision_window_attn_pair = 0;  // re-executed ViT attention core per windowed pair (Qwen2.5-VL)
    std::int64_t image_block_pair = 0;         // re-executed decoder core per image-block pair (Gemma 3)
  } recompute;
};

// Thrown by compute_coefficients when a coefficient, or a sum that reports form from two of them
// (dense_per_token + mtp_per_token, text_attn_pair + mtp_attn_pair), would not fit in int64. Nothing wraps:
// products are formed in saturating 128-bit arithmetic. fields() names the model_spec fields of the
// product that is too large ("text.hidden_size", "vision.spatial_merge_size", ...), so a loader can cite
// where they are set.
class coefficient_overflow : public error {
 public:
  coefficient_overflow(const std::string& coefficient, std::vector<std::string> fields);
  const std::string& coefficient() const noexcept { return coefficient_; }
  const std::vector<std::string>& fields() const noexcept { return fields_; }

 private:
  std::string coefficient_;
  std::vector<std::string> fields_;
};

// Throws coefficient_overflow (above) when a coefficient does not fit in int64.
coefficients compute_coefficients(const model_spec& spec);

// One image or video, in patches: t temporal patches of an h x w patch grid (Qwen's grid_thw).
struct image_grid {
  std::int64_t t = 0;
  std::int64_t h = 0;
  std::int64_t w = 0;
};

// Exact unit counts of one micro-batch, or of a sum of micro-batches (they add).
struct batch_counts {
  std::int64_t real_tokens = 0;      // tokens that belong to a document
  std::int64_t padding_tokens = 0;   // tokens the device ran that belong to no document
  std::int64_t documents = 0;
  std::int64_t causal_pairs = 0;     // sum over documents of L(L+1)/2
  std::int64_t items = 0;            // images + videos
  std::int64_t patches = 0;          // sum of t*h*w
  std::int64_t merged_tokens = 0;    // sum of t*h*w / spatial_merge_size^2
  std::int64_t vision_pairs_per_frame = 0;  // sum of t*(h*w)^2 (attention within a temporal patch)
  std::int64_t vision_pairs_whole = 0;      // sum of (t*h*w)^2  (the reference's billing)
  // The (query, key) pairs under each attention window of the decoder (vision_geometry::windows[k]), summed
  // over documents, attention inside each document as a varlen kernel runs it. A document of L tokens has:
  //   sliding w: query i attends keys j with i - w < j <= i:  L(L+1)/2 when L <= w, else w(w+1)/2 + (L-w)*w;
  //   chunked c: query i attends the keys of its own chunk of c tokens, causally: with q = L / c, r = L % c,
  //              q * c(c+1)/2 + r(r+1)/2.
  // 0 for a window the geometry does not have (window_count <= k).
  std::int64_t window_pairs_0 = 0;
  std::int64_t window_pairs_1 = 0;
  // Vision counts added in 0.3 (METRICS.md; 0 for a model without the feature). An item t x h x w is t segments.
  //   vision_window_pairs  Qwen2.5-VL window blocks: per segment the sum over its windows of (patches in it)^2
  //   vision_cls_tokens    InternViT: one CLS token per segment (sum of t); vision_pairs_per_frame then counts
  //                        t*(h*w + 1)^2
  //   image_block_pairs    Gemma 3: per segment of n merged tokens n(n-1)/2, the pairs its bidirectional block
  //                        adds to the causal ones in the decoder
  std::int64_t vision_window_pairs = 0;
  std::int64_t vision_cls_tokens = 0;
  std::int64_t image_block_pairs = 0;
  // The part of real + padding tokens and of causal_pairs that lies in micro-batches without any image or
  // video. A frozen decoder gets a gradient only through the images it sees (training_regime), so such a
  // micro-batch may be billed differently (regime_coefficients::without_items).
  std::int64_t itemless_device_tokens = 0;
  std::int64_t itemless_causal_pairs = 0;
  std::int64_t itemless_window_pairs_0 = 0;
  std::int64_t itemless_window_pairs_1 = 0;

  std::int64_t device_tokens() const { return real_tokens + padding_tokens; }
  // Adds `other`; throws flopmeter::error if any field would overflow.
  batch_counts& operator+=(const batch_counts& other);
};
bool operator==(const batch_counts& a, const batch_counts& b);

// The three ways a trainer describes where documents start; all give identical counts.
// Lengths: each >= 0. cu_seqlens: starts at 0, non-decreasing (documents = size - 1). Positions: one entry
// per real token, 0 starts a document and otherwise each entry is the previous + 1.
// `padding_tokens` >= 0. Grids: t, h, w >= 1, h and w divisible by spatial_merge_size; grids need a vision
// tower (`spec` or `merge` says which). Throws flopmeter::error naming the bad entry by index.
// Windows: the first window_count entries of `windows` are counted, window k into batch_counts::window_pairs_k;
// each has size >= 1 (the count functions throw flopmeter::error otherwise). geometry_of(spec) fills them.
struct vision_geometry {
  bool has_vision = false;
  std::int64_t spatial_merge_size = 1;
  std::int64_t window_count = 0;  // 0 .. kMaxAttentionWindows
  attention_window windows[kMaxAttentionWindows];
  // The vision tower's segment layout (added in 0.3; geometry_of(spec) fills them):
  std::int64_t vision_window = 0;  // Qwen2.5-VL: window edge in merged tokens (window_size / patch_size /
                                   // spatial_merge_size); 0: no window blocks
  std::int64_t cls_tokens = 0;     // tokens added to every segment (InternViT's CLS: 1)
  std::int64_t segment_side = 0;   // h and w must both equal it (InternVL tiles, Gemma 3 images); 0: any
  bool image_block = false;        // count image_block_pairs (Gemma 3)
};
vision_geometry geometry_of(const model_spec& spec);

batch_counts count_from_lengths(array_view<std::int64_t> document_lengths, std::int64_t padding_tokens,
                                array_view<image_grid> grids, const vision_geometry& geometry);
batch_counts count_from_cu_seqlens(array_view<std::int64_t> cu_seqlens, std::int64_t padding_tokens,
                                   array_view<image_grid> grids, const vision_geometry& geometry);
batch_counts count_from_positions(array_view<std::int64_t> positions, std::int64_t padding_tokens,
                                  array_view<image_grid> grids, const vision_geometry& geometry);
// The same for int32 positions (compared in 64 bits: a run past INT32_MAX is an error, never a wrap).
batch_counts count_from_positions(array_view<std::int32_t> positions, std::int64_t padding_tokens,
                                  array_view<image_grid> grids, const vision_geometry& geometry);

// FLOPs per term; `total()` is their sum. Terms outside the scope are 0.
struct flop_breakdown {
  double text_dense = 0;        // dense_per_token x (real + padding tokens)
  double text_attention = 0;    // text_attn_pair x causal pairs (+ image_block_pair x image block pairs)
  double vision_dense = 0;      // vision_per_patch x (patches + CLS tokens)
  double vision_attention = 0;  // vision_attn_pair x (pairs per frame | whole-item pairs in seed scope)
                                //   + vision_window_attn_pair x window pairs
  double patch_embed = 0;       // complete only
  double merger = 0;            // complete only
  double mtp = 0;               // complete only, when MTP layers are trained
  // The forward work that activation recomputation runs again (0 with recompute "none"), by term: the
  // recompute coefficients times the same counts as text_dense, text_attention, vision_dense, vision_attention.
  struct recompute_flops {
    double text_dense = 0;
    double text_attention = 0;
    double vision_dense = 0;
    double vision_attention = 0;
    double total() const { return text_dense + text_attention + vision_dense + vision_attention; }
  } recompute;
  double total() const;  // model FLOPs (MFU's): the terms above, without `recompute`
  double hardware_total() const { return total() + recompute.total(); }  // what the device ran (HFU's)
};

flop_breakdown compute_flops(const coefficients& coeffs, const batch_counts& counts, flop_scope scope);
// The exact sum of the same terms, with no rounding, as a decimal integer ("123456789..."): for callers that
// keep arbitrary-precision integers (the Python package's FlopModel.flops returns a Python int). Every
// product is formed in 128 bits and the sum in 129, so it is exact for any int64 coefficients and counts.
std::string exact_total_flops(const coefficients& coeffs, const batch_counts& counts, flop_scope scope);

// ---- What trains: frozen parts and LoRA adapters -------------------------------------------------------------
//
// Every GEMM is billed per multiply-add: forward 2, + input gradient 2 when its input needs a gradient (something
// trainable lies upstream of it), + weight gradient 2 when its weight trains. A weightless product (attention
// core, Gated DeltaNet delta rule) costs forward 2 + backward 4 when a gradient flows through it, forward 2
// otherwise. With everything trainable that is the 6 of compute_coefficients(spec) (4 for the patch embedding,
// whose input is pixels). The derivation per GEMM is in plugin/arch/training_regime.cpp; METRICS.md has the table.

// The decoder projections a LoRA adapter can sit on, named as Hugging Face and PEFT name them. in_proj_qkv,
// in_proj_z and out_proj are Gated DeltaNet projections; gate_proj, up_proj, down_proj the dense SwiGLU's;
// q_a_proj, q_b_proj, kv_a_proj_with_mqa and kv_b_proj multi-head latent attention's (with q_proj when
// q_lora_rank is none, and o_proj). Added in 0.3: the four MLA names, after out_proj.
enum class lora_target : unsigned {
  q_proj,
  k_proj,
  v_proj,
  o_proj,
  gate_proj,
  up_proj,
  down_proj,
  in_proj_qkv,
  in_proj_z,
  out_proj,
  q_a_proj,
  q_b_proj,
  kv_a_proj_with_mqa,
  kv_b_proj,
};
const char* to_string(lora_target target);
// Parses a name above; throws flopmeter::error naming `where` and the accepted names otherwise.
lora_target parse_lora_target(const std::string& name, const std::string& where);

// ---- Activation recomputation ----------------------------------------------------------------------------
//
// A checkpointed layer keeps no activations in the forward and runs (part of) its forward again in the
// backward. That work is hardware FLOPs, not model FLOPs: MFU ignores it (PaLM's definition), HFU counts it.
// The rule, per GEMM (and per weightless product: attention core, delta rule): in a checkpointed layer whose
// backward runs (its output needs a gradient), each product the policy names runs once more forward, 2 FLOPs
// per multiply-add. A layer no gradient crosses (a frozen vision tower, the decoder layers below the first
// LoRA adapter of a text-only LoRA run) runs no backward and recomputes nothing, whatever the policy. Which
// products each policy names, per layer kind: plugin/arch/training_regime.cpp and METRICS.md.
enum class recompute_policy : unsigned {
  none,             // nothing is recomputed (the default)
  full,             // the whole layer: Megatron's "full", torch's reentrant checkpoint
  full_early_stop,  // torch's non-reentrant checkpoint (HF Trainer, torchtitan): the whole layer but its last
                    // GEMM (a dense MLP's down projection), whose output nothing saves
  selective,        // the softmax attention core only (QK^T and PV): Megatron's selective core_attn
  op,               // torchtitan's per-op policy: every second matmul of the layer in forward order
};
const char* to_string(recompute_policy policy);
// Parses a name above; throws flopmeter::error naming `where` and the accepted names otherwise.
recompute_policy parse_recompute_policy(const std::string& name, const std::string& where);

struct recompute_options {
  recompute_policy policy = recompute_policy::none;
  // Which decoder layers are checkpointed: all (both 0, the default), or the first `layers` of each pipeline
  // stage (Megatron's "block" method; the decoder split evenly into `pipeline_stages`), or every `every`-th
  // (layer i when (i + 1) % every == 0: torch's/torchtitan's apply_ac(freq)). At most one of the two is set.
  std::int64_t layers = 0;
  std::int64_t every = 0;
  std::int64_t pipeline_stages = 1;  // pp: the plugin sets it from [parallel] pp
  bool vision = false;               // also checkpoint every ViT block (HF's gradient_checkpointing_enable() does)
};

struct training_regime {
  bool vision_frozen = false;  // ViT blocks, patch embedding, position embedding: no weight trains
  bool merger_frozen = false;  // the patch merger and the DeepStack mergers
  bool text_frozen = false;    // the decoder, its norms, the LM head, MTP layers, embeddings
  // LoRA: adapters of rank lora_rank (> 0) on every decoder projection named in lora_targets; the decoder's
  // base weights (and its norms, embeddings, LM head) are then frozen, whatever text_frozen says. 0: no LoRA.
  std::int64_t lora_rank = 0;
  std::vector<lora_target> lora_targets;
  recompute_options recompute;  // activation recomputation (hardware FLOPs only; model FLOPs unchanged)
  // A sparse-attention indexer (model_spec's index_topk) runs forward only by default, as the reference runs it
  // (without gradient). true: its weights train on detached inputs (DeepSeek-V3.2's indexer warm-up and sparse
  // training): its projections' weight gradients and its scores' backward are billed too.
  bool indexer_trains = false;

  // Model FLOPs only: recomputation does not change what full_training() means.
  bool full_training() const { return !vision_frozen && !merger_frozen && !text_frozen && lora_rank == 0; }
  bool adapts(lora_target target) const;
};

// "vision,merger" (the frozen parts in that order), "" when nothing is frozen.
std::string frozen_list(const training_regime& regime);
// Sets the part a name stands for ("vision", "merger" or "text"); throws flopmeter::error naming `where` for
// another name or a part named twice.
void add_frozen_part(training_regime& regime, const std::string& part, const std::string& where);

// Throws flopmeter::error when the regime does not fit the model: nothing trains (every part the model has is
// frozen), a LoRA rank < 0 or above 2^20, targets without a rank or a rank without targets, a target repeated,
// SwiGLU targets (gate_proj, up_proj, down_proj) on a mixture-of-experts model (adapters on experts are not
// billed: out of scope), or targets none of which the model has.
void validate_training_regime(const model_spec& spec, const training_regime& regime);

// The coefficients of a regime. A frozen decoder (text frozen, no LoRA) gets a gradient only through the images
// and videos of its micro-batch, when the vision side trains: a micro-batch without any runs its text work
// forward only. Those micro-batches are billed with `without_items` (their text and MTP terms); all others,
// and every vision term, with `with_items`. Both are equal for every other regime.
struct regime_coefficients {
  coefficients with_items;
  coefficients without_items;
  regime_coefficients() = default;
  // One set for every micro-batch (a regime where items change nothing, e.g. full training).
  regime_coefficients(const coefficients& both) : with_items(both), without_items(both) {}  // NOLINT: implicit
};

// Validates the regime (validate_training_regime), then bills each GEMM by the rule above. With full training,
// both sets equal compute_coefficients(spec). Throws coefficient_overflow like compute_coefficients.
regime_coefficients compute_coefficients(const model_spec& spec, const training_regime& regime);

// FLOPs of `counts` in a regime: the text terms of counts.itemless_* with without_items, the rest with
// with_items.
flop_breakdown compute_flops(const regime_coefficients& coeffs, const batch_counts& counts, flop_scope scope);

}  // namespace FLOPMETER_EXPORT
