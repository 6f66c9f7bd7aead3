// plugin/core/training_regime.cpp — the coefficients of a training regime (frozen parts, LoRA adapters;
// flopmeter/flop_model.h training_regime): each GEMM billed by what its backward computes, from the same GEMM
// families as the full-training coefficients (flop_terms.h). The rule and its derivation are below.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/flop_terms.h"
#include "flopmeter/error.h"
#include "flopmeter/flop_model.h"

namespace flopmeter {

using namespace detail;  // the term arithmetic and the GEMM families of flop_terms.h

// What trains: frozen parts and LoRA adapters.
//
// The rule, per GEMM y = x W (x: [tokens x d_in], W: [d_in x d_out]), in multiply-adds of the forward:
//   forward                1 pass   (always)
//   input gradient dx      1 pass   when x needs a gradient: something trainable lies upstream of x
//   weight gradient dW     1 pass   when W trains
// and a weightless product (attention core QK^T and PV, the delta rule's products) runs its backward, 2 passes
// (the gradients of both of its operands), when a gradient flows through it, i.e. when any of its inputs needs
// one. A pass is 2 FLOPs per multiply-add. Autograd computes exactly these: a gradient is formed only for a
// tensor that requires one (measured in tests/test_example_flops.cpp, every regime, forward and backward).
//
// Which inputs need a gradient follows the data flow, part by part (V, M, T: vision, merger, text trains):
//   patch embedding  input pixels: never. 1 + V.
//   ViT blocks       their LayerNorms train with V, so every GEMM's input needs a gradient iff V: 1 + 2V;
//                    ViT attention core: 1 + 2V.
//   merger           its input (the ViT's output) needs a gradient iff V; its LayerNorm's weight trains with M, so
//                    its first GEMM's input needs one iff V or M: 1 + (V or M) + M for both of its GEMMs.
//   decoder          its input (the embeddings with the merged vision tokens written in) needs a gradient iff T
//                    (trainable embeddings and norms), or V or M and the micro-batch has an image or video. Then
//                    every decoder GEMM runs 1 + 1 + T, its attention core and delta rule 3, and the LM head
//                    1 + 1 + T. A micro-batch without items under a frozen decoder (T = 0) and no LoRA has no
//                    trainable parameter upstream of its loss: forward only, 1 for everything.
//   LoRA             base weights frozen (T = 0). An adapted projection d_in -> d_out adds x A (d_in x r) and
//                    (x A) B (r x d_out): A runs forward + weight gradient + input gradient when x needs one;
//                    B's input x A always needs one (A trains): 3 passes. The base projection runs forward + input
//                    gradient when x needs one. The first decoder layer's input needs no gradient unless the
//                    vision side trains and the micro-batch has items: in a text-only LoRA run that layer's base
//                    input projections run forward only, and so does every layer before the first adapted one.
//                    After the first adapted layer every input needs a gradient (the residual stream carries it).
//
// Inside one decoder layer (x: the layer's input, g: x needs a gradient, T: base weights train):
//   full attention   q, k, v: base 1 + g + T, their outputs need a gradient iff g, T or adapted; the core runs
//                    its backward iff any of q, k, v needs one; o_proj's input needs one iff the core's output
//                    does. Adapters on only some of q, k, v still bill the whole core backward (a fused
//                    attention kernel computes dq, dk and dv together).
//   Gated DeltaNet   in_proj_qkv, in_proj_z, in_proj_a, in_proj_b: base 1 + g + T; the conv's input (the qkv
//                    output) needs a gradient iff qkv's does, its weight trains with T; the delta rule runs its
//                    backward iff the conv's output needs a gradient; out_proj's input (norm(core) * silu(z))
//                    needs one iff the core's or z's does.
//   dense SwiGLU     gate, up: base 1 + g' + T (g': the layer's hidden after the mixer needs a gradient); down's
//                    input needs one iff g', T or gate or up adapted.
//   MoE block        router, experts, shared expert, gate: 1 + g' + T (no adapters: refused).
// MTP layers are decoder layers (their eh_proj input is the decoder's output) with the same rule.

namespace {

// Passes of one GEMM (1 forward + 1 per gradient it computes) and of a weightless product.
int128 gemm_passes(bool input_needs_gradient, bool weight_trains) {
  return 1 + (input_needs_gradient ? 1 : 0) + (weight_trains ? 1 : 0);
}
int128 core_passes(bool gradient_flows) { return gradient_flows ? 3 : 1; }

// Pass-weighted multiply-adds per token (or per pair) of the decoder, by dense_terms family.
struct text_work {
  term attention_projections, linear_attention, dense_mlp, moe_router, moe_routed_experts, moe_shared_expert,
      moe_shared_expert_gate, logits, lora_adapters, attention_pairs;
};

// ---- Activation recomputation: the re-executed forward, by the same walk ------------------------------------
//
// A checkpointed layer whose backward runs (its output needs a gradient) runs part of its forward again in the
// backward. The walk below bills it with the same per-GEMM rule: replayed once per checkpointed layer in
// "recompute mode" (text_rule::recompute set), each product adds its forward multiply-adds times the passes
// recompute_pass returns (1: it runs again, 0: it does not) to a second accumulator, instead of its training
// passes. Which products run again, per policy (forward order inside one layer):
//   full             every product: the projections (with LoRA's A and B), the attention core, the Gated
//                    DeltaNet conv and delta rule, the MLP or MoE block (Megatron "full", torch reentrant).
//   full_early_stop  the same but the layer's final GEMM when only the residual add reads its output: the dense
//                    SwiGLU's down_proj (with LoRA on it: its B, PEFT adds B's output last). Torch's non-reentrant
//                    checkpoint stops once the last tensor autograd saved is recomputed; the final GEMM's inputs
//                    are saved before it runs, its output by nothing. An MoE block's expert outputs are scaled
//                    by their routing weights (a saved product), so every product of an MoE layer runs again.
//   selective        the softmax attention core only (QK^T and PV), where a gradient flows through it
//                    (Megatron's core_attn, a checkpoint around the core alone).
//   op               torchtitan's per-op policy: matmuls (every projection, LoRA's A and B after their base, the
//                    router, and the MoE experts' gate, up and down as one grouped matmul each) are numbered
//                    in forward order from 1 per layer; the even ones run again, the odd ones are saved. The
//                    attention core is saved; the conv and the delta rule are not matmuls and run again. The
//                    final GEMM is cut by torch's early stop as above.
// A layer no gradient crosses runs no backward and recomputes nothing (decoder_work skips the forward-only
// layers; recompute_coefficients the frozen ViT). Logits, MTP layers, the patch embedding and the mergers sit
// in no checkpointed layer.
struct recompute_pass {
  recompute_policy policy;
  std::int64_t mm = 0;  // matmuls of the current layer so far (the op policy's numbering)

