// The FLOP model's reports (model_report.h): what `flopmeter coefficients --json` and `estimate --json` print.
#include "output/model_report.h"

#include <string_view>
#include <utility>
#include <vector>

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

namespace {

// Appends entries to a report; `prefix` is the path of the object they go into ("" for the top level).
class report_writer {
 public:
  explicit report_writer(report_entries& out, std::string prefix = "") : out_(out), prefix_(std::move(prefix)) {}
  report_writer in(std::string_view name) const { return report_writer(out_, prefix_ + std::string(name) + "/"); }
  void integer(std::string_view name, std::int64_t value) const { add(name, report_kind::integer).integer = value; }
  void number(std::string_view name, double value) const { add(name, report_kind::number).number = value; }
  void boolean(std::string_view name, bool value) const { add(name, report_kind::boolean).integer = value ? 1 : 0; }
  void text(std::string_view name, std::string_view value) const { add(name, report_kind::text).text = value; }
  // An array of strings: one text entry per element, or one empty_list entry.
  void texts(std::string_view name, const std::vector<const char*>& values) const {
    if (values.empty()) add(name, report_kind::empty_list);
    for (std::size_t i = 0; i < values.size(); ++i) in(name).text(std::to_string(i), values[i]);
  }

 private:
  report_entry& add(std::string_view name, report_kind kind) const {
    report_entry& e = out_.emplace_back();
    e.key = prefix_;
    e.key += name;
    e.kind = kind;
    return e;
  }
  report_entries& out_;
  std::string prefix_;
};

std::vector<const char*> frozen_parts(const training_regime& regime) {
  std::vector<const char*> parts;
  if (regime.vision_frozen) parts.push_back("vision");
  if (regime.merger_frozen) parts.push_back("merger");
  if (regime.text_frozen) parts.push_back("text");
  return parts;
}

void recompute_settings(const report_writer& w, const training_regime& regime) {
  const recompute_options& o = regime.recompute;
  w.text("policy", to_string(o.policy));
  w.integer("layers", o.layers);
  w.integer("every", o.every);
  w.integer("pipeline_stages", o.pipeline_stages);
  w.boolean("vision", o.vision);
}

bool is_index(std::string_view component) {
  return !component.empty() && component.find_first_not_of("0123456789") == std::string_view::npos;
}

}  // namespace

std::string frozen_json(const training_regime& regime) {
  std::string list = "[";
  for (const char* part : frozen_parts(regime)) list += (list.size() > 1 ? ", " : "") + json_string(part);
  return list + "]";
}

std::string report_json(const report_entries& entries) {
  struct container {
    std::string_view name;
    bool array = false;
    bool empty = true;
  };
  std::string out = "{";
  std::vector<container> open{{"", false, true}};  // open[i + 1] holds path component i
  std::vector<std::string_view> parts;
  const auto member = [&out](container& parent, std::string_view name) {
    if (!parent.empty) out += ", ";
    parent.empty = false;
    if (!parent.array) {
      append_json_string(out, name);
      out += ": ";
    }
  };
  for (const report_entry& e : entries) {
    parts.clear();
    std::string_view key = e.key;
    for (std::size_t slash; (slash = key.find('/')) != std::string_view::npos; key.remove_prefix(slash + 1)) {
      parts.push_back(key.substr(0, slash));
    }
    parts.push_back(key);
    std::size_t common = 0;
    while (common + 1 < open.size() && common + 1 < parts.size() && open[common + 1].name == parts[common]) ++common;
    for (; open.size() > common + 1; open.pop_back()) out += open.back().array ? "]" : "}";
    for (std::size_t i = common; i + 1 < parts.size(); ++i) {
      member(open.back(), parts[i]);
      const bool array = is_index(parts[i + 1]);
      out += array ? "[" : "{";
      open.push_back({parts[i], array, true});
    }
    member(open.back(), parts.back());
    switch (e.kind) {
      case report_kind::integer: append_json_int(out, e.integer); break;
      case report_kind::number: append_json_number(out, e.number); break;
      case report_kind::boolean: out += e.integer != 0 ? "true" : "false"; break;
      case report_kind::text: append_json_string(out, e.text); break;
      case report_kind::empty_list: out += "[]"; break;
    }
  }
  for (; open.size() > 1; open.pop_back()) out += open.back().array ? "]" : "}";
  return out + "}";
}

