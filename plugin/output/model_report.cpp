// The FLOP model's reports (model_report.h): what `flopmeter coefficients --json` and `estimate --json` print.
#include "output/model_report.h"

#include "count/count_fields.h"
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
          {"vision_attn_pair", c.vision_attn_pair,
           "ViT attention per (query, key) pair, summed over the blocks that attend per segment"},
          {"patch_embed_per_patch", c.patch_embed_per_patch, "patch-embedding linear map, per patch (complete scope)"},
          {"merger_per_merged_token", c.merger_per_merged_token,
           "patch merger + DeepStack mergers (InternVL, Gemma 3: the projector), per merged token (complete scope)"},
          {"mtp_per_token", c.mtp_per_token,
           "MTP layers' dense work per device token (0 unless MTP layers are trained)"},
          {"mtp_attn_pair", c.mtp_attn_pair, "MTP layers' attention per causal pair (0 unless MTP layers are trained)"},
          {"patches_per_merged_token", c.patches_per_merged_token, "spatial_merge_size^2 (a count, not FLOPs)"},
          {"vision_window_attn_pair", c.vision_window_attn_pair,
           "ViT attention per (query, key) pair inside a window, summed over the window blocks (Qwen2.5-VL)"},
          {"image_block_pair", c.image_block_pair,
           "decoder attention per pair an image's bidirectional block adds, summed over the attention layers (Gemma "
           "3)"},
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
          {"lora_adapters", d.lora_adapters, "LoRA A and B of every adapted projection"},
      }};
}

itemless_table itemless_entries(const regime_coefficients& rc) {
  const coefficients& c = rc.with_items;
  const coefficients& w = rc.without_items;
  return itemless_table{
      w.dense_per_token != c.dense_per_token || w.text_attn_pair != c.text_attn_pair ||
          w.mtp_per_token != c.mtp_per_token || w.mtp_attn_pair != c.mtp_attn_pair ||
          w.recompute.text_per_token != c.recompute.text_per_token ||
          w.recompute.text_attn_pair != c.recompute.text_attn_pair,
      {
          {"dense_per_token", w.dense_per_token, "per device token of a micro-batch without images or videos"},
          {"text_attn_pair", w.text_attn_pair, "per causal pair of such a micro-batch"},
          {"mtp_per_token", w.mtp_per_token, "MTP layers, per device token of such a micro-batch"},
          {"mtp_attn_pair", w.mtp_attn_pair, "MTP attention, per causal pair of such a micro-batch"},
          {"recompute_text_per_token", w.recompute.text_per_token,
           "recomputed decoder forward, per device token of such a micro-batch"},
          {"recompute_text_attn_pair", w.recompute.text_attn_pair,
           "recomputed attention core, per causal pair of such a micro-batch"},
      }};
}

const char* window_kind_name(window_kind kind) { return kind == window_kind::sliding ? "sliding" : "chunked"; }
recompute_table recompute_entries(const coefficients& c) {
  const coefficients::recompute_terms& r = c.recompute;
  const dense_terms& d = r.dense;
  return recompute_table{
      {
          {"text_per_token", r.text_per_token, "decoder forward run again in the backward, per device token"},
          {"text_attn_pair", r.text_attn_pair, "attention core run again, per causal pair"},
          {"vision_per_patch", r.vision_per_patch, "ViT blocks' forward run again, per patch"},
          {"vision_attn_pair", r.vision_attn_pair, "ViT attention core run again, per (query, key) pair"},
      },
      {
          {"attention_projections", d.attention_projections, "full-attention projections run again"},
          {"linear_attention", d.linear_attention, "Gated DeltaNet layers run again"},
          {"dense_mlp", d.dense_mlp, "SwiGLU MLPs run again"},
          {"moe_router", d.moe_router, "MoE routers run again"},
          {"moe_routed_experts", d.moe_routed_experts, "routed experts run again"},
          {"moe_shared_expert", d.moe_shared_expert, "shared experts run again"},
          {"moe_shared_expert_gate", d.moe_shared_expert_gate, "shared-expert gates run again"},
          {"lora_adapters", d.lora_adapters, "LoRA A and B run again"},
      }};
}