  // The next matmul; `last`: the layer's final GEMM, whose output only the residual add reads.
  int128 gemm(bool last) {
    ++mm;
    switch (policy) {
      case recompute_policy::full: return 1;
      case recompute_policy::full_early_stop: return last ? 0 : 1;
      case recompute_policy::op: return mm % 2 == 0 && !last ? 1 : 0;
      case recompute_policy::selective:
      case recompute_policy::none: return 0;
    }
    return 0;
  }
  // A product that is not a matmul of the op policy: the Gated DeltaNet conv and delta rule.
  int128 other() const {
    return policy == recompute_policy::full || policy == recompute_policy::full_early_stop ||
                   policy == recompute_policy::op
               ? 1
               : 0;
  }
  // The softmax attention core (QK^T and PV); `gradient_flows`: its backward runs.
  int128 attention_core(bool gradient_flows) const {
    return policy == recompute_policy::full || policy == recompute_policy::full_early_stop ||
                   (policy == recompute_policy::selective && gradient_flows)
               ? 1
               : 0;
  }
};

struct text_rule {
  const text_spec& t;
  bool weights_train;  // T
  const training_regime& regime;
  recompute_pass* recompute = nullptr;  // recompute mode: bill the re-executed forward (above)
  factor rank() const { return {regime.lora_rank, "training.lora_rank"}; }
  // Passes of one GEMM: its training passes, or in recompute mode whether it runs again.
  int128 passes(bool input_gradient, bool weight_trains, bool last = false) const {
    return recompute != nullptr ? recompute->gemm(last) : gemm_passes(input_gradient, weight_trains);
  }

