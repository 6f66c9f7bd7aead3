// The FLOP model's reports (model_report.h): what `flopmeter coefficients --json` and `estimate --json` print.
#include "output/model_report.h"

#include "output/json_writer.h"

namespace flopmeter::detail {

coefficient_table coefficient_entries(const coefficients& c) {
  const dense_terms& d = c.dense;
  return coefficient_table{
      {
          {"dense_per_token", c.dense_per_token,
           "decoder projections (incl. output gate), Gated DeltaNet, SwiGLU MLP or MoE block, logits, per device "
           "token"},
          {"text_attn_pair", c.text_attn_pair,
           "causal attention per (query, key) pair, summed over full-attention layers"},
          {"vision_per_patch", c.vision_per_patch, "ViT blocks' projections and MLP, per patch"},
          {"vision_attn_pair", c.vision_attn_pair, "ViT attention per (query, key) pair, summed over blocks"},
          {"patch_embed_per_patch", c.patch_embed_per_patch, "patch-embedding linear map, per patch (complete scope)"},
          {"merger_per_merged_token", c.merger_per_merged_token,
           "patch merger + DeepStack mergers, per merged token (complete scope)"},
          {"mtp_per_token", c.mtp_per_token,
           "MTP layers' dense work per device token (0 unless MTP layers are trained)"},
          {"mtp_attn_pair", c.mtp_attn_pair, "MTP layers' attention per causal pair (0 unless MTP layers are trained)"},
          {"patches_per_merged_token", c.patches_per_merged_token, "spatial_merge_size^2 (a count, not FLOPs)"},
      },
      {
          {"attention_projections", d.attention_projections, "full-attention q, k, v, o (+ output gate) projections"},
          {"linear_attention", d.linear_attention, "Gated DeltaNet layers"},
          {"dense_mlp", d.dense_mlp, "SwiGLU MLP of the dense layers"},
          {"moe_router", d.moe_router, "MoE router, hidden x num_experts per MoE layer"},
          {"moe_routed_experts", d.moe_routed_experts, "top-k routed SwiGLU experts (dropless: exactly k per token)"},
          {"moe_shared_expert", d.moe_shared_expert, "shared SwiGLU expert"},
          {"moe_shared_expert_gate", d.moe_shared_expert_gate, "shared expert's sigmoid gate, hidden x 1"},
          {"logits", d.logits, "LM head, hidden x vocab"},
      }};
}

std::string coefficients_json(const model_spec& spec, const coefficients& c) {
  const coefficient_table table = coefficient_entries(c);
  json_object object;
  object.string("model", spec.name);
  if (!spec.source_path.empty()) object.string("file", spec.source_path);  // which file a name resolved to
  for (const coefficient_entry& e : table.entries) object.integer(e.key, e.value);
  json_object breakdown;
  for (const coefficient_entry& e : table.dense_parts) breakdown.integer(e.key, e.value);
  object.raw("dense_per_token_breakdown", breakdown.str());
  return object.str();
}

estimate_result estimate_batch(const model_spec& spec, const batch_counts& counts, flop_scope scope,
                               std::int64_t seq_len) {
  estimate_result r;
  r.spec = spec;
  r.c = compute_coefficients(spec);
  r.scope = scope;
  r.n = counts;
  r.f = compute_flops(r.c, r.n, scope);
  r.exact = r.f.total();
  // The constant's view of the same batch. With no tokens and no seq_len there is no row length to take.
  r.row_length = seq_len > 0 ? seq_len : r.n.device_tokens();
  if (r.row_length >= 1) {
    // The seed scope bills no MTP layers (the reference trainer has none), so its constant is taken without
    // them too: megatron_over_exact then compares like with like.
    model_spec constant_spec = spec;
    if (scope == flop_scope::seed) constant_spec.train_mtp_layers = false;
    r.constant = compute_megatron_constant(constant_spec, r.row_length);
    r.megatron_flops = r.constant->text_per_token() * static_cast<double>(r.n.device_tokens()) +
                       r.constant->vision_per_token() * static_cast<double>(r.n.patches);
    if (r.exact > 0) r.over_exact = r.megatron_flops / r.exact;
  }
  return r;
}

std::string counts_json(const batch_counts& n) {
  json_object object;
  object.integer("real_tokens", n.real_tokens)
      .integer("padding_tokens", n.padding_tokens)
      .integer("documents", n.documents)
      .integer("causal_pairs", n.causal_pairs)
      .integer("items", n.items)
      .integer("patches", n.patches)
      .integer("merged_tokens", n.merged_tokens)
      .integer("vision_pairs_per_frame", n.vision_pairs_per_frame)
      .integer("vision_pairs_whole", n.vision_pairs_whole);
  return object.str();
}

std::string estimate_json(const estimate_result& r) {
  const flop_breakdown& f = r.f;
  json_object object;
  object.string("model", r.spec.name);
  if (!r.spec.source_path.empty()) object.string("file", r.spec.source_path);  // which file a name resolved to
  object.string("scope", to_string(r.scope))
      .number("flops", r.exact)
      .number("text_dense", f.text_dense)
      .number("text_attention", f.text_attention)
      .number("vision_dense", f.vision_dense)
      .number("vision_attention", f.vision_attention)
      .number("patch_embed", f.patch_embed)
      .number("merger", f.merger)
      .number("mtp", f.mtp)
      .raw("counts", counts_json(r.n))
      .integer("row_length", r.row_length)
      .number("megatron_text_per_token", r.constant ? r.constant->text_per_token() : r.megatron_flops)
      .number("megatron_vision_per_token", r.constant ? r.constant->vision_per_token() : r.megatron_flops)
      .number("megatron_flops", r.megatron_flops)
      .number("megatron_over_exact", r.over_exact);
  return object.str();
}

}  // namespace flopmeter::detail
