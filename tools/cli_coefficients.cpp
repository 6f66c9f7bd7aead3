// `flopmeter coefficients`: the per-unit training FLOPs of one model (compute_coefficients).
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cli.h"
#include "flopmeter/flop_model.h"
#include "output/model_report.h"

namespace flopmeter::cli {

const char* const kCoefficientsUsage =
    "usage: flopmeter coefficients MODEL [--frozen PARTS] [--lora-rank R --lora-targets NAMES]\n"
    "                              [--recompute POLICY [--recompute-layers N | --recompute-every K]\n"
    "                               [--recompute-vision]] [--indexer-trains] [--json]\n"
    "\n"
    "Prints the exact training FLOPs (forward + backward) per unit of work of one model: FLOPs of a batch =\n"
    "sum of coefficient x count (see `flopmeter estimate`). With frozen parts or LoRA, the coefficients of\n"
    "that training regime: each GEMM costs forward 2, + input gradient 2 where its input needs one, + weight\n"
    "gradient 2 where its weight trains, per multiply-add (METRICS.md, \"What trains\").\n"
    "\n"
    "arguments:\n"
    "  MODEL           a model TOML file, a Hugging Face config.json, a checkpoint directory that holds one,\n"
    "                  or the name of a shipped config (e.g. qwen3_vl_2b)\n"
    "options:\n"
    "  --json          print one JSON object (keys: model, file, dense_per_token, text_attn_pair,\n"
    "                  vision_per_patch, vision_attn_pair, patch_embed_per_patch, merger_per_merged_token,\n"
    "                  mtp_per_token, mtp_attn_pair, patches_per_merged_token; for a model with attention\n"
    "                  windows window_attn_pair (per pair under each window) and windows (kind, size); and\n"
    "                  dense_per_token_breakdown:\n"
    "                  an object whose parts sum to dense_per_token: attention_projections, linear_attention,\n"
    "                  dense_mlp, moe_router, moe_routed_experts, moe_shared_expert, moe_shared_expert_gate, logits,\n"
    "                  lora_adapters; and, when a frozen decoder makes micro-batches without images cost less,\n"
    "                  without_items: their dense_per_token, text_attn_pair, mtp_per_token, mtp_attn_pair,\n"
    "                  recompute_text_per_token, recompute_text_attn_pair; recompute: settings {policy, layers,\n"
    "                  every, pipeline_stages, vision}, text_per_token, text_attn_pair, vision_per_patch,\n"
    "                  vision_attn_pair and text_per_token_breakdown: the forward FLOPs run again per unit)\n"
    FLOPMETER_CLI_RECOMPUTE_HELP("                  ")
    "  -h, --help      show this help\n"
    "\n"
    "exit status: 0 on success, 1 when the model file is invalid, 2 for a bad command line.\n";

int run_coefficients(const std::vector<std::string>& args) {
  const parsed_args parsed = parse_args("coefficients", args, with_regime_options({{"--json", false}}));
  if (parsed.help) {
    std::fputs(kCoefficientsUsage, stdout);
    return kExitOk;
  }
  if (parsed.positionals.empty()) throw usage_error("coefficients", "missing the MODEL argument");
  if (parsed.positionals.size() > 1) {
    throw usage_error("coefficients", "unexpected argument '" + parsed.positionals[1] + "' (one model only)");
  }
  const training_regime regime = parse_regime_options(parsed);
  const model_spec spec = load_model_argument(parsed.positionals[0]);
  const regime_coefficients rc = compute_coefficients(spec, regime);

  const detail::coefficient_table table = detail::coefficient_entries(rc.with_items);
  if (parsed.has("--json")) {
    std::printf("%s\n", detail::coefficients_json(spec, rc, regime).c_str());
    return kExitOk;
  }
  std::printf("%s: training FLOPs (forward + backward) per unit\n", printable(spec.name).c_str());
  if (!spec.source_path.empty()) std::printf("file: %s\n", printable(spec.source_path).c_str());
  if (!spec.vision) std::printf("text-only model: the vision coefficients are 0\n");
  if (!regime.full_training()) {
    std::string adapters;
    for (const lora_target target : regime.lora_targets) {
      adapters += (adapters.empty() ? "" : ",") + std::string(to_string(target));
    }
    std::printf(
        "regime: frozen [%s]%s\n", frozen_list(regime).c_str(),
        regime.lora_rank > 0
            ? (", LoRA rank " + std::to_string(regime.lora_rank) + " on " + adapters + " (base decoder frozen)").c_str()
            : "");
  }
  std::printf("\n  %-25s %22s  %s\n", "coefficient", "value", "meaning");
  for (const detail::coefficient_entry& e : table.entries) {
    std::printf("  %-25s %22s  %s\n", e.key, group_digits(e.value).c_str(), e.meaning);
    if (&e != &table.entries[0]) continue;
    for (const detail::coefficient_entry& part : table.dense_parts) {
      if (part.value == 0) continue;  // a family the model does not have
      std::printf("    %-23s %22s  %s\n", part.key, group_digits(part.value).c_str(), part.meaning);
    }
  }
  const vision_geometry geometry = geometry_of(spec);
  for (std::int64_t k = 0; k < geometry.window_count; ++k) {
    const attention_window& w = geometry.windows[k];
    const std::string key = "window_attn_pair[" + std::to_string(k) + "]";
    const std::string meaning = std::string("attention per (query, key) pair under the ") +
                                detail::window_kind_name(w.kind) + " window of " + std::to_string(w.size) +
                                ", summed over its layers";
    std::printf("  %-25s %22s  %s\n", key.c_str(), group_digits(rc.with_items.window_attn_pair[k]).c_str(),
                meaning.c_str());
  }
  if (regime.recompute.policy != recompute_policy::none) {
    const detail::recompute_table recompute = detail::recompute_entries(rc.with_items);
    std::printf("\n  recompute %s: the forward run again in the backward (hardware FLOPs, not model FLOPs)\n",
                to_string(regime.recompute.policy));
    for (const detail::coefficient_entry& e : recompute.entries) {
      std::printf("  %-25s %22s  %s\n", e.key, group_digits(e.value).c_str(), e.meaning);
      if (&e != &recompute.entries[0]) continue;
      for (const detail::coefficient_entry& part : recompute.dense_parts) {
        if (part.value == 0) continue;
        std::printf("    %-23s %22s  %s\n", part.key, group_digits(part.value).c_str(), part.meaning);
      }
    }
  }
  const detail::itemless_table itemless = detail::itemless_entries(rc);
  if (itemless.differs) {
    std::printf("\n  micro-batches without images or videos: the frozen decoder gets no gradient, forward only\n");
    for (const detail::coefficient_entry& e : itemless.entries) {
      std::printf("  %-25s %22s  %s\n", e.key, group_digits(e.value).c_str(), e.meaning);
    }
  }
  return kExitOk;
}

}  // namespace flopmeter::cli
