// plugin/arch/gemm_walk.cpp — every GEMM of a model with what its backward computes (gemm_walk.h).
//
// The rule, per GEMM y = x W (x: [tokens x d_in], W: [d_in x d_out]), in multiply-adds of the forward:
//   forward                1 pass   (always)
//   input gradient dx      1 pass   when x needs a gradient: something trainable lies upstream of x
//   weight gradient dW     1 pass   when W trains
// and a weightless product (attention core QK^T and PV, the delta rule's products) runs its backward, 2 passes
// (the gradients of both of its operands), when a gradient flows through it, i.e. when any of its inputs needs
// one. A pass is 2 FLOPs per multiply-add. Autograd computes exactly these: a gradient is formed only for a
// tensor that requires one (measured in tests/test_example_flops.cpp, every regime, forward and backward).
// With everything trainable every GEMM runs 3 passes (6 FLOPs per multiply-add), the patch embedding 2 (its
// input is pixels): full training is the regime where everything trains, not a second derivation.
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
//   softmax attention  q, k, v: base 1 + g + T, their outputs need a gradient iff g, T or adapted; the core runs
//                    its backward iff any of q, k, v needs one; o_proj's input needs one iff the core's output
//                    does. Adapters on only some of q, k, v still bill the whole core backward (a fused
//                    attention kernel computes dq, dk and dv together). A window changes the pairs the core
//                    visits (its coefficient is per pair under that window), not the rule.
//   MLA              q_a (or q), kv_a: base 1 + g + T; q_b's input needs a gradient iff q_a's output does (g, T
//                    or q_a adapted), kv_b's iff kv_a's does; the core runs its backward iff q (q_b or q_proj),
//                    kv_b or kv_a (its shared rope key) needs one; o_proj's input iff the core's output does.
//                    LoRA adapters sit on any of them by their PEFT names (the same rule as every projection).
//   Gated DeltaNet   in_proj_qkv, in_proj_z, in_proj_a, in_proj_b: base 1 + g + T; the conv's input (the qkv
//                    output) needs a gradient iff qkv's does, its weight trains with T; the delta rule runs its
//                    backward iff the conv's output needs a gradient; out_proj's input (norm(core) * silu(z))
//                    needs one iff the core's or z's does.
//   Mamba-2          in_proj: base 1 + g + T; the conv's input needs a gradient iff in_proj's output does, its
//                    weight trains with T; the scan runs its backward iff the conv's output needs a gradient;
//                    out_proj's input iff in_proj's output does. Falcon-H1 runs it beside the attention on the
//                    layer's input; the layer's output needs a gradient iff either's does.
//   short conv       LFM2: as Mamba-2 without the scan (in_proj, the conv, out_proj).
//   gated MLP        gate, up: base 1 + g' + T (g': the layer's hidden after the mixer needs a gradient); down's
//                    input needs one iff g', T or gate or up adapted.
//   MoE block        router, experts, shared expert, gate: 1 + g' + T (no adapters: refused).
// MTP layers are decoder layers (their eh_proj input is the decoder's output) with the same rule.
//
// The multiply-adds of each GEMM, per token (pair, patch, merged token) of one layer; a matmul [n x k] @ [k x m]
// is n*k*m multiply-adds. Only matmul work counts: norms, activations, softmax, RoPE, biases, attention sinks,
// residual adds, routing's top-k and the loss are element-wise and left out, as in Megatron and the reference.

#include "arch/gemm_walk.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "arch/architecture.h"

namespace flopmeter::detail {
namespace {

factor as_factor(const term& width) { return {width.value, width.fields.empty() ? nullptr : width.fields.front()}; }

class walker {
 public:
  walker(const model_spec& spec, const training_regime& regime, const gemm_visitor& visit)
      : spec_(spec),
        t_(spec.text),
        regime_(regime),
        visit_(visit),
        weights_train_(!regime.text_frozen && regime.lora_rank == 0) {}

