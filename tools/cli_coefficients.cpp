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
    "usage: flopmeter coefficients MODEL [--json]\n"
    "\n"
    "Prints the exact training FLOPs (forward + backward) per unit of work of one model: FLOPs of a batch =\n"
    "sum of coefficient x count (see `flopmeter estimate`).\n"
    "\n"
    "arguments:\n"
    "  MODEL           a model TOML file, a Hugging Face config.json, a checkpoint directory that holds one,\n"
    "                  or the name of a shipped config (e.g. qwen3_vl_2b)\n"
    "options:\n"
    "  --json          print one JSON object (keys: model, file, dense_per_token, text_attn_pair,\n"
    "                  vision_per_patch, vision_attn_pair, patch_embed_per_patch, merger_per_merged_token,\n"
    "                  mtp_per_token, mtp_attn_pair, patches_per_merged_token, and dense_per_token_breakdown:\n"
    "                  an object whose parts sum to dense_per_token: attention_projections, linear_attention,\n"
    "                  dense_mlp, moe_router, moe_routed_experts, moe_shared_expert, moe_shared_expert_gate, logits)\n"
    "  -h, --help      show this help\n"
    "\n"
    "exit status: 0 on success, 1 when the model file is invalid, 2 for a bad command line.\n";

int run_coefficients(const std::vector<std::string>& args) {
  const parsed_args parsed = parse_args("coefficients", args, {{"--json", false}});
  if (parsed.help) {
    std::fputs(kCoefficientsUsage, stdout);
    return kExitOk;
  }
  if (parsed.positionals.empty()) throw usage_error("coefficients", "missing the MODEL argument");
  if (parsed.positionals.size() > 1) {
    throw usage_error("coefficients", "unexpected argument '" + parsed.positionals[1] + "' (one model only)");
  }
  const model_spec spec = load_model_argument(parsed.positionals[0]);
  const coefficients c = compute_coefficients(spec);

  const detail::coefficient_table table = detail::coefficient_entries(c);
  if (parsed.has("--json")) {
    std::printf("%s\n", detail::coefficients_json(spec, c).c_str());
    return kExitOk;
  }
  std::printf("%s: training FLOPs (forward + backward) per unit\n", printable(spec.name).c_str());
  if (!spec.source_path.empty()) std::printf("file: %s\n", printable(spec.source_path).c_str());
  if (!spec.vision) std::printf("text-only model: the vision coefficients are 0\n");
  std::printf("\n  %-25s %22s  %s\n", "coefficient", "value", "meaning");
  for (const detail::coefficient_entry& e : table.entries) {
    std::printf("  %-25s %22s  %s\n", e.key, group_digits(e.value).c_str(), e.meaning);
    if (&e != &table.entries[0]) continue;
    for (const detail::coefficient_entry& part : table.dense_parts) {
      if (part.value == 0) continue;  // a family the model does not have
      std::printf("    %-23s %22s  %s\n", part.key, group_digits(part.value).c_str(), part.meaning);
    }
  }
  return kExitOk;
}

}  // namespace flopmeter::cli