std::string recompute_settings_json(const training_regime& regime) {
  const recompute_options& o = regime.recompute;
  json_object object;
  object.string("policy", to_string(o.policy))
      .integer("layers", o.layers)
      .integer("every", o.every)
      .integer("pipeline_stages", o.pipeline_stages)
      .raw("vision", o.vision ? "true" : "false");
  return object.str();
}

std::string frozen_json(const training_regime& regime) {
  std::string list = "[";
  const auto add = [&list](bool frozen, const char* part) {
    if (frozen) list += (list.size() > 1 ? ", " : "") + json_string(part);
  };
  add(regime.vision_frozen, "vision");
  add(regime.merger_frozen, "merger");
  add(regime.text_frozen, "text");
  return list + "]";
}

std::string lora_targets_json(const training_regime& regime) {
  std::string list = "[";
  for (const lora_target target : regime.lora_targets)
    list += (list.size() > 1 ? ", " : "") + json_string(to_string(target));
  return list + "]";
}

std::string coefficients_json(const model_spec& spec, const regime_coefficients& rc, const training_regime& regime) {
  const coefficient_table table = coefficient_entries(rc.with_items);
  json_object object;
  object.string("model", spec.name);
  if (!spec.source_path.empty()) object.string("file", spec.source_path);  // which file a name resolved to
  object.raw("frozen", frozen_json(regime))
      .integer("lora_rank", regime.lora_rank)
      .raw("lora_targets", lora_targets_json(regime));
  for (const coefficient_entry& e : table.entries) object.integer(e.key, e.value);
  // A model with attention windows: their coefficients, per pair under window k, and the windows themselves.
  const vision_geometry geometry = geometry_of(spec);
  if (geometry.window_count > 0) {
    std::string pairs = "[", windows = "[";
    for (std::int64_t k = 0; k < geometry.window_count; ++k) {
      const attention_window& w = geometry.windows[k];
      pairs += (k > 0 ? ", " : "") + std::to_string(rc.with_items.window_attn_pair[k]);
      json_object window;
      window.string("kind", window_kind_name(w.kind)).integer("size", w.size);
      windows += (k > 0 ? ", " : "") + window.str();
    }
    object.raw("window_attn_pair", pairs + "]").raw("windows", windows + "]");
  }
  // A vision tower's segment layout (vision_geometry): what a counter outside the library (the Python package's
  // device path) needs besides the merge size.
  if (geometry.has_vision) {
    json_object vision;
    vision.integer("spatial_merge_size", geometry.spatial_merge_size)
        .integer("vision_window", geometry.vision_window)
        .integer("cls_tokens", geometry.cls_tokens)
        .integer("segment_side", geometry.segment_side)
        .boolean("image_block", geometry.image_block);
    object.raw("vision_geometry", vision.str());
  }
  json_object breakdown;
  for (const coefficient_entry& e : table.dense_parts) breakdown.integer(e.key, e.value);
  object.raw("dense_per_token_breakdown", breakdown.str());
  // The recompute coefficients (hardware FLOPs only; all 0 with recompute "none"): the settings, the four
  // coefficients and text_per_token by GEMM family.
  const recompute_table recompute = recompute_entries(rc.with_items);
  json_object recomputed;
  recomputed.raw("settings", recompute_settings_json(regime));
  for (const coefficient_entry& e : recompute.entries) recomputed.integer(e.key, e.value);
  json_object recomputed_parts;
  for (const coefficient_entry& e : recompute.dense_parts) recomputed_parts.integer(e.key, e.value);
  recomputed.raw("text_per_token_breakdown", recomputed_parts.str());
  if (geometry.window_count > 0) {  // a windowed model: the re-executed core per pair under each window
    std::string pairs = "[";
    for (std::int64_t k = 0; k < geometry.window_count; ++k) {
      pairs += (k > 0 ? ", " : "") + std::to_string(rc.with_items.recompute.window_attn_pair[k]);
    }
    recomputed.raw("window_attn_pair", pairs + "]");
  }
  object.raw("recompute", recomputed.str());
  const itemless_table itemless = itemless_entries(rc);
  if (itemless.differs) {
    json_object without;
    for (const coefficient_entry& e : itemless.entries) without.integer(e.key, e.value);
    object.raw("without_items", without.str());
  }
  return object.str();
}