  // The decoder, the LM head and the MTP layers; `input_gradient`: the first layer's input needs a gradient.
  void text(bool input_gradient) {
    part_ = model_part::text;
    const std::int64_t n = t_.num_hidden_layers;
    bool out = true;
    if (input_gradient || weights_train_) {
      groups(0, n, true);
    } else {
      const std::int64_t f = first_adapted_layer(spec_, regime_);
      groups(0, f, false);  // nothing trainable upstream: forward only
      if (f >= n) {
        out = false;
      } else {
        layer(layer_at(spec_, f), false, factor{1, nullptr});
        ++group_;
        groups(f + 1, n, true);
      }
    }
    // The LM head h -> vocab (tied or not, the matmul runs).
    group_ = 0;
    order_ = 0;
    gemm("lm_head", h(), {t_.vocab_size, "text.vocab_size"}, out, factor{1, nullptr}, coefficient_slot::logits);
    if (!spec_.train_mtp_layers || t_.mtp_num_hidden_layers <= 0) return;
    // Each MTP layer: eh_proj over [embedding; the decoder's output] (2h -> h), one decoder layer of full
    // attention with the model's MLP, and its own pass through the shared LM head.
    part_ = model_part::mtp;
    const layer_group mtp = mtp_group(spec_);
    const factor layers{t_.mtp_num_hidden_layers, "text.mtp_num_hidden_layers"};
    const bool g = out || weights_train_;
    order_ = 0;
    visit(gemm_of("eh_proj", product({{2, nullptr}, h(), h()}), g, weights_train_, layers,
                  coefficient_slot::mtp_per_token));
    const bool hidden = layer(mtp, g, layers);
    gemm("lm_head", h(), {t_.vocab_size, "text.vocab_size"}, hidden, layers, coefficient_slot::mtp_per_token);
  }

  // The decoder layers [from, to) with (i+1) % every == 0, input gradient g (walk_decoder_layers).
  void decoder_layers(std::int64_t from, std::int64_t to, std::int64_t every, bool g) {
    part_ = model_part::text;
    group_ = 0;
    groups(from, to, g, every);
  }

  // The vision tower (architecture.h vision_tower_of), part by part.
  void vision() {
    if (!spec_.vision) return;
    const vision_tower tower = vision_tower_of(*spec_.vision);
    const bool V = !regime_.vision_frozen, M = !regime_.merger_frozen;
    const factor hv = tower.width;
    part_ = model_part::vision;
    group_ = 0;
    order_ = 0;
    // The patch embedding, once per patch (not per CLS token). Its input is pixels: no input gradient.
    visit(gemm_of("patch_embed", tower.patch_inputs * hv, false, V, factor{1, nullptr},
                  coefficient_slot::patch_embed_per_patch));
    // ViT blocks, per token (patch or CLS): qkv hv -> 3hv, proj hv -> hv, the MLP; attention per (query, key)
    // pair: QK^T and AV over num_heads heads of hv/num_heads each, 2*hv. ViT attention is bidirectional inside a
    // segment (or a window of it): the counts say how many pairs (the reference bills the whole item (t*h*w)^2).
    const factor iv = tower.mlp_width;
    const coefficient_slot block = coefficient_slot::vision_per_patch;
    for (const vision_block_group& g : tower.groups) {
      const factor depth{g.count, "vision.depth"};
      order_ = 0;
      matmul_ = 0;
      visit_matmul(gemm_of("qkv", product({{3, nullptr}, hv, hv}), V, V, depth, block), false);
      gemm_visit core =
          gemm_of("attention_core", product({{2, nullptr}, hv}), V, false, depth,
                  g.attention == vision_attention_kind::windowed ? coefficient_slot::vision_window_attn_pair
                                                                 : coefficient_slot::vision_attn_pair);
      core.weightless = true;
      visit(core);
      visit_matmul(gemm_of("proj", product({hv, hv}), V, V, depth, block), false);
      if (tower.mlp == vision_mlp_kind::gated) {
        visit_matmul(gemm_of("gate_proj", product({hv, iv}), V, V, depth, block), false);
        visit_matmul(gemm_of("up_proj", product({hv, iv}), V, V, depth, block), false);
        visit_matmul(gemm_of("down_proj", product({iv, hv}), V, V, depth, block), true);
      } else {
        visit_matmul(gemm_of("fc1", product({hv, iv}), V, V, depth, block), false);
        visit_matmul(gemm_of("fc2", product({iv, hv}), V, V, depth, block), true);
      }
      ++group_;
    }
    // The projector per merged token (each of tower.projectors of them): its input (the ViT's output) needs a
    // gradient iff V; its norm's weight trains with M, so every GEMM's input needs one iff V or M.
    part_ = model_part::merger;
    group_ = 0;
    order_ = 0;
    for (const projector_gemm& g : tower.projector) {
      visit(gemm_of(g.name, g.d_in * g.d_out, V || M, M, tower.projectors, coefficient_slot::merger_per_merged_token));
    }
  }

