// `flopmeter estimate`: exact training FLOPs of a described micro-batch (count_from_lengths + compute_flops),
// and how far the Megatron per-token constant would be off for it.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "cli.h"
#include "count/count_fields.h"
#include "flopmeter/error.h"
#include "flopmeter/flop_model.h"
#include "flopmeter/megatron.h"
#include "output/model_report.h"

namespace flopmeter::cli {

const char* const kEstimateUsage =
    "usage: flopmeter estimate MODEL --docs L1,L2,... [--padding N] [--images TxHxW,...]\n"
    "                          [--scope seed|complete] [--seq-len S] [--frozen PARTS]\n"
    "                          [--lora-rank R --lora-targets NAMES]\n"
    "                          [--recompute POLICY [--recompute-layers N | --recompute-every K]\n"
    "                           [--recompute-vision]] [--indexer-trains] [--json]\n"
    "\n"
    "Exact training FLOPs (forward + backward) of one packed micro-batch, term by term, and what the Megatron\n"
    "per-token constant at row length S would report for the same batch:\n"
    "  constant FLOPs = text_per_token(S) x (real + padding tokens) + vision_per_token(S) x patches.\n"
    "\n"
    "arguments:\n"
    "  MODEL             a model TOML file, a Hugging Face config.json or a checkpoint directory that holds\n"
    "                    one, or the name of a shipped config (e.g. qwen3_vl_2b)\n"
    "options:\n"
    "  --docs L1,L2,...  document lengths in tokens, comma-separated integers >= 0 (required)\n"
    "  --padding N       padding tokens the device also ran, an integer >= 0 (default 0)\n"
    "  --images TxHxW,...\n"
    "                    images/videos as grids in patches, written TxHxW (e.g. 1x32x32 for an image,\n"
    "                    4x16x16 for a video of 4 temporal patches); H and W must be multiples of the\n"
    "                    model's spatial_merge_size\n"
    "  --scope S         seed: the reference trainer's four terms, ViT attention over the whole item;\n"
    "                    complete (default): + patch embedding, mergers, ViT attention per temporal patch,\n"
    "                    MTP layers when trained\n"
    "  --frozen PARTS    the parts that do not train, comma-separated: vision, merger, text (see\n"
    "                    `flopmeter coefficients --help`); the terms are the regime's, the constant stays in\n"
    "                    its full-training form\n"
    "  --lora-rank R, --lora-targets NAMES\n"
    "                    LoRA adapters of rank R on the named decoder projections (base decoder frozen)\n"
    FLOPMETER_CLI_RECOMPUTE_HELP("                    ")
    "  --seq-len S       row length of the constant (default: real + padding tokens); with --scope seed the\n"
    "                    constant leaves out MTP layers, as the seed scope does\n"
    "  --json            print one JSON object (keys: model, file, scope, frozen, lora_rank, flops, text_dense, "
    "text_attention,\n"
    "                    vision_dense, vision_attention, patch_embed, merger, mtp, hardware_flops (flops + the\n"
    "                    recomputed forward), recompute{settings, text_dense, text_attention, vision_dense,\n"
    "                    vision_attention, total}, counts{real_tokens,\n"
    "                    padding_tokens, documents, causal_pairs, items, patches, merged_tokens,\n"
    "                    vision_pairs_per_frame, vision_pairs_whole, window_pairs_0, window_pairs_1},\n"
    "                    row_length, megatron_text_per_token,\n"
    "                    megatron_vision_per_token, megatron_flops, megatron_over_exact)\n"
    "  -h, --help        show this help\n"
    "\n"
    "exit status: 0 on success, 1 when the model file or the batch is invalid (e.g. images for a text-only\n"
    "model), 2 for a bad command line.\n";

namespace {

// What the command line asks for.
struct estimate_request {
  std::string model;
  std::vector<std::int64_t> docs;
  std::int64_t padding = 0;
  std::vector<image_grid> grids;
  flop_scope scope = flop_scope::complete;
  training_regime regime;
  std::int64_t seq_len = 0;  // 0 = not given (a given --seq-len is >= 1)
  bool json = false;
};

using detail::estimate_result;

// The command line, or std::nullopt after printing --help.
std::optional<estimate_request> parse_request(const std::vector<std::string>& args) {
  const std::string cmd = "estimate";
  const parsed_args parsed = parse_args(cmd, args,
                                        with_regime_options({{"--docs", true},
                                                             {"--padding", true},
                                                             {"--images", true},
                                                             {"--scope", true},
                                                             {"--seq-len", true},
                                                             {"--json", false}}));
  if (parsed.help) {
    std::fputs(kEstimateUsage, stdout);
    return std::nullopt;
  }
  if (parsed.positionals.empty()) throw usage_error(cmd, "missing the MODEL argument");
  if (parsed.positionals.size() > 1) {
    throw usage_error(cmd, "unexpected argument '" + parsed.positionals[1] + "' (one model only)");
  }
  estimate_request request;
  request.model = parsed.positionals[0];
  const std::optional<std::string> docs_text = parsed.single("--docs");
  if (!docs_text) throw usage_error(cmd, "missing --docs L1,L2,... (the document lengths in tokens)");
  request.docs = parse_length_list(cmd, "--docs", *docs_text);
  if (const std::optional<std::string> padding_text = parsed.single("--padding")) {
    request.padding = parse_non_negative_int(cmd, "--padding", *padding_text);
  }
  if (const std::optional<std::string> images_text = parsed.single("--images")) {
    request.grids = parse_grid_list(cmd, "--images", *images_text);
  }
  if (const std::optional<std::string> scope_text = parsed.single("--scope")) {
    request.scope = parse_scope_option(cmd, *scope_text);
  }
  if (const std::optional<std::string> seq_len_text = parsed.single("--seq-len")) {
    request.seq_len = parse_positive_int(cmd, "--seq-len", *seq_len_text);
  }
  request.regime = parse_regime_options(parsed);
  request.json = parsed.has("--json");
  return request;
}

estimate_result compute_estimate(const estimate_request& request) {
  const model_spec spec = load_model_argument(request.model);
  batch_counts counts;
  try {
    counts = count_from_lengths(request.docs, request.padding, request.grids, geometry_of(spec));
  } catch (const error& e) {
    throw error(e.where(), "invalid batch (--docs/--padding/--images) for model " + spec.name + ": " + e.description());
  }
  return detail::estimate_batch(spec, counts, request.scope, request.seq_len, request.regime);
}

// What a count is, beside it in the text output ("" for the plain ones).
std::string count_note(std::int64_t batch_counts::*member, const estimate_result& r) {
  if (member == &batch_counts::causal_pairs) return "sum of L(L+1)/2";
  if (member == &batch_counts::patches) return "sum of t*h*w";
  if (member == &batch_counts::merged_tokens) {
    return "patches / " + std::to_string(r.c.with_items.patches_per_merged_token);
  }
  if (member == &batch_counts::vision_pairs_per_frame) return "sum of t*(h*w)^2 (complete scope)";
  if (member == &batch_counts::vision_pairs_whole) return "sum of (t*h*w)^2 (seed scope)";
  return "";
}

void print_text(const estimate_request& request, const estimate_result& r) {
  const batch_counts& n = r.n;
  const flop_breakdown& f = r.f;
  const char* scope = to_string(request.scope);
  std::printf("%s, scope %s: training FLOPs (forward + backward) of this micro-batch\n", printable(r.spec.name).c_str(),
              scope);
  if (!request.regime.full_training()) {
    std::printf("regime: frozen [%s], LoRA rank %lld (the Megatron constant below stays full training)\n",
                frozen_list(request.regime).c_str(), static_cast<long long>(request.regime.lora_rank));
  }
  std::printf("\n");
  std::printf("counts\n");
  for (std::size_t i = 0; i < detail::kReportedCountFields; ++i) {
    const detail::count_field& field = detail::kCountFields[i];
    const std::string note = count_note(field.member, r);
    const std::string suffix = note.empty() ? std::string() : "   " + note;
    std::printf("  %-24s %20s%s\n", std::string(field.name).c_str(), group_digits(n.*field.member).c_str(),
                suffix.c_str());
  }

  std::printf("\nFLOPs per term\n");
  const struct {
    const char* name;
    double value;
  } terms[] = {{"text_dense", f.text_dense},
               {"text_attention", f.text_attention},
               {"vision_dense", f.vision_dense},
               {"vision_attention", f.vision_attention},
               {"patch_embed", f.patch_embed},
               {"merger", f.merger},
               {"mtp", f.mtp}};
  for (const auto& term : terms) {
    std::printf("  %-24s %20s   %s\n", term.name, short_number(term.value).c_str(), si_flops(term.value).c_str());
  }
  std::printf("  %-24s %20s   %s\n", "total", short_number(r.exact).c_str(), si_flops(r.exact).c_str());
  if (request.regime.recompute.policy != recompute_policy::none) {
    const flop_breakdown::recompute_flops& re = f.recompute;
    std::printf("\nrecompute %s: the forward run again in the backward (hardware FLOPs, beside the model FLOPs)\n",
                to_string(request.regime.recompute.policy));
    const struct {
      const char* name;
      double value;
    } recomputed[] = {{"text_dense", re.text_dense},
                      {"text_attention", re.text_attention},
                      {"vision_dense", re.vision_dense},
                      {"vision_attention", re.vision_attention}};
    for (const auto& term : recomputed) {
      std::printf("  %-24s %20s   %s\n", term.name, short_number(term.value).c_str(), si_flops(term.value).c_str());
    }
    const double hardware = f.hardware_total();
    std::printf("  %-24s %20s   %s\n", "hardware total", short_number(hardware).c_str(), si_flops(hardware).c_str());
  }

  std::printf("\nMegatron per-token constant\n");
  if (!r.constant) {
    std::printf("  the batch has no tokens; pass --seq-len S to compare with the constant at row length S\n");
    return;
  }
  std::printf("  row length S = %lld%s\n", static_cast<long long>(r.row_length),
              request.seq_len > 0 ? " (--seq-len)" : " (real + padding tokens)");
  std::printf("  text %s FLOPs/token x %lld tokens + vision %s FLOPs/token x %lld patches = %s (%s)\n",
              short_number(r.constant->text_per_token()).c_str(), static_cast<long long>(n.device_tokens()),
              short_number(r.constant->vision_per_token()).c_str(), static_cast<long long>(n.patches),
              short_number(r.megatron_flops).c_str(), si_flops(r.megatron_flops).c_str());
  if (std::isfinite(r.over_exact)) {
    std::printf("  the per-token constant at S=%lld would report %s the work this batch did (%s scope)\n",
                static_cast<long long>(r.row_length), ratio_text(r.over_exact).c_str(), scope);
  } else {
    std::printf("  the batch did no counted work, so there is no ratio to report\n");
  }
}

}  // namespace

int run_estimate(const std::vector<std::string>& args) {
  const std::optional<estimate_request> request = parse_request(args);
  if (!request) return kExitOk;  // --help
  const estimate_result result = compute_estimate(*request);
  if (request->json) {
    std::printf("%s\n", detail::estimate_json(result).c_str());
  } else {
    print_text(*request, result);
  }
  return kExitOk;
}

}  // namespace flopmeter::cli