  // One projection d_in -> d_out over `layers` layers into `family`: the base GEMM and, when adapted, its A and
  // B. Returns whether its output needs a gradient.
  // `last`: the layer's final GEMM (recompute mode).
  bool projection(text_work& w, term& family, const factor& d_in, const factor& d_out,
                  std::optional<lora_target> target, bool input_gradient, const factor& layers,
                  bool last = false) const {
    const bool adapted = target && regime.adapts(*target);
    family = family +
             product({d_in, d_out, layers}) * factor{passes(input_gradient, weights_train, last && !adapted), nullptr};
    if (adapted) {
      const int128 a = passes(input_gradient, true);
      const int128 b = passes(true, true, last);
      w.lora_adapters = w.lora_adapters + product({d_in, rank(), layers}) * factor{a, nullptr} +
                        product({rank(), d_out, layers}) * factor{b, nullptr};
    }
    return input_gradient || weights_train || adapted;
  }

  // A full-attention mixer; returns whether its output needs a gradient.
  bool full_attention(text_work& w, bool g, const factor& layers) const {
    const factor h{t.hidden_size, "text.hidden_size"};
    const term q_width = product({{t.num_attention_heads, "text.num_attention_heads"},
                                  {t.head_dim, "text.head_dim"},
                                  {t.attn_output_gate ? 2 : 1, nullptr}});
    const term kv_width = product({{t.num_key_value_heads, "text.num_key_value_heads"}, {t.head_dim, "text.head_dim"}});
    const term o_width = product({{t.num_attention_heads, "text.num_attention_heads"}, {t.head_dim, "text.head_dim"}});
    const bool q = projection(w, w.attention_projections, h, as_factor(q_width), lora_target::q_proj, g, layers);
    const bool k = projection(w, w.attention_projections, h, as_factor(kv_width), lora_target::k_proj, g, layers);
    const bool v = projection(w, w.attention_projections, h, as_factor(kv_width), lora_target::v_proj, g, layers);
    const bool core = q || k || v;
    const int128 core_work = recompute != nullptr ? recompute->attention_core(core) : core_passes(core);
    w.attention_pairs = w.attention_pairs + attention_pair_macs(t) * layers * factor{core_work, nullptr};
    const bool o = projection(w, w.attention_projections, as_factor(o_width), h, lora_target::o_proj, core, layers);
    return g || o;
  }

  // A Gated DeltaNet mixer (the same parts as gated_deltanet_macs).
  bool gated_deltanet(text_work& w, bool g, const factor& layers) const {
    const factor h{t.hidden_size, "text.hidden_size"};
    const term qk = product(
        {{t.linear_num_key_heads, "text.linear_num_key_heads"}, {t.linear_key_head_dim, "text.linear_key_head_dim"}});
    const term v = product({{t.linear_num_value_heads, "text.linear_num_value_heads"},
                            {t.linear_value_head_dim, "text.linear_value_head_dim"}});
    const term qkv = qk * factor{2, nullptr} + v;
    const factor heads{t.linear_num_value_heads, "text.linear_num_value_heads"};
    term& family = w.linear_attention;
    const bool qkv_gradient = projection(w, family, h, as_factor(qkv), lora_target::in_proj_qkv, g, layers);
    const bool z_gradient = projection(w, family, h, as_factor(v), lora_target::in_proj_z, g, layers);
    projection(w, family, h, heads, std::nullopt, g, layers);  // in_proj_a
    projection(w, family, h, heads, std::nullopt, g, layers);  // in_proj_b
    // The depthwise conv over the qkv channels: a GEMM-like product with a weight.
    const int128 conv_passes = recompute != nullptr ? recompute->other() : gemm_passes(qkv_gradient, weights_train);
    family = family + qkv * factor{t.linear_conv_kernel_dim, "text.linear_conv_kernel_dim"} * layers *
                          factor{conv_passes, nullptr};
    const term delta_rule = product({{4, nullptr},
                                     {t.linear_num_value_heads, "text.linear_num_value_heads"},
                                     {t.linear_key_head_dim, "text.linear_key_head_dim"},
                                     {t.linear_value_head_dim, "text.linear_value_head_dim"}});
    const int128 delta_passes = recompute != nullptr ? recompute->other() : core_passes(qkv_gradient);
    family = family + delta_rule * layers * factor{delta_passes, nullptr};
    const bool out = projection(w, family, as_factor(v), h, lora_target::out_proj, qkv_gradient || z_gradient, layers);
    return g || out;
  }