 private:
  factor h() const { return {t_.hidden_size, "text.hidden_size"}; }

  gemm_visit gemm_of(const char* name, term macs, bool input_gradient, bool weight_trains, const factor& layers,
                     coefficient_slot slot) {
    gemm_visit v;
    v.part = part_;
    v.group = group_;
    v.layers = layers;
    v.order = order_++;
    v.matmul = 0;
    v.name = name;
    v.input_gradient = input_gradient;
    v.weight_trains = weight_trains;
    v.macs = std::move(macs);
    v.slot = slot;
    return v;
  }
  void visit(const gemm_visit& v) const { visit_(v); }

  coefficient_slot dense(coefficient_slot slot) const {
    return part_ == model_part::mtp ? coefficient_slot::mtp_per_token : slot;
  }

  // One weight GEMM d_in -> d_out into `slot`, with its LoRA adapter when `target` is adapted. Returns whether its
  // output needs a gradient.
  // `last`: the block's final GEMM (with an adapter, its B is: PEFT adds B's output last).
  bool gemm(const char* name, const factor& d_in, const factor& d_out, bool g, const factor& layers,
            coefficient_slot slot, std::optional<lora_target> target = std::nullopt, bool last = false) {
    const bool adapted = target && regime_.adapts(*target);
    visit_matmul(gemm_of(name, product({d_in, d_out}), g, weights_train_, layers, dense(slot)), last && !adapted);
    if (adapted) {
      const factor rank{regime_.lora_rank, "training.lora_rank"};
      const coefficient_slot lora = dense(coefficient_slot::lora_adapters);
      visit_matmul(gemm_of("lora_A", product({d_in, rank}), g, true, layers, lora), false);
      visit_matmul(gemm_of("lora_B", product({rank, d_out}), true, true, layers, lora), last);
    }
    return g || weights_train_ || adapted;
  }
  void visit_matmul(gemm_visit v, bool last) {
    v.matmul = ++matmul_;
    v.last = last;
    visit(v);
  }

  void core(const char* name, term macs, bool g, const factor& layers, coefficient_slot slot) {
    gemm_visit v = gemm_of(name, std::move(macs), g, false, layers, slot);
    v.weightless = true;
    visit(v);
  }

  coefficient_slot pair_slot(const attention_mixer& a) const {
    if (part_ == model_part::mtp) return coefficient_slot::mtp_attn_pair;
    const int k = window_index(spec_, a);
    if (k == 0) return coefficient_slot::window_attn_pair_0;
    if (k == 1) return coefficient_slot::window_attn_pair_1;
    return coefficient_slot::text_attn_pair;
  }

