// flopmeter/megatron.h — the Megatron per-token constant flopmeter replaces, and the term-by-term check.
//
// The constant is written the way Megatron-LM's num_floating_point_operations writes it (expansion factors
// over hidden_size^2, attention at seq_len/2 keys per token), independently of compute_coefficients(), so
// that `run_sanity_check` compares two derivations, not one formula with itself. The vision tower is billed
// the way the reference trainer's constant bills it: once per decoder token at row length S with the same
// causal halving.
// Thread-safety: pure functions over values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flopmeter/export.h"
#include "flopmeter/model_spec.h"

namespace flopmeter FLOPMETER_EXPORT {

// Training FLOPs per token at row length `seq_len` (fwd + bwd), split into its token-linear and its
// attention part, for the text decoder and the vision tower.
struct megatron_constant {
  std::int64_t seq_len = 0;
  double text_linear_per_token = 0;      // projections, Gated DeltaNet, MLP, logits (+ MTP when trained)
  double text_attention_per_token = 0;   // QK^T and AV at seq_len/2 keys per token
  double vision_linear_per_token = 0;    // ViT blocks' projections and MLP
  double vision_attention_per_token = 0; // ViT attention at seq_len/2 keys per token
  // Mixture of experts (0 for a dense model). Megatron-LM's num_floating_point_operations bills the routed
  // experts (x top-k) and the shared expert, both inside text_linear_per_token, and has no router term and no
  // shared-expert gate term (read in NVIDIA/Megatron-LM megatron/training/training.py, transformer_flops).
  double text_moe_routed_per_token = 0;   // routed experts, part of text_linear_per_token
  double text_moe_shared_per_token = 0;   // shared expert, part of text_linear_per_token
  // What flopmeter counts and the constant does not: router hidden x num_experts and shared-expert gate
  // hidden x 1 per MoE layer (x6). NOT part of text_linear_per_token; the check's documented difference.
  double text_moe_unbilled_per_token = 0;
  // MLA (DeepSeek-V3): Megatron's MLA term adds 1 per latent rank (q_lora_rank, kv_lora_rank) per layer for the
  // latent norms, element-wise work flopmeter does not bill. Part of text_linear_per_token; 0 without MLA.
  double text_mla_norms_per_token = 0;
  double text_per_token() const { return text_linear_per_token + text_attention_per_token; }
  double vision_per_token() const { return vision_linear_per_token + vision_attention_per_token; }
};

megatron_constant compute_megatron_constant(const model_spec& spec, std::int64_t seq_len);

// One comparison of the sanity check.
struct check_row {
  std::string term;        // e.g. "text dense = token-linear part"
  double exact = 0;        // from the exact FLOP model
  double megatron = 0;     // from the Megatron constant
  double expected_ratio = 1;  // exact / megatron that the derivation predicts
  double ratio = 0;           // measured exact / megatron
  double relative_error = 0;  // |ratio / expected_ratio - 1|
  bool pass = false;
  std::string explanation;    // why expected_ratio is what it is
};

struct check_report {
  std::string model;
  std::int64_t seq_len = 0;
  megatron_constant constant;
  std::vector<check_row> rows;
  bool pass = false;  // all rows pass
};

// Term by term: dense terms equal the constant's token-linear part, pair coefficient x S/2 equals its
// attention part (text and vision), then the whole-row case (one S-token document, one S-patch image)
// against constant x S with the explained ratios (causal (S+1)/S; bidirectional ViT 2). For an MoE model the
// routed and shared experts are compared on their own, and the dense row's expected ratio is
// 1 + text_moe_unbilled_per_token / text_linear_per_token (router and shared-expert gate, which Megatron does
// not bill). Throws flopmeter::error for seq_len < 1, and for a seq_len whose whole-row pair counts do not fit
// int64: S(S+1)/2 causal pairs (S <= 2^32 - 1), and S^2 ViT pairs with a vision tower (S <= 3,037,000,499).
check_report run_sanity_check(const model_spec& spec, std::int64_t seq_len, double tolerance = 1e-9);

}  // namespace FLOPMETER_EXPORT
