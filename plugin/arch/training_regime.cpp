// plugin/arch/training_regime.cpp — the coefficients of a training regime (frozen parts, LoRA adapters;
// flopmeter/flop_model.h training_regime): the visits of the one GEMM walk (gemm_walk.h, where the rule and its
// derivation are) folded into coefficients, and the regime's own checks and names.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "arch/flop_terms.h"
#include "arch/gemm_walk.h"
#include "flopmeter/error.h"
#include "flopmeter/flop_model.h"

namespace flopmeter {

using namespace detail;  // the term arithmetic and the GEMM families of flop_terms.h

// What trains: frozen parts and LoRA adapters. The rule (forward 2, input gradient 2 where the input needs one,
// weight gradient 2 where the weight trains) and the data flow that decides it are derived in gemm_walk.cpp, the
// one walk over every GEMM; here its visits are folded into coefficients. Full training is the regime where
// everything trains (compute_coefficients(spec) folds the same walk).

namespace {

// Pass-weighted multiply-adds of every coefficient slot.
struct slot_sums {
  term slot[kCoefficientSlots];
  const term& operator[](coefficient_slot s) const { return slot[static_cast<std::size_t>(s)]; }
};

slot_sums fold(const model_spec& spec, const training_regime& regime, bool items) {
  slot_sums sums;
  walk_gemms(spec, regime, items, [&sums](const gemm_visit& v) {
    term& into = sums.slot[static_cast<std::size_t>(v.slot)];
    into = into + v.macs * v.layers * factor{v.passes(), nullptr};
  });
  return sums;
}

constexpr int128 kFlopsPerPass = 2;

// The text coefficients (dense_per_token and its parts, the pair terms, MTP) of one fold into `c`, checked in a
// fixed order so that the same part overflows first.
void text_coefficients(const model_spec& spec, const slot_sums& w, coefficients& c) {
  dense_terms& d = c.dense;
  std::int64_t* const parts[kDenseSlots] = {
      &d.attention_projections, &d.linear_attention,       &d.dense_mlp, &d.moe_router,   &d.moe_routed_experts,
      &d.moe_shared_expert,     &d.moe_shared_expert_gate, &d.logits,    &d.lora_adapters};
  const char* const names[kDenseSlots] = {"dense_per_token (attention projections)",
                                          "dense_per_token (Gated DeltaNet)",
                                          "dense_per_token (dense MLP)",
                                          "dense_per_token (MoE router)",
                                          "dense_per_token (MoE routed experts)",
                                          "dense_per_token (MoE shared expert)",
                                          "dense_per_token (MoE shared-expert gate)",
                                          "dense_per_token (logits)",
                                          "dense_per_token (LoRA adapters)"};
  term total;
  for (std::size_t i = 0; i < kDenseSlots; ++i) {
    *parts[i] = to_coefficient(w.slot[i], kFlopsPerPass, names[i]);
    total = total + w.slot[i];
  }
  c.dense_per_token = to_coefficient(total, kFlopsPerPass, "dense_per_token");
  c.text_attn_pair = to_coefficient(w[coefficient_slot::text_attn_pair], kFlopsPerPass, "text_attn_pair");
  c.window_attn_pair[0] = to_coefficient(w[coefficient_slot::window_attn_pair_0], kFlopsPerPass, "window_attn_pair[0]");
  c.window_attn_pair[1] = to_coefficient(w[coefficient_slot::window_attn_pair_1], kFlopsPerPass, "window_attn_pair[1]");
  c.mtp_per_token = 0;
  c.mtp_attn_pair = 0;
  if (spec.train_mtp_layers && spec.text.mtp_num_hidden_layers > 0) {
    const term& mtp = w[coefficient_slot::mtp_per_token];
    const term& mtp_pairs = w[coefficient_slot::mtp_attn_pair];
    c.mtp_per_token = to_coefficient(mtp, kFlopsPerPass, "mtp_per_token");
    c.mtp_attn_pair = to_coefficient(mtp_pairs, kFlopsPerPass, "mtp_attn_pair");
    check_sum_fits(c.dense_per_token, total, c.mtp_per_token, mtp, "dense_per_token + mtp_per_token");
    check_sum_fits(c.text_attn_pair, w[coefficient_slot::text_attn_pair], c.mtp_attn_pair, mtp_pairs,
                   "text_attn_pair + mtp_attn_pair");
  }
}

void vision_coefficients(const model_spec& spec, const slot_sums& w, coefficients& c) {
  if (!spec.vision) return;
  c.vision_per_patch = to_coefficient(w[coefficient_slot::vision_per_patch], kFlopsPerPass, "vision_per_patch");
  c.vision_attn_pair = to_coefficient(w[coefficient_slot::vision_attn_pair], kFlopsPerPass, "vision_attn_pair");
  c.patch_embed_per_patch =
      to_coefficient(w[coefficient_slot::patch_embed_per_patch], kFlopsPerPass, "patch_embed_per_patch");
  c.merger_per_merged_token =
      to_coefficient(w[coefficient_slot::merger_per_merged_token], kFlopsPerPass, "merger_per_merged_token");
  c.vision_window_attn_pair =
      to_coefficient(w[coefficient_slot::vision_window_attn_pair], kFlopsPerPass, "vision_window_attn_pair");
  c.image_block_pair = to_coefficient(w[coefficient_slot::image_block_pair], kFlopsPerPass, "image_block_pair");
  const std::int64_t m = spec.vision->spatial_merge_size;
  c.patches_per_merged_token = m * m;  // <= 2^62: sizes are <= 2^31
}

// ---- Activation recomputation: the re-executed forward, a fold of the same walk -----------------------------
//
// A checkpointed layer whose backward runs (its output needs a gradient) runs part of its forward again in the
// backward. Each visit of such a layer adds its forward multiply-adds once when the policy runs it again, to a
// second set of sums (model FLOPs and MFU are unchanged). Which products run again, per policy (forward order
// inside one layer, gemm_visit::matmul numbering the matmuls):
//   full             every product: the projections (with LoRA's A and B), the attention core, the Gated
//                    DeltaNet conv and delta rule, the MLP or MoE block (Megatron "full", torch reentrant).
//   full_early_stop  the same but the layer's final GEMM (gemm_visit::last: the gated MLP's down_proj, or its LoRA
//                    B). Torch's non-reentrant checkpoint stops once the last tensor autograd saved is recomputed;
//                    the final GEMM's inputs are saved before it runs, its output by nothing. An MoE block's expert
//                    outputs are scaled by their routing weights (a saved product): none of its GEMMs is final.
//   selective        the softmax attention core only (QK^T and PV, any window; MLA's too), where a gradient flows
//                    through it (Megatron's core_attn).
//   op               torchtitan's per-op policy: the even-numbered matmuls run again, the odd ones are saved; the
//                    attention core is saved; the conv and the delta rule are not matmuls and run again; the final
//                    GEMM is cut by torch's early stop as above.
// A layer no gradient crosses runs no backward and recomputes nothing (the forward-only layers below the first
// LoRA adapter of a text-only LoRA run; a frozen ViT). Logits, MTP layers, the patch embedding and the mergers
// sit in no checkpointed layer.
int128 recomputed(recompute_policy policy, const gemm_visit& v) {
  const bool full = policy == recompute_policy::full, early = policy == recompute_policy::full_early_stop;
  const bool attention_core = v.weightless && v.slot != coefficient_slot::linear_attention;
  if (attention_core) {
    return full || early || (policy == recompute_policy::selective && v.input_gradient) ? 1 : 0;
  }
  if (v.matmul == 0) return full || early || policy == recompute_policy::op ? 1 : 0;  // conv, delta rule
  if (full) return 1;
  if (early) return v.last ? 0 : 1;
  if (policy == recompute_policy::op) return v.matmul % 2 == 0 && !v.last ? 1 : 0;
  return 0;
}

// The recomputed forward of the decoder layers [from, to) checkpointed under `o` (the first o.layers of each
// pipeline stage, or every o.every-th layer, or all), whose input gradient is `g`.
void recompute_layers(const model_spec& spec, const training_regime& regime, std::int64_t from, std::int64_t to, bool g,
                      slot_sums& r) {
  const recompute_options& o = regime.recompute;
  const auto add = [&r, &o](const gemm_visit& v) {
    term& into = r.slot[static_cast<std::size_t>(v.slot)];
    into = into + v.macs * v.layers * factor{recomputed(o.policy, v), nullptr};
  };
  if (o.layers > 0) {
    // Megatron's block method: the first `layers` of each pipeline stage's num_hidden_layers / stages.
    const std::int64_t stage = spec.text.num_hidden_layers / o.pipeline_stages;
    for (std::int64_t s = 0; s < o.pipeline_stages; ++s) {
      const std::int64_t a = std::max(from, s * stage), b = std::min(to, s * stage + o.layers);
      if (a < b) walk_decoder_layers(spec, regime, a, b, 1, g, add);
    }
  } else if (from < to) {
    walk_decoder_layers(spec, regime, from, to, o.every > 0 ? o.every : 1, g, add);
  }
}

// The recomputed forward of a micro-batch (with or without items) into `c.recompute`, 2 FLOPs per multiply-add.
void recompute_coefficients(const model_spec& spec, const training_regime& regime, bool items, coefficients& c) {
  const recompute_options& o = regime.recompute;
  if (o.policy == recompute_policy::none) return;
  slot_sums r;
  const bool weights_train = !regime.text_frozen && regime.lora_rank == 0;
  const bool vision_side_trains = spec.vision && (!regime.vision_frozen || !regime.merger_frozen);
  const std::int64_t n = spec.text.num_hidden_layers;
  if (weights_train || (items && vision_side_trains)) {
    recompute_layers(spec, regime, 0, n, true, r);
  } else {
    // As the walk: nothing upstream of the first adapted layer trains, so no backward runs there.
    const std::int64_t f = first_adapted_layer(spec, regime);
    recompute_layers(spec, regime, f, std::min(f + 1, n), false, r);
    recompute_layers(spec, regime, f + 1, n, true, r);
  }
  coefficients::recompute_terms& rc = c.recompute;
  dense_terms& d = rc.dense;
  std::int64_t* const parts[kDenseSlots] = {
      &d.attention_projections, &d.linear_attention,       &d.dense_mlp, &d.moe_router,   &d.moe_routed_experts,
      &d.moe_shared_expert,     &d.moe_shared_expert_gate, &d.logits,    &d.lora_adapters};
  const char* const names[kDenseSlots] = {"recompute (attention projections)",
                                          "recompute (Gated DeltaNet)",
                                          "recompute (dense MLP)",
                                          "recompute (MoE router)",
                                          "recompute (MoE routed experts)",
                                          "recompute (MoE shared expert)",
                                          "recompute (MoE shared-expert gate)",
                                          "recompute (logits)",
                                          "recompute (LoRA adapters)"};
  term total;
  for (std::size_t i = 0; i < kDenseSlots; ++i) {
    *parts[i] = to_coefficient(r.slot[i], kFlopsPerPass, names[i]);
    total = total + r.slot[i];
  }
  rc.text_per_token = to_coefficient(total, kFlopsPerPass, "recompute.text_per_token");
  rc.text_attn_pair = to_coefficient(r[coefficient_slot::text_attn_pair], kFlopsPerPass, "recompute.text_attn_pair");
  rc.window_attn_pair[0] =
      to_coefficient(r[coefficient_slot::window_attn_pair_0], kFlopsPerPass, "recompute.window_attn_pair[0]");
  rc.window_attn_pair[1] =
      to_coefficient(r[coefficient_slot::window_attn_pair_1], kFlopsPerPass, "recompute.window_attn_pair[1]");
  rc.image_block_pair =
      to_coefficient(r[coefficient_slot::image_block_pair], kFlopsPerPass, "recompute.image_block_pair");
  if (spec.vision && o.vision && !regime.vision_frozen) {  // a frozen ViT runs no backward: nothing
    slot_sums v;
    walk_gemms(spec, regime, items, [&v, &o](const gemm_visit& visit) {
      if (visit.part != model_part::vision || visit.slot == coefficient_slot::patch_embed_per_patch) return;
      term& into = v.slot[static_cast<std::size_t>(visit.slot)];
      into = into + visit.macs * visit.layers * factor{recomputed(o.policy, visit), nullptr};
    });
    rc.vision_per_patch =
        to_coefficient(v[coefficient_slot::vision_per_patch], kFlopsPerPass, "recompute.vision_per_patch");
    rc.vision_attn_pair =
        to_coefficient(v[coefficient_slot::vision_attn_pair], kFlopsPerPass, "recompute.vision_attn_pair");
    rc.vision_window_attn_pair = to_coefficient(v[coefficient_slot::vision_window_attn_pair], kFlopsPerPass,
                                                "recompute.vision_window_attn_pair");
  }
}

bool adapts_any(const training_regime& r, std::initializer_list<lora_target> targets) {
  for (const lora_target target : targets) {
    if (r.adapts(target)) return true;
  }
  return false;
}

}  // namespace

namespace detail {

coefficients fold_coefficients(const model_spec& spec, const training_regime& regime, bool items) {
  const slot_sums w = fold(spec, regime, items);
  coefficients c;
  // In the order of the coefficients' fields: text, then vision, then MTP (text_coefficients checks MTP last
  // among the text terms; the vision terms of a model with MTP overflow first only when they are larger).
  text_coefficients(spec, w, c);
  vision_coefficients(spec, w, c);
  recompute_coefficients(spec, regime, items, c);
  return c;
}

}  // namespace detail

namespace {

const char* const kRecomputeNames[] = {"none", "full", "full_early_stop", "selective", "op"};

const char* const kLoraTargetNames[] = {
    "q_proj",    "k_proj",   "v_proj",   "o_proj",   "gate_proj",          "up_proj",  "down_proj", "in_proj_qkv",
    "in_proj_z", "out_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj"};

}  // namespace

const char* to_string(recompute_policy policy) { return kRecomputeNames[static_cast<unsigned>(policy)]; }

recompute_policy parse_recompute_policy(const std::string& name, const std::string& where) {
  std::string known;
  for (unsigned i = 0; i < std::size(kRecomputeNames); ++i) {
    if (name == kRecomputeNames[i]) return static_cast<recompute_policy>(i);
    known += std::string(i == 0 ? "\"" : ", \"") + kRecomputeNames[i] + "\"";
  }
  throw error(where + ": unknown recompute policy '" + name + "' (expected one of " + known + ")");
}

const char* to_string(lora_target target) { return kLoraTargetNames[static_cast<unsigned>(target)]; }

lora_target parse_lora_target(const std::string& name, const std::string& where) {
  std::string known;
  for (unsigned i = 0; i < std::size(kLoraTargetNames); ++i) {
    if (name == kLoraTargetNames[i]) return static_cast<lora_target>(i);
    known += std::string(i == 0 ? "" : ", ") + kLoraTargetNames[i];
  }
  throw error(where + ": unknown LoRA target '" + name + "' (expected one of " + known + ")");
}

bool training_regime::adapts(lora_target target) const {
  return lora_rank > 0 && std::find(lora_targets.begin(), lora_targets.end(), target) != lora_targets.end();
}

std::string frozen_list(const training_regime& regime) {
  std::string out;
  const auto add = [&out](bool frozen, const char* part) {
    if (frozen) out += std::string(out.empty() ? "" : ",") + part;
  };
  add(regime.vision_frozen, "vision");
  add(regime.merger_frozen, "merger");
  add(regime.text_frozen, "text");
  return out;
}

void add_frozen_part(training_regime& regime, const std::string& part, const std::string& where) {
  bool* flag = part == "vision"   ? &regime.vision_frozen
               : part == "merger" ? &regime.merger_frozen
               : part == "text"   ? &regime.text_frozen
                                  : nullptr;
  if (flag == nullptr) {
    throw error(where + ": unknown part '" + part + "' (expected \"vision\", \"merger\" or \"text\")");
  }
  if (*flag) throw error(where + ": part '" + part + "' is named twice");
  *flag = true;
}

namespace {

// "q_proj, v_proj" and "vision\", \"text" (inside the quotes of a TOML array), for messages.
std::string target_names(const training_regime& regime) {
  std::string names;
  for (const lora_target target : regime.lora_targets)
    names += (names.empty() ? "" : ", ") + std::string(to_string(target));
  return names;
}
std::string quoted_parts(const training_regime& regime) {
  std::string quoted;
  for (const char c : frozen_list(regime)) quoted += c == ',' ? std::string("\", \"") : std::string(1, c);
  return quoted;
}

}  // namespace

namespace {

// The recompute settings against the model (validate_training_regime).
void validate_recompute(const model_spec& spec, const recompute_options& o) {
  const std::int64_t n = spec.text.num_hidden_layers;
  const bool on = o.policy != recompute_policy::none;
  if (!on && (o.layers != 0 || o.every != 0 || o.vision)) {
    throw error(std::string("training.") +
                (o.layers != 0  ? "recompute_layers"
                 : o.every != 0 ? "recompute_every"
                                : "recompute_vision") +
                " without a recompute policy: set training.recompute to \"full\", \"full_early_stop\", "
                "\"selective\" or \"op\"");
  }
  if (o.layers < 0 || o.every < 0) {
    throw error(std::string("training.") + (o.layers < 0 ? "recompute_layers" : "recompute_every") +
                " must be >= 0 (got " + std::to_string(o.layers < 0 ? o.layers : o.every) + ")");
  }
  if (o.layers > 0 && o.every > 0) {
    throw error(
        "training.recompute_layers and training.recompute_every are both set: choose the first N layers of "
        "each pipeline stage or every k-th layer");
  }
  if (o.layers > 0) {
    if (o.pipeline_stages < 1 || o.pipeline_stages > n) {
      throw error("pipeline stages (pp) must be in [1, num_hidden_layers = " + std::to_string(n) + "] (got " +
                  std::to_string(o.pipeline_stages) + ")");
    }
    if (n % o.pipeline_stages != 0) {
      throw error("training.recompute_layers needs the " + std::to_string(n) + " decoder layers split evenly over " +
                  std::to_string(o.pipeline_stages) + " pipeline stages");
    }
    if (o.layers > n / o.pipeline_stages) {
      throw error("training.recompute_layers = " + std::to_string(o.layers) + " exceeds the " +
                  std::to_string(n / o.pipeline_stages) + " decoder layers of each pipeline stage of model '" +
                  spec.name + "'");
    }
  }
  if (o.every > n) {
    throw error("training.recompute_every = " + std::to_string(o.every) + " checkpoints no layer of model '" +
                spec.name + "' (" + std::to_string(n) + " decoder layers)");
  }
  if (o.vision && !spec.vision) {
    throw error("training.recompute_vision: model '" + spec.name + "' has no vision tower");
  }
}

}  // namespace

void validate_training_regime(const model_spec& spec, const training_regime& regime) {
  const text_spec& t = spec.text;
  validate_recompute(spec, regime.recompute);
  if (regime.lora_rank < 0 || regime.lora_rank > (std::int64_t{1} << 20)) {
    throw error("training.lora_rank must be in [0, 1048576] (got " + std::to_string(regime.lora_rank) + ")");
  }
  if (regime.lora_rank > 0 && regime.lora_targets.empty()) {
    throw error("training.lora_rank " + std::to_string(regime.lora_rank) +
                " without lora_targets: name the adapted projections, e.g. [\"q_proj\", \"k_proj\", \"v_proj\", "
                "\"o_proj\"]");
  }
  if (regime.lora_rank == 0 && !regime.lora_targets.empty()) {
    throw error(std::string("training.lora_targets without a lora_rank: set lora_rank = R (> 0), the adapters' rank"));
  }
  for (std::size_t i = 0; i < regime.lora_targets.size(); ++i) {
    if (std::find(regime.lora_targets.begin(), regime.lora_targets.begin() + static_cast<std::ptrdiff_t>(i),
                  regime.lora_targets[i]) != regime.lora_targets.begin() + static_cast<std::ptrdiff_t>(i)) {
      throw error(std::string("training.lora_targets: '") + to_string(regime.lora_targets[i]) + "' is named twice");
    }
  }
  if (t.is_moe() && adapts_any(regime, {lora_target::gate_proj, lora_target::up_proj, lora_target::down_proj})) {
    throw error("training.lora_targets: gate_proj, up_proj and down_proj would adapt the experts of model '" +
                spec.name +
                "', a mixture-of-experts model; LoRA on MoE experts is not billed (out of scope): "
                "adapt the attention projections only");
  }
  if (regime.lora_rank > 0 && first_adapted_layer(spec, regime) >= t.num_hidden_layers) {
    throw error("training.lora_targets: model '" + spec.name + "' has none of these projections (" +
                target_names(regime) +
                "); in_proj_qkv, in_proj_z and out_proj exist only in Gated DeltaNet layers (out_proj also in Mamba-2 "
                "layers, whose in_proj has no LoRA target), q_proj, k_proj, v_proj "
                "and o_proj only in full-attention layers, q_a_proj, q_b_proj, kv_a_proj_with_mqa and kv_b_proj "
                "only in multi-head latent attention (MLA, with q_proj when q_lora_rank is none, and o_proj; MLA "
                "has no k_proj and v_proj)");
  }
  if (regime.indexer_trains && !t.has_indexer()) {
    throw error("training.indexer_trains: model '" + spec.name +
                "' has no sparse-attention indexer (only DSA models, index_topk > 0, have one)");
  }
  const bool vision_side_trains = spec.vision && (!regime.vision_frozen || !regime.merger_frozen);
  if (regime.text_frozen && regime.lora_rank == 0 && !vision_side_trains) {
    throw error("training.frozen = [\"" + quoted_parts(regime) + "\"] freezes every part of model '" + spec.name +
                "': nothing trains, so there is no training work to report");
  }
}

regime_coefficients compute_coefficients(const model_spec& spec, const training_regime& regime) {
  validate_training_regime(spec, regime);
  // The full-training coefficients first: every part's overflow is reported as for compute_coefficients(spec),
  // whatever the regime (a frozen part's coefficients are smaller).
  if (!regime.full_training()) (void)compute_coefficients(spec);
  regime_coefficients rc;
  rc.with_items = fold_coefficients(spec, regime, true);
  // Items change only the decoder's input gradient, and only when the vision side trains and the decoder not.
  const bool embeddings_train = !regime.text_frozen && regime.lora_rank == 0;
  const bool vision_side_trains = spec.vision && (!regime.vision_frozen || !regime.merger_frozen);
  rc.without_items = rc.with_items;
  if (vision_side_trains && !embeddings_train) {
    const coefficients without = fold_coefficients(spec, regime, false);
    coefficients& c = rc.without_items;
    c.dense_per_token = without.dense_per_token;
    c.dense = without.dense;
    c.text_attn_pair = without.text_attn_pair;
    c.window_attn_pair[0] = without.window_attn_pair[0];
    c.window_attn_pair[1] = without.window_attn_pair[1];
    c.mtp_per_token = without.mtp_per_token;
    c.mtp_attn_pair = without.mtp_attn_pair;
    const coefficients::recompute_terms vision_recompute = c.recompute;
    c.recompute = without.recompute;
    c.recompute.vision_per_patch = vision_recompute.vision_per_patch;  // the vision terms: with_items'
    c.recompute.vision_attn_pair = vision_recompute.vision_attn_pair;
  }
  return rc;
}

}  // namespace flopmeter