  // Softmax attention: q_proj h -> heads*qk (doubled by the output gate: the same projection emits it), k_proj
  // h -> kv_heads*qk, v_proj h -> kv_heads*v, o_proj heads*v -> h. Per (query, key) pair QK^T is heads*qk
  // multiply-adds and the probabilities times V heads*v: 2*heads*head_dim when qk = v.
  bool attention(const attention_mixer& a, bool g, const factor& layers) {
    const coefficient_slot slot = coefficient_slot::attention_projections;
    const term q_width = product({a.heads, a.qk_head_dim, {a.output_gate ? 2 : 1, nullptr}});
    const term k_width = product({a.kv_heads, a.qk_head_dim});
    const term v_width = product({a.kv_heads, a.v_head_dim});
    const term o_width = product({a.heads, a.v_head_dim});
    const bool q = gemm("q_proj", h(), as_factor(q_width), g, layers, slot, lora_target::q_proj);
    const bool k = gemm("k_proj", h(), as_factor(k_width), g, layers, slot, lora_target::k_proj);
    const bool v = gemm("v_proj", h(), as_factor(v_width), g, layers, slot, lora_target::v_proj);
    const bool flows = q || k || v;
    const term pair = a.qk_head_dim.value == a.v_head_dim.value
                          ? product({{2, nullptr}, a.heads, a.qk_head_dim})
                          : product({a.heads, a.qk_head_dim}) + product({a.heads, a.v_head_dim});
    core("attention_core", pair, flows, layers, pair_slot(a));
    // Gemma 3: an image's tokens also attend to the later tokens of the same image (its bidirectional block), in
    // every attention layer: the same per-pair work over image_block_pairs (the window holds the image: the
    // rules require mm_tokens_per_image <= sliding_window).
    if (part_ == model_part::text && spec_.vision && spec_.vision->bidirectional_image) {
      core("image_block_core", pair, flows, layers, coefficient_slot::image_block_pair);
    }
    const bool o = gemm("o_proj", as_factor(o_width), h(), flows, layers, slot, lora_target::o_proj);
    return g || o;
  }

  // MLA (DeepSeek-V3): q_a_proj h -> q_lora_rank and q_b_proj q_lora_rank -> heads*(nope + rope), or one q_proj
  // h -> heads*(nope + rope) without q_lora_rank; kv_a_proj_with_mqa h -> kv_lora_rank + rope (the latent and
  // the shared rope key); kv_b_proj kv_lora_rank -> heads*(nope + v); o_proj heads*v -> h. The norms on the
  // latents are element-wise. Per (query, key) pair: QK^T heads*(nope + rope), PV heads*v.
  bool mla(const mla_mixer& m, bool g, const factor& layers) {
    const coefficient_slot slot = coefficient_slot::attention_projections;
    const term qk = product({m.heads, m.qk_nope_head_dim}) + product({m.heads, m.qk_rope_head_dim});
    bool q = false;
    if (m.q_lora_rank.value > 0) {
      const bool latent = gemm("q_a_proj", h(), m.q_lora_rank, g, layers, slot, lora_target::q_a_proj);
      q = gemm("q_b_proj", m.q_lora_rank, as_factor(qk), latent, layers, slot, lora_target::q_b_proj);
      if (m.indexer) indexer(m, layers);
    } else {
      q = gemm("q_proj", h(), as_factor(qk), g, layers, slot, lora_target::q_proj);
    }
    const term kv_a = product({m.kv_lora_rank}) + product({m.qk_rope_head_dim});
    const bool latent =
        gemm("kv_a_proj_with_mqa", h(), as_factor(kv_a), g, layers, slot, lora_target::kv_a_proj_with_mqa);
    const term kv_b = product({m.heads, m.qk_nope_head_dim}) + product({m.heads, m.v_head_dim});
    const bool kv = gemm("kv_b_proj", m.kv_lora_rank, as_factor(kv_b), latent, layers, slot, lora_target::kv_b_proj);
    const bool flows = q || kv || latent;
    // With DSA the core runs over the top-k keys of each query: a sliding window of index_topk's pairs.
    const int window = window_index(spec_, m);
    const coefficient_slot pairs = part_ == model_part::mtp ? coefficient_slot::mtp_attn_pair
                                   : window == 0            ? coefficient_slot::window_attn_pair_0
                                   : window == 1            ? coefficient_slot::window_attn_pair_1
                                                            : coefficient_slot::text_attn_pair;
    core("attention_core", qk + product({m.heads, m.v_head_dim}), flows, layers, pairs);
    const bool o =
        gemm("o_proj", as_factor(product({m.heads, m.v_head_dim})), h(), flows, layers, slot, lora_target::o_proj);
    return g || o;
  }