  // A dense SwiGLU MLP of intermediate_size; returns whether its output needs a gradient.
  bool swiglu(text_work& w, bool g, const factor& layers) const {
    const factor h{t.hidden_size, "text.hidden_size"};
    const factor width{t.intermediate_size, "text.intermediate_size"};
    const bool gate = projection(w, w.dense_mlp, h, width, lora_target::gate_proj, g, layers);
    const bool up = projection(w, w.dense_mlp, h, width, lora_target::up_proj, g, layers);
    const bool down = projection(w, w.dense_mlp, width, h, lora_target::down_proj, gate || up, layers, true);
    return g || down;
  }

  // An MoE block: every GEMM 1 + g + T (validate_training_regime refuses adapters on its experts).
  bool moe(text_work& w, bool g, const factor& layers) const {
    const moe_block_macs m = moe_macs(t);
    if (recompute != nullptr) {
      moe_recompute(w, m, layers);
      return g || weights_train;
    }
    const factor passes{gemm_passes(g, weights_train), nullptr};
    w.moe_router = w.moe_router + m.router * layers * passes;
    w.moe_routed_experts = w.moe_routed_experts + m.routed_experts * layers * passes;
    w.moe_shared_expert = w.moe_shared_expert + m.shared_expert * layers * passes;
    w.moe_shared_expert_gate = w.moe_shared_expert_gate + m.shared_expert_gate * layers * passes;
    return g || weights_train;
  }

  // Recompute mode: the MoE block's matmuls one by one (router; experts' gate, up, down; shared expert's gate,
  // up, down; its gate), each a third of its SwiGLU's multiply-adds. None is final (see recompute_pass).
  void moe_recompute(text_work& w, const moe_block_macs& m, const factor& layers) const {
    const auto one_third = [](const term& swiglu) {
      term part = swiglu;
      part.value /= 3;  // swiglu_macs is 3 x h x I: exact
      return part;
    };
    w.moe_router = w.moe_router + m.router * layers * factor{recompute->gemm(false), nullptr};
    for (int i = 0; i < 3; ++i) {
      w.moe_routed_experts =
          w.moe_routed_experts + one_third(m.routed_experts) * layers * factor{recompute->gemm(false), nullptr};
    }
    if (m.shared_expert.value > 0) {
      for (int i = 0; i < 3; ++i) {
        w.moe_shared_expert =
            w.moe_shared_expert + one_third(m.shared_expert) * layers * factor{recompute->gemm(false), nullptr};
      }
      w.moe_shared_expert_gate =
          w.moe_shared_expert_gate + m.shared_expert_gate * layers * factor{recompute->gemm(false), nullptr};
    }
  }

  bool mixer(text_work& w, layer_kind kind, bool g, const factor& layers) const {
    return kind == layer_kind::full_attention ? full_attention(w, g, layers) : gated_deltanet(w, g, layers);
  }
  bool mlp(text_work& w, bool moe_block, bool g, const factor& layers) const {
    return moe_block ? moe(w, g, layers) : swiglu(w, g, layers);
  }