report_entries coefficients_report(const model_spec& spec, const regime_coefficients& rc,
                                   const training_regime& regime) {
  report_entries entries;
  const report_writer w(entries);
  const coefficient_table table = coefficient_entries(rc.with_items);
  w.text("model", spec.name);
  if (!spec.source_path.empty()) w.text("file", spec.source_path);  // which file a name resolved to
  w.texts("frozen", frozen_parts(regime));
  w.integer("lora_rank", regime.lora_rank);
  std::vector<const char*> targets;
  for (const lora_target target : regime.lora_targets) targets.push_back(to_string(target));
  w.texts("lora_targets", targets);
  for (const coefficient_entry& e : table.entries) w.integer(e.key, e.value);
  // A model with attention windows: their coefficients, per pair under window k, and the windows themselves.
  const vision_geometry geometry = geometry_of(spec);
  for (std::int64_t k = 0; k < geometry.window_count; ++k) {
    w.in("window_attn_pair").integer(std::to_string(k), rc.with_items.window_attn_pair[k]);
  }
  for (std::int64_t k = 0; k < geometry.window_count; ++k) {
    const report_writer window = w.in("windows").in(std::to_string(k));
    window.text("kind", window_kind_name(geometry.windows[k].kind));
    window.integer("size", geometry.windows[k].size);
  }
  // A vision tower's segment layout (vision_geometry): what a counter outside the library needs besides the
  // merge size.
  if (geometry.has_vision) {
    const report_writer vision = w.in("vision_geometry");
    vision.integer("spatial_merge_size", geometry.spatial_merge_size);
    vision.integer("vision_window", geometry.vision_window);
    vision.integer("cls_tokens", geometry.cls_tokens);
    vision.integer("segment_side", geometry.segment_side);
    vision.boolean("image_block", geometry.image_block);
  }
  for (const coefficient_entry& e : table.dense_parts) w.in("dense_per_token_breakdown").integer(e.key, e.value);
  // The recompute coefficients (hardware FLOPs only; all 0 with recompute "none"): the settings, the four
  // coefficients and text_per_token by GEMM family.
  const recompute_table recompute = recompute_entries(rc.with_items);
  const report_writer recomputed = w.in("recompute");
  recompute_settings(recomputed.in("settings"), regime);
  for (const coefficient_entry& e : recompute.entries) recomputed.integer(e.key, e.value);
  for (const coefficient_entry& e : recompute.dense_parts) {
    recomputed.in("text_per_token_breakdown").integer(e.key, e.value);
  }
  for (std::int64_t k = 0; k < geometry.window_count; ++k) {  // the re-executed core per pair under each window
    recomputed.in("window_attn_pair").integer(std::to_string(k), rc.with_items.recompute.window_attn_pair[k]);
  }
  const itemless_table itemless = itemless_entries(rc);
  if (itemless.differs) {
    for (const coefficient_entry& e : itemless.entries) w.in("without_items").integer(e.key, e.value);
  }
  return entries;
}

std::string coefficients_json(const model_spec& spec, const regime_coefficients& rc, const training_regime& regime) {
  return report_json(coefficients_report(spec, rc, regime));
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

report_entries estimate_report(const estimate_result& r) {
  const flop_breakdown& f = r.f;
  report_entries entries;
  const report_writer w(entries);
  w.text("model", r.spec.name);
  if (!r.spec.source_path.empty()) w.text("file", r.spec.source_path);  // which file a name resolved to
  w.text("scope", to_string(r.scope));
  w.texts("frozen", frozen_parts(r.regime));
  w.integer("lora_rank", r.regime.lora_rank);
  w.number("flops", r.exact);
  w.number("text_dense", f.text_dense);
  w.number("text_attention", f.text_attention);
  w.number("vision_dense", f.vision_dense);
  w.number("vision_attention", f.vision_attention);
  w.number("patch_embed", f.patch_embed);
  w.number("merger", f.merger);
  w.number("mtp", f.mtp);
  w.number("hardware_flops", f.hardware_total());
  const report_writer recompute = w.in("recompute");
  recompute_settings(recompute.in("settings"), r.regime);
  recompute.number("text_dense", f.recompute.text_dense);
  recompute.number("text_attention", f.recompute.text_attention);
  recompute.number("vision_dense", f.recompute.vision_dense);
  recompute.number("vision_attention", f.recompute.vision_attention);
  recompute.number("total", f.recompute.total());
  for (std::size_t i = 0; i < kReportedCountFields; ++i) {
    w.in("counts").integer(kCountFields[i].name, r.n.*kCountFields[i].member);
  }
  w.integer("row_length", r.row_length);
  w.number("megatron_text_per_token", r.constant ? r.constant->text_per_token() : r.megatron_flops);
  w.number("megatron_vision_per_token", r.constant ? r.constant->vision_per_token() : r.megatron_flops);
  w.number("megatron_flops", r.megatron_flops);
  w.number("megatron_over_exact", r.over_exact);
  return entries;
}

std::string estimate_json(const estimate_result& r) { return report_json(estimate_report(r)); }

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