  // DSA's lightning indexer (transformers' DeepseekV32Indexer), on the query latent (the normed q_a_proj output)
  // and the layer input: wq_b q_lora_rank -> H_I*d_I, wk h -> d_I (one key head shared by the H_I heads; its
  // LayerNorm is element-wise), weights_proj h -> H_I. Per causal (query, key) pair of the document the scores
  // sum_h w_h * relu(q_h . k): the per-head products H_I*d_I and the weighting H_I multiply-adds, two matmuls in the
  // reference (it forms the whole rectangle and masks after; flopmeter bills the causal pairs, as for attention).
  // The top-k selection is not a matmul. The reference runs it under no_grad: forward only. With
  // regime.indexer_trains its weights train on detached inputs (no input gradient into the decoder), so its
  // projections add their weight-gradient GEMMs and its scores their backward (both operands' gradients).
  void indexer(const mla_mixer& m, const factor& layers) {
    const coefficient_slot slot = coefficient_slot::attention_projections;
    const bool trains = regime_.indexer_trains && weights_train_;
    visit_matmul(gemm_of("indexer.wq_b", product({m.q_lora_rank, m.index_heads, m.index_head_dim}), false, trains,
                         layers, dense(slot)),
                 false);
    visit_matmul(gemm_of("indexer.wk", product({h(), m.index_head_dim}), false, trains, layers, dense(slot)), false);
    visit_matmul(gemm_of("indexer.weights_proj", product({h(), m.index_heads}), false, trains, layers, dense(slot)),
                 false);
    const term scores = product({m.index_heads, m.index_head_dim}) + product({m.index_heads});
    core("indexer_scores", scores, trains, layers, coefficient_slot::text_attn_pair);
  }

  // Gated DeltaNet, with Megatron-LM's approximation for the delta rule:
  //   in_proj_qkv h -> 2*Hk*dk + Hv*dv;  in_proj_z h -> Hv*dv;  in_proj_a, in_proj_b h -> Hv each
  //   depthwise causal conv1d: kernel multiply-adds per channel over the 2*Hk*dk + Hv*dv qkv channels
  //   chunked delta rule: 4 matmul-like products per value head of size dk x dv per token (K K^T, V K^T, the
  //     state update S(a(I - b K K^T)), and S Q)
  //   out_proj Hv*dv -> h
  bool deltanet(const deltanet_mixer& d, bool g, const factor& layers) {
    const coefficient_slot slot = coefficient_slot::linear_attention;
    const term qk = product({d.key_heads, d.key_head_dim});
    const term v = product({d.value_heads, d.value_head_dim});
    const term qkv = qk * factor{2, nullptr} + v;
    const bool qkv_gradient = gemm("in_proj_qkv", h(), as_factor(qkv), g, layers, slot, lora_target::in_proj_qkv);
    const bool z_gradient = gemm("in_proj_z", h(), as_factor(v), g, layers, slot, lora_target::in_proj_z);
    gemm("in_proj_a", h(), d.value_heads, g, layers, slot);
    gemm("in_proj_b", h(), d.value_heads, g, layers, slot);
    // The depthwise conv over the qkv channels: a GEMM-like product with a weight.
    visit(gemm_of("conv1d", qkv * d.conv_kernel, qkv_gradient, weights_train_, layers, dense(slot)));
    gemm_visit rule = gemm_of("delta_rule", product({{4, nullptr}, d.value_heads, d.key_head_dim, d.value_head_dim}),
                              qkv_gradient, false, layers, dense(slot));
    rule.weightless = true;
    visit(rule);
    const bool out =
        gemm("out_proj", as_factor(v), h(), qkv_gradient || z_gradient, layers, slot, lora_target::out_proj);
    return g || out;
  }

