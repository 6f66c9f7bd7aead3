// The Megatron per-token constant, written the way Megatron-LM's num_floating_point_operations() writes it,
// and the term-by-term sanity check of the exact FLOP model against it.
//
// This file deliberately does not call compute_coefficients() to build the constant: it re-derives the
// figure in Megatron's own shape (floating point, expansion factors, attention at seq_len/2 keys per token)
// so that the check compares two independent derivations.
#include "flopmeter/megatron.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "arch/architecture.h"
#include "flopmeter/error.h"
#include "flopmeter/flop_model.h"

namespace flopmeter {
namespace {

// Megatron's factors: 3x for forward, backward-dgrad and backward-wgrad GEMMs; 2x FLOPs per multiply-add.
constexpr double kForwardBackward = 3.0;
constexpr double kFma = 2.0;

// Megatron-LM's Mamba-2 layer term (mamba_layer_flops in num_floating_point_operations), per token, training:
//   3 x [2 h (2 d_in + 2 G N + heads) (in_proj) + 7 d_in N (the scan) + 2 d_in h (out_proj)]
// with d_in = 2 x hidden whatever the config says (Megatron-LM and Megatron-Bridge), and no depthwise conv term.
double megatron_mamba_per_token(const text_spec& t) {
  const double layers = static_cast<double>(t.num_mamba_layers());
  if (layers == 0) return 0.0;
  const double h = static_cast<double>(t.hidden_size), d_in = 2 * h;
  const double groups_state = static_cast<double>(t.mamba_n_groups * t.mamba_state_size);
  const double heads = static_cast<double>(t.mamba_num_heads), n = static_cast<double>(t.mamba_state_size);
  return kForwardBackward * (kFma * h * (2 * d_in + 2 * groups_state + heads) + 7 * d_in * n + kFma * d_in * h) *
         layers;
}

// flopmeter's Mamba-2 layers per token, written out here from the config (d_in = heads x head_dim, the conv over
// d_in + 2 G N channels of K taps): 6 x [h (2 d_in + 2 G N + heads) + K (d_in + 2 G N) + 3.5 d_in N + d_in h].
double exact_mamba_per_token(const text_spec& t) {
  const double h = static_cast<double>(t.hidden_size);
  const double d_in = static_cast<double>(t.mamba_num_heads * t.mamba_head_dim);
  const double groups_state = static_cast<double>(t.mamba_n_groups * t.mamba_state_size);
  const double heads = static_cast<double>(t.mamba_num_heads), n = static_cast<double>(t.mamba_state_size);
  const double k = static_cast<double>(t.mamba_conv_kernel);
  return kForwardBackward * kFma *
         (h * (2 * d_in + 2 * groups_state + heads) + k * (d_in + 2 * groups_state) + 3.5 * d_in * n + d_in * h) *
         static_cast<double>(t.num_mamba_layers());
}

// LFM2's gated short-convolution layers per token (Megatron-LM has no term for them): 6 x (3h*h + K*h + h*h).
double short_conv_per_token(const text_spec& t) {
  if (t.short_conv_kernel == 0) return 0.0;
  const double h = static_cast<double>(t.hidden_size), k = static_cast<double>(t.short_conv_kernel);
  const double layers = static_cast<double>(t.num_hidden_layers - t.num_attention_layers());
  return kForwardBackward * kFma * (3 * h * h + k * h + h * h) * layers;
}

// Text decoder, per token at row length S (Megatron's "transformer_flops" with the gated-attention and
// gated-delta-net extensions, divided by batch_size * seq_length).
void text_constant(const text_spec& t, bool train_mtp, double s, megatron_constant& out) {
  const double h = static_cast<double>(t.hidden_size);
  const double query_projection = static_cast<double>(t.head_dim * t.num_attention_heads);  // kv_channels * heads
  const double key_projection = static_cast<double>(t.head_dim * t.num_key_value_heads);
  const double value_projection = key_projection;
  const double gate_projection = t.attn_output_gate ? query_projection : 0.0;

  const double mtp_layers = train_mtp ? static_cast<double>(t.mtp_num_hidden_layers) : 0.0;
  // MoE layer counts the way Megatron forms them: the decoder's MoE layers, plus the MTP layers when the last
  // decoder layer is an MoE layer ("num_moe_layers += last_layer_is_moe * mtp_num_layers").
  const bool last_layer_is_moe = detail::is_moe_layer(t, t.num_hidden_layers - 1);
  const double moe_layers = static_cast<double>(t.num_moe_layers()) + (last_layer_is_moe ? mtp_layers : 0.0);
  const double dense_layers = static_cast<double>(t.num_dense_mlp_layers()) + (last_layer_is_moe ? 0.0 : mtp_layers);
  // Megatron appends the MTP layers to the decoder's layer count. flopmeter's Qwen3.5 MTP layer is a
  // full-attention layer (Megatron would place it by the linear-attention pattern) and the 3h norm
  // multiply term Megatron adds for MTP is left out (not matmul work).
  // Megatron has no attention window (its PR #3280 is open): every softmax attention layer, sliding or chunked
  // too, is billed at S/2 keys per token; the check states the difference per window.
  const double standard_layers = static_cast<double>(t.num_attention_layers()) + mtp_layers;
  const double linear_layers = static_cast<double>(t.num_linear_attention_layers());

  // Standard attention: qkv (+gate) projection and out projection; the core attention separately.
  double standard_projection =
      kForwardBackward * kFma *
      (h * (query_projection + key_projection + value_projection + gate_projection) + query_projection * h);
  // "causal mask (only half of the mask is non-zero)" x 2 for QK^T and (QK^T)V.
  double standard_core = kForwardBackward * kFma * (query_projection * s / 2.0 * 2.0);
  if (t.is_mla()) {
    // Megatron-LM's own MLA term (multi_latent_attention in num_floating_point_operations), per layer:
    //   q: q_lora_rank * (h + heads*(qk_head_dim + qk_pos_emb_head_dim) + 1), or h*heads*(qk + pos) without it
    //   kv: kv_lora_rank * (h + heads*(qk_head_dim + v_head_dim) + 1) + h*qk_pos_emb_head_dim
    //   o: heads*v_head_dim*h;  core: S*heads*(qk + pos)/2 + S*heads*v_head_dim/2
    // with qk_head_dim = qk_nope_head_dim and qk_pos_emb_head_dim = qk_rope_head_dim. The "+ 1"s are the latent
    // norms (element-wise: flopmeter does not bill them; text_mla_norms_per_token is that difference).
    const double heads = static_cast<double>(t.num_attention_heads);
    const double nope = static_cast<double>(t.qk_nope_head_dim), rope = static_cast<double>(t.qk_rope_head_dim);
    const double v = static_cast<double>(t.v_head_dim), q_lora = static_cast<double>(t.q_lora_rank);
    const double kv_lora = static_cast<double>(t.kv_lora_rank);
    const double q_term = t.q_lora_rank > 0 ? q_lora * (h + heads * (nope + rope) + 1) : h * heads * (nope + rope);
    standard_projection =
        kForwardBackward * kFma * (q_term + kv_lora * (h + heads * (nope + v) + 1) + h * rope + heads * v * h);
    standard_core = kForwardBackward * kFma * (s * heads * (nope + rope) / 2 + s * heads * v / 2);
    out.text_mla_norms_per_token =
        kForwardBackward * kFma * ((t.q_lora_rank > 0 ? q_lora : 0.0) + kv_lora) * standard_layers;
  }

  // Gated DeltaNet in Megatron's form: in proj (q, k, v, z, a, b), conv1d, delta rule (4 products of v_head_dim^2
  // per value head), out proj.
  double linear_term = 0.0;
  if (linear_layers > 0) {
    const double qk_dim = static_cast<double>(t.linear_key_head_dim * t.linear_num_key_heads);
    const double v_dim = static_cast<double>(t.linear_value_head_dim * t.linear_num_value_heads);
    const double num_v_heads = static_cast<double>(t.linear_num_value_heads);
    const double v_head_dim = static_cast<double>(t.linear_value_head_dim);
    linear_term = kForwardBackward * kFma *
                  (h * (2 * qk_dim + 2 * v_dim + 2 * num_v_heads) +
                   static_cast<double>(t.linear_conv_kernel_dim) * (2 * qk_dim + v_dim) +
                   num_v_heads * (v_head_dim * v_head_dim) * 4 + h * v_dim);
  }

  // SwiGLU: h->2*ffn_h and ffn_h->h; 2-matrix MLPs (plain_mlp: Apertus, Nemotron-H's squared ReLU, its experts
  // too) are Megatron without --swiglu: h->ffn_h and ffn_h->h.
  const double ffn_expansion = t.plain_mlp ? 2.0 : 3.0;
  const double dense_expansion = ffn_expansion;
  // Megatron's MLP term: dense layers (ffn_hidden_size), routed experts (moe_ffn_hidden_size x
  // num_experts_routed_to = top-k) and the shared expert (moe_shared_expert_intermediate_size), per MoE layer.
  const double dense_mlp =
      kForwardBackward * kFma * h * (static_cast<double>(t.intermediate_size) * dense_expansion) * dense_layers;
  out.text_moe_routed_per_token =
      kForwardBackward * kFma * h *
      (static_cast<double>(t.moe_intermediate_size) * static_cast<double>(t.num_experts_per_tok) * ffn_expansion) *
      moe_layers;
  // The shared expert: Qwen's shared_expert_intermediate_size, or DeepSeek's n_shared_experts x moe_ffn_hidden_size
  // (Megatron's moe_shared_expert_intermediate_size).
  const double shared_width = t.shared_expert_intermediate_size > 0
                                  ? static_cast<double>(t.shared_expert_intermediate_size)
                                  : static_cast<double>(t.n_shared_experts * t.moe_intermediate_size);
  out.text_moe_shared_per_token = kForwardBackward * kFma * h * (shared_width * ffn_expansion) * moe_layers;
  const double mlp = dense_mlp + out.text_moe_routed_per_token + out.text_moe_shared_per_token;
  // Not in Megatron: the router (h x num_experts) and, with a shared expert, its sigmoid gate (h x 1).
  const double shared_gate = t.shared_expert_intermediate_size > 0 && !t.shared_expert_ungated ? 1.0 : 0.0;
  out.text_moe_unbilled_per_token =
      kForwardBackward * kFma * h * (static_cast<double>(t.num_experts) + shared_gate) * moe_layers;
  const double mtp_proj = kForwardBackward * kFma * mtp_layers * (2 * h * h);
  const double logits = kForwardBackward * kFma * h * static_cast<double>(t.vocab_size) * (mtp_layers + 1);

  out.text_linear_per_token = mlp + standard_projection * standard_layers + linear_term * linear_layers + mtp_proj +
                              logits + megatron_mamba_per_token(t);
  out.text_attention_per_token = standard_core * standard_layers;
}

// Vision tower, per decoder token at row length S, in the classic Megatron shape
// 12 * L * hv^2 * ((1 + groups/heads + S/hv/2) * q/hv + ffn/hv * gated) with MHA (groups = heads), q = hv,
// a plain (not gated) MLP and no logits, the way the reference trainer's constant bills its ViT.
void vision_constant(const vision_spec& v, double s, megatron_constant& out) {
  const double expansion_factor = 3 * 2 * 2;
  const double hv = static_cast<double>(v.hidden_size);
  const double layers = static_cast<double>(v.depth);
  const double query_ratio = 1.0;        // kv_channels * heads / hidden = 1 for the ViT
  const double groups_over_heads = 1.0;  // MHA
  // GELU MLP (2 matrices); a gated MLP (Qwen2.5-VL) has 3, Megatron's SwiGLU factor 3/2.
  const double gated = v.mlp == vision_mlp_kind::gated ? 1.5 : 1.0;
  const double base = expansion_factor * layers * hv * hv;
  out.vision_linear_per_token =
      base * ((1 + groups_over_heads) * query_ratio + static_cast<double>(v.intermediate_size) / hv * gated);
  out.vision_attention_per_token = base * (s / hv / 2) * query_ratio;
}

check_row make_row(std::string term, double exact, double megatron, double expected_ratio, double tolerance,
                   std::string explanation) {
  check_row row;
  row.term = std::move(term);
  row.exact = exact;
  row.megatron = megatron;
  row.expected_ratio = expected_ratio;
  row.ratio = megatron != 0 ? exact / megatron : (exact == 0 ? expected_ratio : INFINITY);
  row.relative_error = std::fabs(row.ratio / expected_ratio - 1.0);
  row.pass = std::isfinite(row.ratio) && row.relative_error <= tolerance;
  row.explanation = std::move(explanation);
  return row;
}

// The differences of the newer towers from the constant, each on the unit that shows it (check_report rows):
//   Qwen2.5-VL windows  one frame that is exactly one window (side = window_size / patch_size patches a side,
//                       P = side^2 patches): the window blocks attend P^2 pairs, the constant bills them S/2 keys
//                       per patch: ratio 2P/S.
//   InternViT CLS       one tile of P = side^2 patches runs P + 1 tokens through every block; the constant bills
//                       the P patches: ratio (P+1)/P.
//   Gemma 3 image block per pair the block costs what a causal pair costs in every decoder layer (full and sliding);
//                       the constant has no image block: these pairs are on top of its S/2 keys.
void documented_vision_rows(const model_spec& spec, const coefficients& c, const megatron_constant& k, double s,
                            double tolerance, check_report& report) {
  const vision_spec& v = *spec.vision;
  const vision_geometry geometry = geometry_of(spec);
  if (v.num_window_blocks() > 0) {
    const std::int64_t side = v.window_size / v.patch_size;
    const image_grid frame[] = {{1, side, side}};
    const batch_counts n = count_from_lengths({}, 0, frame, geometry);
    const double patches = static_cast<double>(side * side);
    const double share = static_cast<double>(v.num_window_blocks()) / static_cast<double>(v.depth);
    report.rows.push_back(make_row(
        "one window-sized frame: window blocks' attention vs constant's share",
        static_cast<double>(c.vision_window_attn_pair) * static_cast<double>(n.vision_window_pairs),
        k.vision_attention_per_token * share * patches, 2 * patches / s, tolerance,
        "window blocks attend inside windows of window_size/patch_size patches a side (P^2 pairs per window); the "
        "constant bills S/2 keys per patch: ratio 2P/S"));
  }
  if (v.cls_token) {
    const std::int64_t side = v.image_size / v.patch_size;
    const image_grid tile[] = {{1, side, side}};
    const batch_counts n = count_from_lengths({}, 0, tile, geometry);
    const double patches = static_cast<double>(side * side);
    report.rows.push_back(make_row("one tile: ViT token-linear work vs constant x patches",
                                   compute_flops(c, n, flop_scope::complete).vision_dense,
                                   k.vision_linear_per_token * patches, (patches + 1) / patches, tolerance,
                                   "InternViT runs a CLS token with each tile's P patches: ratio (P+1)/P"));
  }
  if (v.bidirectional_image) {
    report.rows.push_back(make_row("image_block_pair x S/2 vs constant's attention part",
                                   static_cast<double>(c.image_block_pair) * s / 2, k.text_attention_per_token, 1.0,
                                   tolerance,
                                   "an image's n tokens attend to each other: n(n-1)/2 pairs on top of the causal "
                                   "ones in every layer, each costing a causal pair's work; the constant has none"));
  }
}

}  // namespace

megatron_constant compute_megatron_constant(const model_spec& spec, std::int64_t seq_len) {
  if (seq_len < 1) throw error("seq_len must be >= 1 (got " + std::to_string(seq_len) + ")");
  megatron_constant c;
  c.seq_len = seq_len;
  const double s = static_cast<double>(seq_len);
  text_constant(spec.text, spec.train_mtp_layers, s, c);
  if (spec.vision) vision_constant(*spec.vision, s, c);
  return c;
}

namespace {

// The whole-row cases count one S-token document (S(S+1)/2 causal pairs) and, with a vision tower, one
// S-patch image (S^2 bidirectional pairs). Both must fit int64: S(S+1)/2 up to S = 2^32 - 1 (formed by
// halving the even factor first, as the FLOP model does), S^2 up to S = 3,037,000,499.
void check_seq_len(const model_spec& spec, std::int64_t seq_len) {
  if (seq_len < 1) throw error("seq_len must be >= 1 (got " + std::to_string(seq_len) + ")");
  std::int64_t pairs = 0;
  const bool even = seq_len % 2 == 0;
  if (seq_len == INT64_MAX ||
      __builtin_mul_overflow(even ? seq_len / 2 : seq_len, even ? seq_len + 1 : seq_len / 2 + 1, &pairs)) {
    throw error("seq_len " + std::to_string(seq_len) +
                " is too large: one document of that many tokens has S(S+1)/2 causal pairs, more than a 64-bit "
                "count holds (largest seq_len: 4294967295)");
  }
  if (spec.vision && __builtin_mul_overflow(seq_len, seq_len, &pairs)) {
    throw error("seq_len " + std::to_string(seq_len) +
                " is too large for a model with a vision tower: one image of that many patches has S^2 "
                "attention pairs, more than a 64-bit count holds (largest seq_len: 3037000499)");
  }
}

// The decoder's windows and their pair counts in one S-token document, written out independently of the count
// code (batch_counts.cpp).
struct geometry_windows {
  int count = 0;
  double pairs[kMaxAttentionWindows] = {};
};
geometry_windows windows_of(const model_spec& spec, std::int64_t seq_len) {
  geometry_windows out;
  const double s = static_cast<double>(seq_len);
  for (const attention_window& w : detail::attention_windows(spec)) {
    if (out.count == static_cast<int>(kMaxAttentionWindows)) break;
    const double size = static_cast<double>(w.size);
    double pairs = 0;
    if (w.kind == window_kind::sliding) {
      pairs = s <= size ? s * (s + 1) / 2 : size * (size + 1) / 2 + (s - size) * size;
    } else {
      const double chunks = std::floor(s / size), rest = s - chunks * size;
      pairs = chunks * size * (size + 1) / 2 + rest * (rest + 1) / 2;
    }
    out.pairs[out.count++] = pairs;
  }
  return out;
}

}  // namespace

check_report run_sanity_check(const model_spec& spec, std::int64_t seq_len, double tolerance) {
  check_seq_len(spec, seq_len);
  check_report report;
  report.model = spec.name;
  report.seq_len = seq_len;
  report.constant = compute_megatron_constant(spec, seq_len);
  const megatron_constant& k = report.constant;
  const coefficients c = compute_coefficients(spec);
  const double s = static_cast<double>(seq_len);

  // 1. Term by term, per token. For an MoE model the constant lacks the router and the shared-expert gate:
  // the expected ratio is (constant + that documented difference) / constant.
  const bool moe = spec.text.is_moe();
  const bool mla = spec.text.is_mla();
  // Mamba-2: Megatron bills d_in = 2 x hidden and no conv; the difference from flopmeter's term, documented.
  const double mamba_exact = exact_mamba_per_token(spec.text), mamba_megatron = megatron_mamba_per_token(spec.text);
  const double mamba_difference = mamba_exact - mamba_megatron + short_conv_per_token(spec.text);
  const double linear_ratio =
      (k.text_linear_per_token + k.text_moe_unbilled_per_token - k.text_mla_norms_per_token + mamba_difference) /
      k.text_linear_per_token;
  std::string linear_why = moe ? "same projections, experts and logits; Megatron-LM bills no router (hidden x "
                                 "num_experts) and no shared-expert gate (hidden x 1) per MoE layer, flopmeter does: "
                                 "ratio 1 + that / constant"
                               : "same projections, MLP and logits, per token";
  if (mla) {
    linear_why +=
        "; Megatron's MLA term bills 1 per latent rank (q_lora_rank + kv_lora_rank) per layer for the latent "
        "norms, flopmeter does not (element-wise)";
  }
  // DSA's indexer has no Megatron term (Megatron-LM and slime bill DeepSeek-V3.2's attention as dense MLA). Written
  // out here from the spec: per indexing layer, forward only (2 FLOPs per multiply-add), the projections wq_b
  // q_lora_rank x H_I*d_I, wk h x d_I, weights_proj h x H_I per token, and the scores H_I*(d_I + 1) per causal pair.
  const text_spec& t = spec.text;
  const double indexer_layers = static_cast<double>(detail::count_indexer_layers(t, 0, t.num_hidden_layers));
  const double index_heads = static_cast<double>(t.index_n_heads), index_dim = static_cast<double>(t.index_head_dim);
  const double indexer_per_token = kFma * indexer_layers *
                                   (static_cast<double>(t.q_lora_rank) * index_heads * index_dim +
                                    static_cast<double>(t.hidden_size) * (index_dim + index_heads));
  const double indexer_per_pair = kFma * indexer_layers * index_heads * (index_dim + 1);
  const bool dsa = t.has_indexer();
  if (dsa) {
    linear_why += "; Megatron-LM has no indexer term: flopmeter bills the indexer's projections forward only";
  }
  const double linear_ratio_dsa = linear_ratio + indexer_per_token / k.text_linear_per_token;
  if (spec.text.num_mamba_layers() > 0) {
    linear_why += "; Megatron bills the Mamba inner width as 2 x hidden (" + std::to_string(2 * t.hidden_size) +
                  ", the config's heads x head_dim is " + std::to_string(t.mamba_num_heads * t.mamba_head_dim) +
                  ") and no depthwise conv";
    report.rows.push_back(
        make_row("Mamba-2 layers = constant's Mamba term + the documented difference",
                 static_cast<double>(compute_coefficients(spec).dense.linear_attention), mamba_megatron,
                 mamba_exact / mamba_megatron, tolerance,
                 "Megatron bills the Mamba inner width as 2 x hidden (d_in = " + std::to_string(2 * t.hidden_size) +
                     "; the config's heads x head_dim = " + std::to_string(t.mamba_num_heads * t.mamba_head_dim) +
                     ") and no depthwise conv (K x (d_in + 2 n_groups state) per token); in_proj, the scan's 7 d_in N "
                     "and out_proj as Megatron writes them"));
  }
  if (spec.text.short_conv_kernel > 0) {
    linear_why += "; Megatron has no term for LFM2's gated short convolution (in_proj h -> 3h, the conv, out_proj)";
    report.rows.push_back(make_row("short-conv layers = the documented difference (not in the constant)",
                                   static_cast<double>(compute_coefficients(spec).dense.linear_attention),
                                   short_conv_per_token(spec.text), 1.0, tolerance,
                                   "Megatron has no term for LFM2's gated short convolution: 6 x (3h^2 + K h + h^2) "
                                   "per conv layer"));
  }
  report.rows.push_back(make_row("text dense_per_token (+MTP) = constant's token-linear part",
                                 static_cast<double>(c.dense_per_token) + static_cast<double>(c.mtp_per_token),
                                 k.text_linear_per_token, linear_ratio_dsa, tolerance, linear_why));
  if (dsa) {
    report.rows.push_back(
        make_row("indexer scores per causal pair = the documented difference (no Megatron term)",
                 static_cast<double>(c.text_attn_pair), indexer_per_pair, 1.0, tolerance,
                 "Megatron-LM has no indexer: flopmeter bills its scores over every causal pair, index_n_heads x "
                 "(index_head_dim + 1) multiply-adds per indexing layer, forward only (2 x that)"));
  }
  if (mla) {
    report.rows.push_back(make_row(
        "MLA latent norms = the documented difference (in the constant, not billed)",
        6.0 *
            static_cast<double>(spec.text.num_attention_layers() +
                                (spec.train_mtp_layers ? spec.text.mtp_num_hidden_layers : 0)) *
            static_cast<double>((spec.text.q_lora_rank > 0 ? spec.text.q_lora_rank : 0) + spec.text.kv_lora_rank),
        k.text_mla_norms_per_token, 1.0, tolerance,
        "Megatron-LM's MLA formula adds q_lora_rank + kv_lora_rank per layer (the \"+ 1\" "
        "terms, the latent RMSNorms): 6 x that x MLA layers"));
  }
  if (moe) {
    // The MoE parts on their own. The MTP layers' share (trained MTP layers of an MoE model are MoE layers) is
    // the per-layer part times their count: the decoder part divided by the number of MoE decoder layers.
    const double decoder_moe_layers = static_cast<double>(spec.text.num_moe_layers());
    const double mtp_layers = spec.train_mtp_layers ? static_cast<double>(spec.text.mtp_num_hidden_layers) : 0.0;
    const double scale = (decoder_moe_layers + mtp_layers) / decoder_moe_layers;
    report.rows.push_back(make_row("MoE routed experts (x top-k) = constant's routed-expert term",
                                   static_cast<double>(c.dense.moe_routed_experts) * scale, k.text_moe_routed_per_token,
                                   1.0, tolerance,
                                   "top-k SwiGLU experts of moe_intermediate_size per token (dropless routing)"));
    if (spec.text.shared_expert_intermediate_size > 0 || spec.text.n_shared_experts > 0) {
      report.rows.push_back(make_row(
          "MoE shared expert = constant's shared-expert term", static_cast<double>(c.dense.moe_shared_expert) * scale,
          k.text_moe_shared_per_token, 1.0, tolerance,
          spec.text.n_shared_experts > 0 ? "one SwiGLU of n_shared_experts x moe_intermediate_size on every token"
                                         : "one SwiGLU of shared_expert_intermediate_size on every token"));
    }
    report.rows.push_back(
        make_row("MoE router + shared-expert gate = the documented difference (not in the constant)",
                 static_cast<double>(c.dense.moe_router + c.dense.moe_shared_expert_gate) * scale,
                 k.text_moe_unbilled_per_token, 1.0, tolerance,
                 "Megatron-LM's num_floating_point_operations has no router or shared-expert gate term: 6 x hidden x "
                 "(num_experts + 1 if a shared expert) per MoE layer"));
  }
  // Per pair, every softmax layer: the full layers' coefficient plus each window's (a windowed layer costs the
  // same per pair; the window changes how many pairs it has).
  const geometry_windows windows = windows_of(spec, seq_len);
  // The indexer's scores are no attention layer's pairs: left out of the per-pair comparison (their own row above).
  const double pair_coefficients =
      static_cast<double>(c.text_attn_pair + c.mtp_attn_pair + c.window_attn_pair[0] + c.window_attn_pair[1]) -
      indexer_per_pair;
  report.rows.push_back(make_row(dsa ? "attention per pair (MLA over the top-k keys) x S/2 = constant's attention part"
                                 : windows.count > 0
                                     ? "attention per pair (full + windowed layers) x S/2 = constant's attention part"
                                     : "text_attn_pair x S/2 = constant's attention part",
                                 pair_coefficients * s / 2, k.text_attention_per_token, 1.0, tolerance,
                                 dsa ? "Megatron bills DSA's sparse attention as dense MLA: every token attends to "
                                       "S/2 keys; flopmeter bills min(i + 1, index_topk) keys (a sliding window)"
                                 : windows.count > 0 ? "Megatron lets every token attend to S/2 keys in every softmax "
                                                       "layer: it has no window, so windowed layers are billed as full"
                                                     : "Megatron lets every token attend to S/2 keys"));

  // 2. The whole-row case the constant assumes: one document of S tokens.
  const vision_geometry text_only = geometry_of(spec);
  const std::int64_t row_length[] = {seq_len};
  const batch_counts text_row = count_from_lengths(row_length, 0, {}, text_only);
  const flop_breakdown text_flops = compute_flops(c, text_row, flop_scope::complete);
  // MTP attention (when trained) is inside flop_breakdown::mtp; take the pair count times both coefficients.
  const double text_attention_exact =
      static_cast<double>(c.text_attn_pair + c.mtp_attn_pair) * static_cast<double>(text_row.causal_pairs) +
      static_cast<double>(c.window_attn_pair[0]) * static_cast<double>(text_row.window_pairs_0) +
      static_cast<double>(c.window_attn_pair[1]) * static_cast<double>(text_row.window_pairs_1);
  // The expected ratio from the pair counts written out here (not the count code): full layers S(S+1)/2 pairs, a
  // sliding window w: S(S+1)/2 when S <= w, else w(w+1)/2 + (S - w) w; chunks of c: full chunks c(c+1)/2 each
  // and the rest r(r+1)/2. The constant bills S*S/2 per layer.
  double expected_pairs =
      (static_cast<double>(c.text_attn_pair + c.mtp_attn_pair) - indexer_per_pair) * s * (s + 1) / 2;
  for (int w = 0; w < windows.count; ++w) {
    expected_pairs += static_cast<double>(c.window_attn_pair[w]) * windows.pairs[w];
  }
  const double attention_ratio = pair_coefficients > 0 ? expected_pairs / (pair_coefficients * s * s / 2) : (s + 1) / s;
  // The indexer's scores (S(S+1)/2 pairs) are on top of the constant's attention part.
  const double indexer_share = indexer_per_pair * s * (s + 1) / 2 / (k.text_attention_per_token * s);
  report.rows.push_back(make_row("one S-token document: attention vs constant x S", text_attention_exact,
                                 k.text_attention_per_token * s, attention_ratio + indexer_share, tolerance,
                                 dsa ? "MLA over min(i + 1, index_topk) keys: the pairs of a sliding window of "
                                       "index_topk, plus the indexer's scores over the S(S+1)/2 causal pairs (no "
                                       "Megatron term); the constant bills S*S/2 dense MLA pairs"
                                 : windows.count > 0
                                     ? "full layers: S(S+1)/2 causal pairs; windowed layers: the pairs inside the "
                                       "window; the constant bills S*S/2 in every layer"
                                     : "causal pairs are S(S+1)/2, the constant bills S*S/2: ratio (S+1)/S"));
  const double text_linear = k.text_linear_per_token, text_attention = k.text_attention_per_token;
  report.rows.push_back(
      make_row("one S-token document: total vs constant x S",
               text_flops.text_dense + text_flops.mtp + text_flops.text_attention, k.text_per_token() * s,
               (text_linear + k.text_moe_unbilled_per_token - k.text_mla_norms_per_token + indexer_per_token +
                mamba_difference + text_attention * (attention_ratio + indexer_share)) /
                   (text_linear + text_attention),
               tolerance,
               moe ? "token-linear parts differ by the router and shared-expert gate, the attention "
                     "part by (S+1)/S"
                   : "token-linear parts equal; only the attention part differs, by (S+1)/S"));

  if (spec.vision) {
    const vision_spec& v = *spec.vision;
    report.rows.push_back(make_row("vision_per_patch = constant's ViT token-linear part",
                                   static_cast<double>(c.vision_per_patch), k.vision_linear_per_token, 1.0, tolerance,
                                   v.mlp == vision_mlp_kind::gated
                                       ? "same ViT projections and gated MLP (Megatron's SwiGLU factor 3/2), per patch"
                                       : "same ViT projections and MLP, per patch"));
    // Per pair every block costs 2*hidden, windowed or not; the windows change how many pairs a block has.
    report.rows.push_back(make_row(
        v.num_window_blocks() > 0 ? "ViT attention per pair (all blocks, windowed too) x S/2 = constant's part"
                                  : "vision_attn_pair x S/2 = constant's ViT attention part",
        static_cast<double>(c.vision_attn_pair + c.vision_window_attn_pair) * s / 2, k.vision_attention_per_token, 1.0,
        tolerance, "the constant bills S/2 keys per patch, as for the decoder"));
    documented_vision_rows(spec, c, k, s, tolerance, report);
    // One image of S patches (grid 1 x 1 x S; the merge constraint is irrelevant to the ViT blocks), counted
    // in the reference's scope, against the ViT billed once per decoder token at S.
    const vision_geometry any_grid{true, 1, 0, {}};
    const image_grid row_image[] = {{1, 1, seq_len}};
    const batch_counts vision_row = count_from_lengths({}, 0, row_image, any_grid);
    const flop_breakdown vision_flops = compute_flops(c, vision_row, flop_scope::seed);
    report.rows.push_back(make_row("one S-patch image: ViT attention vs constant x S", vision_flops.vision_attention,
                                   k.vision_attention_per_token * s, 2.0, tolerance,
                                   "ViT attention is bidirectional: S^2 pairs, the constant bills S*S/2: ratio 2"));
    const double vision_linear = k.vision_linear_per_token, vision_attention = k.vision_attention_per_token;
    report.rows.push_back(make_row("one S-patch image: ViT total vs constant x S",
                                   vision_flops.vision_dense + vision_flops.vision_attention, k.vision_per_token() * s,
                                   (vision_linear + 2 * vision_attention) / (vision_linear + vision_attention),
                                   tolerance, "token-linear parts equal; only the attention part differs, by 2"));
  }

  report.pass = true;
  for (const check_row& row : report.rows) report.pass = report.pass && row.pass;
  return report;
}

}  // namespace flopmeter
