// plugin/arch/first_adapted_layer.cpp — the first decoder layer a LoRA adapter sits on (gemm_walk.h): every layer
// before it runs forward only in a text-only LoRA run, since nothing trainable lies upstream of its input.

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "arch/architecture.h"
#include "arch/gemm_walk.h"

namespace flopmeter::detail {
namespace {

bool adapts_any(const training_regime& r, std::initializer_list<lora_target> targets) {
  for (const lora_target target : targets) {
    if (r.adapts(target)) return true;
  }
  return false;
}

// The index of the first layer whose kind `is` accepts, in the run-length layout; past the last run (the layer
// count, or 0 under the interval layout, which has no runs) when no run's kind is accepted.
template <class Predicate>
std::int64_t first_layer_where(const text_spec& t, Predicate is) {
  std::int64_t start = 0;
  for (const layer_run& run : t.layer_runs) {
    if (is(run.kind)) return start;
    start += run.count;
  }
  return start;
}

}  // namespace

std::int64_t first_adapted_layer(const model_spec& spec, const training_regime& r) {
  const text_spec& t = spec.text;
  std::int64_t first = t.num_hidden_layers;
  if (adapts_any(r, {lora_target::gate_proj, lora_target::up_proj, lora_target::down_proj})) {
    if (!t.block_layers) return 0;
    // Nemotron-H: the first mlp_only block (none: no MLP to adapt).
    const std::int64_t mlp = first_layer_where(t, [](layer_kind k) { return k == layer_kind::mlp_only; });
    if (mlp < first_layer_where(
                  t, [](layer_kind) { return false; }))
      return mlp;
  }
  const bool attention =
      adapts_any(r, {lora_target::q_proj, lora_target::k_proj, lora_target::v_proj, lora_target::o_proj});
  const bool linear = adapts_any(r, {lora_target::in_proj_qkv, lora_target::in_proj_z, lora_target::out_proj});
  if (attention && !t.is_mla()) first = std::min(first, first_attention_layer(t));
  // MLA: q_proj only without q_lora_rank, q_a_proj and q_b_proj only with it; kv_a, kv_b and o_proj always.
  const bool latent = adapts_any(r, {lora_target::kv_a_proj_with_mqa, lora_target::kv_b_proj, lora_target::o_proj}) ||
                      (t.q_lora_rank > 0 ? adapts_any(r, {lora_target::q_a_proj, lora_target::q_b_proj})
                                         : adapts_any(r, {lora_target::q_proj}));
  if (latent && t.is_mla()) first = std::min(first, first_attention_layer(t));
  if (adapts_any(r, {lora_target::out_proj}) && t.short_conv_kernel > 0) {
    // LFM2's out_proj: the first short-conv layer.
    first = std::min(first, first_layer_where(t, [](layer_kind k) { return k == layer_kind::short_conv; }));
  }
  if (adapts_any(r, {lora_target::out_proj}) && t.num_mamba_layers() > 0) {
    // Mamba-2's out_proj: the first Mamba layer (Falcon-H1: the first attention layer, which runs it too).
    const bool beside = t.mamba_beside_attention;
    const std::int64_t mamba = first_layer_where(
        t, [beside](layer_kind k) { return k == layer_kind::mamba || (beside && k == layer_kind::full_attention); });
    first = std::min(first, t.layer_runs.empty() ? first_attention_layer(t) : mamba);
  }
  if (linear && t.num_linear_attention_layers() > 0) {
    // The first Gated DeltaNet layer: layer 0 under the interval layout; the first linear run otherwise.
    first = std::min(first, first_layer_where(t, [](layer_kind k) { return k == layer_kind::linear_attention; }));
  }
  return first;
}

}  // namespace flopmeter::detail