  // Mamba-2 (NemotronHMamba2Mixer, GraniteMoeHybridMambaLayer, FalconH1Mixer), d_in = heads x head_dim, G groups,
  // N the state size, K the conv kernel:
  //   in_proj h -> 2 d_in + 2 G N + heads (z, x, B, C, dt)
  //   depthwise causal conv1d: K multiply-adds per channel over the d_in + 2 G N channels of x, B and C
  //   the scan: Megatron-LM's per-token constant, 7 d_in N FLOPs forward = 3.5 d_in N multiply-adds (as the delta
  //     rule above; the chunked kernel's extra intra-chunk work is not model FLOPs)
  //   out_proj d_in -> h (after the gated norm: element-wise)
  // The conv's input needs a gradient iff in_proj's output does; the scan runs its backward iff the conv's
  // output does; out_proj's input (norm(scan) * silu(z)) iff in_proj's output does.
  bool mamba(const mamba_mixer& m, bool g, const factor& layers) {
    const coefficient_slot slot = coefficient_slot::linear_attention;
    const term d_in = product({m.heads, m.head_dim});
    const term groups = product({{2, nullptr}, m.n_groups, m.state_size});
    const term in_width = d_in * factor{2, nullptr} + groups + product({m.heads});
    const bool in = gemm("in_proj", h(), as_factor(in_width), g, layers, slot);
    visit(gemm_of("conv1d", (d_in + groups) * m.conv_kernel, in, weights_train_, layers, dense(slot)));
    // 3.5 d_in N, halving whichever of N, head_dim, heads is even (the rules require d_in N to be even).
    term scan;
    if (m.state_size.value % 2 == 0) {
      scan = product({{7, nullptr}, m.heads, m.head_dim, {m.state_size.value / 2, m.state_size.field}});
    } else if (m.head_dim.value % 2 == 0) {
      scan = product({{7, nullptr}, m.heads, {m.head_dim.value / 2, m.head_dim.field}, m.state_size});
    } else {
      scan = product({{7, nullptr}, {m.heads.value / 2, m.heads.field}, m.head_dim, m.state_size});
    }
    gemm_visit rule = gemm_of("ssm_scan", std::move(scan), in, false, layers, dense(slot));
    rule.weightless = true;
    visit(rule);
    const bool out = gemm("out_proj", as_factor(d_in), h(), in, layers, slot, lora_target::out_proj);
    return g || out;
  }

  // LFM2's gated short convolution (Lfm2ShortConv): in_proj h -> 3h (B, C, x), B * x (element-wise), a depthwise
  // causal conv of K taps over the h channels (K*h multiply-adds per token), C * conv (element-wise), out_proj h -> h.
  // The conv's input needs a gradient iff in_proj's output does; out_proj's input too.
  bool short_conv(const factor& kernel, bool g, const factor& layers) {
    const coefficient_slot slot = coefficient_slot::linear_attention;
    const bool in = gemm("in_proj", h(), as_factor(product({{3, nullptr}, h()})), g, layers, slot);
    visit(gemm_of("conv", product({h(), kernel}), in, weights_train_, layers, dense(slot)));
    const bool out = gemm("out_proj", h(), h(), in, layers, slot, lora_target::out_proj);
    return g || out;
  }

  // Gated MLP (SwiGLU): gate and up h -> I, down I -> h. A plain MLP: up and down.
  bool mlp(const mlp_block& b, bool g, const factor& layers) {
    if (b.kind == mlp_kind::none) return g;
    if (b.kind == mlp_kind::moe) return moe(b, g, layers);
    const coefficient_slot slot = coefficient_slot::dense_mlp;
    bool gate = false;
    if (b.kind == mlp_kind::gated) gate = gemm("gate_proj", h(), b.width, g, layers, slot, lora_target::gate_proj);
    const bool up = gemm("up_proj", h(), b.width, g, layers, slot, lora_target::up_proj);
    const bool down = gemm("down_proj", b.width, h(), gate || up, layers, slot, lora_target::down_proj, true);
    return g || down;
  }

