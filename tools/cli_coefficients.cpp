// `flopmeter coefficients`: the per-unit training FLOPs of one model (compute_coefficients).
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cli.h"
#include "flopmeter/flop_model.h"

namespace flopmeter::cli {

const char* const kCoefficientsUsage =
    "usage: flopmeter coefficients MODEL [--frozen PARTS] [--lora-rank R --lora-targets NAMES] [--json]\n"
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
    "                  mtp_per_token, mtp_attn_pair, patches_per_merged_token, and dense_per_token_breakdown:\n"
    "                  an object whose parts sum to dense_per_token: attention_projections, linear_attention,\n"
    "                  dense_mlp, moe_router, moe_routed_experts, moe_shared_expert, moe_shared_expert_gate, logits,\n"
    "                  lora_adapters; and, when a frozen decoder makes micro-batches without images cost less,\n"
    "                  without_items: their dense_per_token, text_attn_pair, mtp_per_token, mtp_attn_pair)\n"
    "  -h, --help      show this help\n"
    "\n"
    "exit status: 0 on success, 1 when the model file is invalid, 2 for a bad command line.\n";

int run_coefficients(const std::vector<std::string>& args) {
  const parsed_args parsed = parse_args(
      "coefficients", args, {{"--json", false}, {"--frozen", true}, {"--lora-rank", true}, {"--lora-targets", true}});
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
  const coefficients& c = rc.with_items;
  const coefficients& without = rc.without_items;
  const bool split = without.dense_per_token != c.dense_per_token || without.text_attn_pair != c.text_attn_pair ||
                     without.mtp_per_token != c.mtp_per_token || without.mtp_attn_pair != c.mtp_attn_pair;
  std::string targets = "[";
  for (const lora_target target : regime.lora_targets) {
    targets += (targets.size() > 1 ? ", " : "") + json_string(to_string(target));
  }
  targets += "]";

  struct entry {
    const char* key;
    std::int64_t value;
    const char* meaning;
  };
  const entry entries[] = {
      {"dense_per_token", c.dense_per_token,
       "decoder projections (incl. output gate), Gated DeltaNet, SwiGLU MLP or MoE block, logits, per device token"},
      {"text_attn_pair", c.text_attn_pair, "causal attention per (query, key) pair, summed over full-attention layers"},
      {"vision_per_patch", c.vision_per_patch, "ViT blocks' projections and MLP, per patch"},
      {"vision_attn_pair", c.vision_attn_pair, "ViT attention per (query, key) pair, summed over blocks"},
      {"patch_embed_per_patch", c.patch_embed_per_patch, "patch-embedding linear map, per patch (complete scope)"},
      {"merger_per_merged_token", c.merger_per_merged_token,
       "patch merger + DeepStack mergers, per merged token (complete scope)"},
      {"mtp_per_token", c.mtp_per_token, "MTP layers' dense work per device token (0 unless MTP layers are trained)"},
      {"mtp_attn_pair", c.mtp_attn_pair, "MTP layers' attention per causal pair (0 unless MTP layers are trained)"},
      {"patches_per_merged_token", c.patches_per_merged_token, "spatial_merge_size^2 (a count, not FLOPs)"},
  };

  // dense_per_token by GEMM family; the parts sum to it exactly.
  const dense_terms& d = c.dense;
  const entry parts[] = {
      {"attention_projections", d.attention_projections, "full-attention q, k, v, o (+ output gate) projections"},
      {"linear_attention", d.linear_attention, "Gated DeltaNet layers"},
      {"dense_mlp", d.dense_mlp, "SwiGLU MLP of the dense layers"},
      {"moe_router", d.moe_router, "MoE router, hidden x num_experts per MoE layer"},
      {"moe_routed_experts", d.moe_routed_experts, "top-k routed SwiGLU experts (dropless: exactly k per token)"},
      {"moe_shared_expert", d.moe_shared_expert, "shared SwiGLU expert"},
      {"moe_shared_expert_gate", d.moe_shared_expert_gate, "shared expert's sigmoid gate, hidden x 1"},
      {"logits", d.logits, "LM head, hidden x vocab"},
      {"lora_adapters", d.lora_adapters, "LoRA A and B of every adapted projection"},
  };
  const entry without_entries[] = {
      {"dense_per_token", without.dense_per_token, "per device token of a micro-batch without images or videos"},
      {"text_attn_pair", without.text_attn_pair, "per causal pair of such a micro-batch"},
      {"mtp_per_token", without.mtp_per_token, "MTP layers, per device token of such a micro-batch"},
      {"mtp_attn_pair", without.mtp_attn_pair, "MTP attention, per causal pair of such a micro-batch"},
  };

  if (parsed.has("--json")) {
    json_object object;
    object.string("model", spec.name);
    if (!spec.source_path.empty()) object.string("file", spec.source_path);  // which file a name resolved to
    object.raw("frozen", regime_json(regime)).integer("lora_rank", regime.lora_rank).raw("lora_targets", targets);
    for (const entry& e : entries) object.integer(e.key, e.value);
    json_object breakdown;
    for (const entry& e : parts) breakdown.integer(e.key, e.value);
    object.raw("dense_per_token_breakdown", breakdown.str());
    if (split) {
      json_object itemless;
      for (const entry& e : without_entries) itemless.integer(e.key, e.value);
      object.raw("without_items", itemless.str());
    }
    std::printf("%s\n", object.str().c_str());
    return kExitOk;
  }
  std::printf("%s: training FLOPs (forward + backward) per unit\n", printable(spec.name).c_str());
  if (!spec.source_path.empty()) std::printf("file: %s\n", printable(spec.source_path).c_str());
  if (!spec.vision) std::printf("text-only model: the vision coefficients are 0\n");
  if (!regime.full_training()) {
    std::string adapters;
    for (const lora_target target : regime.lora_targets)
      adapters += (adapters.empty() ? "" : ",") + std::string(to_string(target));
    std::printf(
        "regime: frozen [%s]%s\n", frozen_list(regime).c_str(),
        regime.lora_rank > 0
            ? (", LoRA rank " + std::to_string(regime.lora_rank) + " on " + adapters + " (base decoder frozen)").c_str()
            : "");
  }
  std::printf("\n  %-25s %22s  %s\n", "coefficient", "value", "meaning");
  for (const entry& e : entries) {
    std::printf("  %-25s %22s  %s\n", e.key, group_digits(e.value).c_str(), e.meaning);
    if (&e != &entries[0]) continue;
    for (const entry& part : parts) {
      if (part.value == 0) continue;  // a family the model does not have
      std::printf("    %-23s %22s  %s\n", part.key, group_digits(part.value).c_str(), part.meaning);
    }
  }
  if (split) {
    std::printf("\n  micro-batches without images or videos: the frozen decoder gets no gradient, forward only\n");
    for (const entry& e : without_entries) {
      std::printf("  %-25s %22s  %s\n", e.key, group_digits(e.value).c_str(), e.meaning);
    }
  }
  return kExitOk;
}

}  // namespace flopmeter::cli