estimate_result estimate_batch(const model_spec& spec, const batch_counts& counts, flop_scope scope,
                               std::int64_t seq_len, const training_regime& regime) {
  estimate_result r;
  r.spec = spec;
  r.regime = regime;
  r.c = compute_coefficients(spec, regime);
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
  for (std::size_t i = 0; i < kReportedCountFields; ++i)
    object.integer(kCountFields[i].name, n.*kCountFields[i].member);
  return object.str();
}

std::string recompute_flops_json(const estimate_result& r) {
  const flop_breakdown::recompute_flops& f = r.f.recompute;
  json_object object;
  object.raw("settings", recompute_settings_json(r.regime))
      .number("text_dense", f.text_dense)
      .number("text_attention", f.text_attention)
      .number("vision_dense", f.vision_dense)
      .number("vision_attention", f.vision_attention)
      .number("total", f.total());
  return object.str();
}

std::string estimate_json(const estimate_result& r) {
  const flop_breakdown& f = r.f;
  json_object object;
  object.string("model", r.spec.name);
  if (!r.spec.source_path.empty()) object.string("file", r.spec.source_path);  // which file a name resolved to
  object.string("scope", to_string(r.scope))
      .raw("frozen", frozen_json(r.regime))
      .integer("lora_rank", r.regime.lora_rank)
      .number("flops", r.exact)
      .number("text_dense", f.text_dense)
      .number("text_attention", f.text_attention)
      .number("vision_dense", f.vision_dense)
      .number("vision_attention", f.vision_attention)
      .number("patch_embed", f.patch_embed)
      .number("merger", f.merger)
      .number("mtp", f.mtp)
      .number("hardware_flops", f.hardware_total())
      .raw("recompute", recompute_flops_json(r))
      .raw("counts", counts_json(r.n))
      .integer("row_length", r.row_length)
      .number("megatron_text_per_token", r.constant ? r.constant->text_per_token() : r.megatron_flops)
      .number("megatron_vision_per_token", r.constant ? r.constant->vision_per_token() : r.megatron_flops)
      .number("megatron_flops", r.megatron_flops)
      .number("megatron_over_exact", r.over_exact);
  return object.str();
}

std::string check_report_json(const check_report& report) {
  std::string rows = "[";
  for (std::size_t i = 0; i < report.rows.size(); ++i) {
    const check_row& row = report.rows[i];
    json_object object;
    object.string("term", row.term)
        .number("exact", row.exact)
        .number("megatron", row.megatron)
        .number("expected_ratio", row.expected_ratio)
        .number("ratio", row.ratio)
        .number("relative_error", row.relative_error)
        .boolean("pass", row.pass)
        .string("explanation", row.explanation);
    rows += (i == 0 ? "\n    " : ",\n    ") + object.str();
  }
  rows += report.rows.empty() ? "]" : "\n  ]";
  const megatron_constant& k = report.constant;
  json_object object;
  object.string("model", report.model)
      .integer("seq_len", report.seq_len)
      .number("megatron_text_per_token", k.text_per_token())
      .number("megatron_vision_per_token", k.vision_per_token())
      .number("megatron_text_linear_per_token", k.text_linear_per_token)
      .number("megatron_text_attention_per_token", k.text_attention_per_token)
      .number("megatron_vision_linear_per_token", k.vision_linear_per_token)
      .number("megatron_vision_attention_per_token", k.vision_attention_per_token)
      .number("megatron_text_moe_routed_per_token", k.text_moe_routed_per_token)
      .number("megatron_text_moe_shared_per_token", k.text_moe_shared_per_token)
      .number("not_in_megatron_moe_router_and_gate_per_token", k.text_moe_unbilled_per_token)
      .boolean("pass", report.pass)
      .raw("rows", rows);
  return object.str();
}

}  // namespace flopmeter::detail