  // An MoE block, per token (dropless: every token visits exactly top_k experts, none is dropped for capacity):
  //   router         h -> experts logits (softmax/sigmoid, top-k, renormalisation: element-wise, not counted)
  //   routed experts top_k gated experts of expert_width: top_k * 3*h*I (gpt-oss's fused gate_up_proj h -> 2I
  //                  and down_proj I -> h are the same 3*h*I)
  //   shared expert  a gated MLP of the shared width on every token (Qwen: shared_expert_intermediate_size;
  //                  DeepSeek/GLM: n_shared_experts x moe_intermediate_size), and Qwen's sigmoid gate h -> 1
  // Weighting the expert outputs by the router probabilities and summing them is element-wise, not counted.
  bool moe(const mlp_block& b, bool g, const factor& layers) {
    // The experts' scaled outputs are a saved product, so no GEMM of an MoE block is `last`.
    visit_matmul(
        gemm_of("router", product({h(), b.experts}), g, weights_train_, layers, dense(coefficient_slot::moe_router)),
        false);
    // The routed experts' gate, up and down (each a grouped matmul over the top_k experts of every token).
    // Nemotron-H's experts (and its shared expert) have no gate: up and down only.
    const char* const gated_parts[] = {"experts.gate_proj", "experts.up_proj", "experts.down_proj"};
    const char* const plain_parts[] = {"experts.up_proj", "experts.down_proj"};
    const std::vector<const char*> parts = b.plain_experts ? std::vector<const char*>(plain_parts, plain_parts + 2)
                                                           : std::vector<const char*>(gated_parts, gated_parts + 3);
    for (const char* part : parts) {
      visit_matmul(gemm_of(part, product({h(), b.expert_width}) * b.top_k, g, weights_train_, layers,
                           dense(coefficient_slot::moe_routed_experts)),
                   false);
    }
    if (b.shared_width.value > 0) {
      const char* const gated_shared[] = {"shared_expert.gate_proj", "shared_expert.up_proj",
                                          "shared_expert.down_proj"};
      const char* const plain_shared[] = {"shared_expert.up_proj", "shared_expert.down_proj"};
      const std::vector<const char*> shared = b.plain_experts
                                                  ? std::vector<const char*>(plain_shared, plain_shared + 2)
                                                  : std::vector<const char*>(gated_shared, gated_shared + 3);
      for (const char* part : shared) {
        visit_matmul(gemm_of(part, product({h()}) * b.shared_width, g, weights_train_, layers,
                             dense(coefficient_slot::moe_shared_expert)),
                     false);
      }
      if (b.shared_gate) {
        visit_matmul(gemm_of("shared_expert_gate", product({h()}), g, weights_train_, layers,
                             dense(coefficient_slot::moe_shared_expert_gate)),
                     false);
      }
    }
    return g || weights_train_;
  }

  bool layer(const layer_group& group, bool g, const factor& layers) {
    order_ = 0;
    matmul_ = 0;
    bool hidden = false;
    switch (group.mixer.kind) {
      case mixer_kind::attention: hidden = attention(group.mixer.attention, g, layers); break;
      case mixer_kind::mla: hidden = mla(group.mixer.mla, g, layers); break;
      case mixer_kind::gated_deltanet: hidden = deltanet(group.mixer.deltanet, g, layers); break;
      case mixer_kind::mamba: hidden = mamba(group.mixer.mamba, g, layers); break;
      case mixer_kind::short_conv: hidden = short_conv(group.mixer.short_conv_kernel, g, layers); break;
      case mixer_kind::none: hidden = g; break;
    }
    // Falcon-H1: the Mamba-2 mixer beside the attention, on the same input.
    if (group.mixer.with_mamba) hidden = mamba(group.mixer.mamba, g, layers) || hidden;
    return mlp(group.mlp, hidden, layers);
  }

  void groups(std::int64_t from, std::int64_t to, bool g, std::int64_t every = 1) {
    if (to <= from) return;
    for (const layer_group& group : layer_groups(spec_, from, to, every)) {
      layer(group, g, factor{group.count, "text.num_hidden_layers"});
      ++group_;
    }
  }

  const model_spec& spec_;
  const text_spec& t_;
  const training_regime& regime_;
  const gemm_visitor& visit_;
  const bool weights_train_;
  model_part part_ = model_part::text;
  std::size_t group_ = 0;
  int order_ = 0;
  int matmul_ = 0;
};

}  // namespace

void walk_decoder_layers(const model_spec& spec, const training_regime& regime, std::int64_t from, std::int64_t to,
                         std::int64_t every, bool g, const gemm_visitor& visit) {
  walker w(spec, regime, visit);
  w.decoder_layers(from, to, every < 1 ? 1 : every, g);
}

void walk_gemms(const model_spec& spec, const training_regime& regime, bool items, const gemm_visitor& visit) {
  walker w(spec, regime, visit);
  const bool vision_side_trains = spec.vision && (!regime.vision_frozen || !regime.merger_frozen);
  const bool embeddings_train = !regime.text_frozen && regime.lora_rank == 0;
  w.text(embeddings_train || (items && vision_side_trains));
  w.vision();
}

}  // namespace flopmeter::detail