  static factor as_factor(const term& width) {
    return {width.value, width.fields.empty() ? nullptr : width.fields.front()};
  }
};

// Layers [0, k) of each kind, counted as text_spec counts them.
std::int64_t full_attention_layers_before(const text_spec& t, std::int64_t k) {
  text_spec prefix = t;
  prefix.num_hidden_layers = k;
  return prefix.num_full_attention_layers();
}
std::int64_t moe_layers_before(const text_spec& t, std::int64_t k) {
  text_spec prefix = t;
  prefix.num_hidden_layers = k;
  return prefix.num_moe_layers();
}
bool is_moe_layer(const text_spec& t, std::int64_t i) { return moe_layers_before(t, i + 1) > moe_layers_before(t, i); }

bool adapts_any(const training_regime& r, std::initializer_list<lora_target> targets) {
  for (const lora_target target : targets) {
    if (r.adapts(target)) return true;
  }
  return false;
}

// The first decoder layer with an adapter, or num_hidden_layers when none has one.
std::int64_t first_adapted_layer(const text_spec& t, const training_regime& r) {
  std::int64_t first = t.num_hidden_layers;
  if (adapts_any(r, {lora_target::gate_proj, lora_target::up_proj, lora_target::down_proj})) return 0;
  const bool full = adapts_any(r, {lora_target::q_proj, lora_target::k_proj, lora_target::v_proj, lora_target::o_proj});
  const bool linear = adapts_any(r, {lora_target::in_proj_qkv, lora_target::in_proj_z, lora_target::out_proj});
  const bool has_linear = t.num_linear_attention_layers() > 0;
  if (full && t.num_full_attention_layers() > 0) {
    first = std::min(first, t.full_attention_interval <= 0 ? std::int64_t{0} : t.full_attention_interval - 1);
  }
  if (linear && has_linear) first = std::min<std::int64_t>(first, 0);  // layer 0 is linear when any layer is
  return first;
}

// The decoder layers of one kind in [from, to), each with input gradient `g`.
void add_layer_range(const text_rule& rule, text_work& w, std::int64_t from, std::int64_t to, bool g) {
  const text_spec& t = rule.t;
  if (to <= from) return;
  const std::int64_t full = full_attention_layers_before(t, to) - full_attention_layers_before(t, from);
  const std::int64_t moe = moe_layers_before(t, to) - moe_layers_before(t, from);
  const char* layers_field = "text.num_hidden_layers";
  if (full > 0) rule.mixer(w, layer_kind::full_attention, g, {full, layers_field});
  if (to - from - full > 0) rule.mixer(w, layer_kind::linear_attention, g, {to - from - full, layers_field});
  if (to - from - moe > 0) rule.mlp(w, false, g, {to - from - moe, layers_field});
  if (moe > 0) rule.mlp(w, true, g, {moe, layers_field});
}

// ---- Which decoder layers are checkpointed (recompute_options), counted by layer kind -----------------------
// Like the layer kinds themselves, counted arithmetically: nothing iterates over the layers.

// a * b, or kLcmCap when above it (no layer index reaches it).
constexpr std::int64_t kLcmCap = std::int64_t{1} << 62;
std::int64_t capped_lcm(std::int64_t a, std::int64_t b) {
  const int128 l = static_cast<int128>(a / std::gcd(a, b)) * b;
  return l > kLcmCap ? kLcmCap : static_cast<std::int64_t>(l);
}
// Layers i in [from, to) with (i + 1) % m == 0: i + 1 runs over [from + 1, to].
std::int64_t multiples(std::int64_t from, std::int64_t to, std::int64_t m) { return to / m - from / m; }

// Layers i in [from, to) with (i + 1) % every == 0, by (mixer kind, MLP kind).
struct layer_mix {
  std::int64_t full_dense = 0, full_moe = 0, linear_dense = 0, linear_moe = 0;
};
layer_mix checkpointed_mix(const text_spec& t, std::int64_t from, std::int64_t to, std::int64_t every) {
  // full(i): (i + 1) % A == 0 (A = 1 without linear layers); moe(i): (i + 1) % S == 0 and i not in mlp_only_layers.
  const std::int64_t a = t.full_attention_interval > 0 ? t.full_attention_interval : 1;
  const std::int64_t all = multiples(from, to, every);
  const std::int64_t full = multiples(from, to, capped_lcm(a, every));
  layer_mix mix;
  if (t.is_moe() && t.decoder_sparse_step >= 1) {
    std::vector<std::int64_t> dense = t.mlp_only_layers;
    std::sort(dense.begin(), dense.end());
    dense.erase(std::unique(dense.begin(), dense.end()), dense.end());
    const auto moe_on = [&](std::int64_t stride) {  // MoE layers whose i + 1 is a multiple of stride
      std::int64_t count = multiples(from, to, stride);
      for (const std::int64_t i : dense) count -= i >= from && i < to && (i + 1) % stride == 0 ? 1 : 0;
      return count;
    };
    const std::int64_t moe_stride = capped_lcm(t.decoder_sparse_step, every);
    mix.full_moe = moe_on(capped_lcm(moe_stride, a));
    mix.linear_moe = moe_on(moe_stride) - mix.full_moe;
  }
  mix.full_dense = full - mix.full_moe;
  mix.linear_dense = all - full - mix.linear_moe;
  return mix;
}

// The re-executed forward of the checkpointed layers in [from, to), all of whose backward runs (`g`: their
// input needs a gradient), into `r`: each (mixer kind, MLP kind) replayed once in recompute mode, times its
// count of checkpointed layers.
void add_recompute_range(const text_rule& rule, text_work& r, std::int64_t from, std::int64_t to, bool g) {
  const recompute_options& o = rule.regime.recompute;
  if (o.policy == recompute_policy::none || to <= from) return;
  const auto replay = [&](std::int64_t a, std::int64_t b, std::int64_t every) {
    if (b <= a) return;
    const layer_mix mix = checkpointed_mix(rule.t, a, b, every);
    const struct {
      layer_kind mixer;
      bool moe;
      std::int64_t count;
    } kinds[] = {{layer_kind::full_attention, false, mix.full_dense},
                 {layer_kind::full_attention, true, mix.full_moe},
                 {layer_kind::linear_attention, false, mix.linear_dense},
                 {layer_kind::linear_attention, true, mix.linear_moe}};
    for (const auto& kind : kinds) {
      if (kind.count <= 0) continue;
      recompute_pass pass{o.policy};  // the op policy numbers the matmuls of each layer from 1
      text_rule replaying = rule;
      replaying.recompute = &pass;
      const factor layers{kind.count, "text.num_hidden_layers"};
      const bool hidden = replaying.mixer(r, kind.mixer, g, layers);
      replaying.mlp(r, kind.moe, hidden, layers);
    }
  };
  if (o.layers > 0) {
    // Megatron's block method: the first `layers` of each pipeline stage's num_hidden_layers / stages.
    const std::int64_t stage = rule.t.num_hidden_layers / o.pipeline_stages;
    for (std::int64_t s = 0; s < o.pipeline_stages; ++s) {
      replay(std::max(from, s * stage), std::min(to, s * stage + o.layers), 1);
    }
  } else {
    replay(from, to, o.every > 0 ? o.every : 1);
  }
}

// The decoder's pass-weighted work into `w` and its re-executed forward into `r`; `input_gradient`: the first
// layer's input needs a gradient. Returns whether the last layer's output needs one.
bool decoder_work(const text_rule& rule, text_work& w, text_work& r, bool input_gradient) {
  const text_spec& t = rule.t;
  const std::int64_t n = t.num_hidden_layers;
  if (input_gradient || rule.weights_train) {
    add_layer_range(rule, w, 0, n, true);
    add_recompute_range(rule, r, 0, n, true);
    return true;
  }
  const std::int64_t f = first_adapted_layer(t, rule.regime);
  add_layer_range(rule, w, 0, f, false);  // nothing trainable upstream: forward only, nothing recomputed
  if (f >= n) return false;
  const factor one{1, nullptr};
  const bool hidden = rule.mixer(w, t.layer_type(f), false, one);
  rule.mlp(w, is_moe_layer(t, f), hidden, one);
  add_recompute_range(rule, r, f, f + 1, false);  // its adapters train: its backward runs
  add_layer_range(rule, w, f + 1, n, true);
  add_recompute_range(rule, r, f + 1, n, true);
  return true;
}

// The text coefficients of one kind of micro-batch into `c`: dense_per_token and its parts, text_attn_pair,
// MTP. `input_gradient`: the decoder's input needs a gradient (trainable embeddings, or images from a trainable
// vision side).
void text_coefficients(const model_spec& spec, const training_regime& regime, bool input_gradient, coefficients& c) {
  const text_spec& t = spec.text;
  const bool weights_train = !regime.text_frozen && regime.lora_rank == 0;
  const text_rule rule{t, weights_train, regime};
  text_work w, r;
  const bool output_gradient = decoder_work(rule, w, r, input_gradient);
  w.logits = logits_macs(t) * factor{gemm_passes(output_gradient, weights_train), nullptr};
  constexpr int128 kFlopsPerPass = 2;
  dense_terms& d = c.dense;
  // In the order of compute_coefficients(spec), so that the same part overflows first.
  const std::pair<std::int64_t*, std::pair<const term*, const char*>> parts[] = {
      {&d.attention_projections, {&w.attention_projections, "dense_per_token (attention projections)"}},
      {&d.linear_attention, {&w.linear_attention, "dense_per_token (Gated DeltaNet)"}},
      {&d.dense_mlp, {&w.dense_mlp, "dense_per_token (dense MLP)"}},
      {&d.moe_router, {&w.moe_router, "dense_per_token (MoE router)"}},
      {&d.moe_routed_experts, {&w.moe_routed_experts, "dense_per_token (MoE routed experts)"}},
      {&d.moe_shared_expert, {&w.moe_shared_expert, "dense_per_token (MoE shared expert)"}},
      {&d.moe_shared_expert_gate, {&w.moe_shared_expert_gate, "dense_per_token (MoE shared-expert gate)"}},
      {&d.logits, {&w.logits, "dense_per_token (logits)"}},
      {&d.lora_adapters, {&w.lora_adapters, "dense_per_token (LoRA adapters)"}},
  };
  term total;
  for (const auto& [out, part] : parts) {
    *out = to_coefficient(*part.first, kFlopsPerPass, part.second);
    total = total + *part.first;
  }
  c.dense_per_token = to_coefficient(total, kFlopsPerPass, "dense_per_token");
  c.text_attn_pair = to_coefficient(w.attention_pairs, kFlopsPerPass, "text_attn_pair");

  // The re-executed forward: one pass, 2 FLOPs per multiply-add.
  dense_terms& rd = c.recompute.dense;
  const std::pair<std::int64_t*, std::pair<const term*, const char*>> recomputed[] = {
      {&rd.attention_projections, {&r.attention_projections, "recompute (attention projections)"}},
      {&rd.linear_attention, {&r.linear_attention, "recompute (Gated DeltaNet)"}},
      {&rd.dense_mlp, {&r.dense_mlp, "recompute (dense MLP)"}},
      {&rd.moe_router, {&r.moe_router, "recompute (MoE router)"}},
      {&rd.moe_routed_experts, {&r.moe_routed_experts, "recompute (MoE routed experts)"}},
      {&rd.moe_shared_expert, {&r.moe_shared_expert, "recompute (MoE shared expert)"}},
      {&rd.moe_shared_expert_gate, {&r.moe_shared_expert_gate, "recompute (MoE shared-expert gate)"}},
      {&rd.lora_adapters, {&r.lora_adapters, "recompute (LoRA adapters)"}},
  };
  term recomputed_total;
  for (const auto& [out, part] : recomputed) {
    *out = to_coefficient(*part.first, kFlopsPerPass, part.second);
    recomputed_total = recomputed_total + *part.first;
  }
  c.recompute.text_per_token = to_coefficient(recomputed_total, kFlopsPerPass, "recompute.text_per_token");
  c.recompute.text_attn_pair = to_coefficient(r.attention_pairs, kFlopsPerPass, "recompute.text_attn_pair");

  c.mtp_per_token = 0;
  c.mtp_attn_pair = 0;
  if (spec.train_mtp_layers && t.mtp_num_hidden_layers > 0) {
    // Each MTP layer: eh_proj over [embedding; the decoder's output], one full-attention layer with the MLP of
    // the model's layers, and the shared LM head; adapters by name like a decoder layer.
    const factor layers{t.mtp_num_hidden_layers, "text.mtp_num_hidden_layers"};
    const factor h{t.hidden_size, "text.hidden_size"};
    const bool g = output_gradient || weights_train;
    text_work m;
    term eh_proj = product({{2, nullptr}, h, h, layers}) * factor{gemm_passes(g, weights_train), nullptr};
    const bool hidden = rule.full_attention(m, g, layers);
    const bool out = rule.mlp(m, t.is_moe(), hidden, layers);
    const term logits = logits_macs(t) * layers * factor{gemm_passes(out, weights_train), nullptr};
    const term mtp = eh_proj + m.attention_projections + m.linear_attention + m.dense_mlp + m.moe_router +
                     m.moe_routed_experts + m.moe_shared_expert + m.moe_shared_expert_gate + m.lora_adapters + logits;
    c.mtp_per_token = to_coefficient(mtp, kFlopsPerPass, "mtp_per_token");
    c.mtp_attn_pair = to_coefficient(m.attention_pairs, kFlopsPerPass, "mtp_attn_pair");
    check_sum_fits(c.dense_per_token, total, c.mtp_per_token, mtp, "dense_per_token + mtp_per_token");
    check_sum_fits(c.text_attn_pair, w.attention_pairs, c.mtp_attn_pair, m.attention_pairs,
                   "text_attn_pair + mtp_attn_pair");
  }
}

// The ViT's re-executed forward per patch and per (query, key) pair into `c` (recompute_vision, when the ViT's
// backward runs: only when its weights train, since its input is pixels). One block in forward order: fused
// qkv hv -> 3hv, the attention core, proj hv -> hv, fc1 hv -> Iv, fc2 Iv -> hv (final: only the residual add
// reads it), with the same recompute_pass as the decoder layers.
void vision_recompute(const vision_spec& v, recompute_policy policy, coefficients& c) {
  const factor hv{v.hidden_size, "vision.hidden_size"}, iv{v.intermediate_size, "vision.intermediate_size"};
  const factor depth{v.depth, "vision.depth"};
  recompute_pass pass{policy};
  const auto gemm = [&pass](term macs, bool last) { return macs * factor{pass.gemm(last), nullptr}; };
  term block = gemm(product({{3, nullptr}, hv, hv}), false);
  const int128 core = pass.attention_core(true);
  block = block + gemm(product({hv, hv}), false);
  block = block + gemm(product({hv, iv}), false);
  block = block + gemm(product({iv, hv}), true);
  c.recompute.vision_per_patch = to_coefficient(block * depth, 2, "recompute.vision_per_patch");
  c.recompute.vision_attn_pair = to_coefficient(vit_attention_pair_macs(v), 2 * core, "recompute.vision_attn_pair");
}

const char* const kRecomputeNames[] = {"none", "full", "full_early_stop", "selective", "op"};

const char* const kLoraTargetNames[] = {"q_proj",  "k_proj",    "v_proj",      "o_proj",    "gate_proj",
                                        "up_proj", "down_proj", "in_proj_qkv", "in_proj_z", "out_proj"};

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
  if (regime.lora_rank > 0 && first_adapted_layer(t, regime) >= t.num_hidden_layers) {
    throw error("training.lora_targets: model '" + spec.name + "' has none of these projections (" +
                target_names(regime) +
                "); in_proj_qkv, in_proj_z and out_proj exist only in Gated DeltaNet layers, q_proj, k_proj, v_proj "
                "and o_proj only in full-attention layers");
  }
  const bool vision_side_trains = spec.vision && (!regime.vision_frozen || !regime.merger_frozen);
  if (regime.text_frozen && regime.lora_rank == 0 && !vision_side_trains) {
    throw error("training.frozen = [\"" + quoted_parts(regime) + "\"] freezes every part of model '" + spec.name +
                "': nothing trains, so there is no training work to report");
  }
}

regime_coefficients compute_coefficients(const model_spec& spec, const training_regime& regime) {
  validate_training_regime(spec, regime);
  regime_coefficients rc;
  coefficients c = compute_coefficients(spec);  // the vision terms' sizes (and the full-training overflow checks)
  if (spec.vision) {
    const vision_spec& v = *spec.vision;
    const bool vision = !regime.vision_frozen, merger = !regime.merger_frozen;
    const factor depth{v.depth, "vision.depth"};
    c.vision_per_patch = to_coefficient(vit_block_macs(v) * depth, 2 * gemm_passes(vision, vision), "vision_per_patch");
    c.vision_attn_pair = to_coefficient(vit_attention_pair_macs(v), 2 * core_passes(vision), "vision_attn_pair");
    c.patch_embed_per_patch =
        to_coefficient(patch_embed_macs(v), 2 * gemm_passes(false, vision), "patch_embed_per_patch");
    c.merger_per_merged_token =
        to_coefficient(merger_macs(v) * factor{v.num_mergers(), "vision.deepstack_visual_indexes"},
                       2 * gemm_passes(vision || merger, merger), "merger_per_merged_token");
  }
  if (spec.vision && regime.recompute.vision && !regime.vision_frozen) {
    vision_recompute(*spec.vision, regime.recompute.policy, c);  // a frozen ViT runs no backward: nothing
  }
  const bool vision_side_trains = spec.vision && (!regime.vision_frozen || !regime.merger_frozen);
  rc.with_items = c;
  rc.without_items = c;
  const bool embeddings_train = !regime.text_frozen && regime.lora_rank == 0;
  text_coefficients(spec, regime, embeddings_train || vision_side_trains, rc.with_items);
  text_coefficients(spec, regime, embeddings_train, rc.without_items);
  return rc;
}

}  // namespace flopmeter
