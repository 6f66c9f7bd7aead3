// `flopmeter check`: the term-by-term sanity check of the exact FLOP model against the Megatron per-token
// constant (run_sanity_check), for each model and row length.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cli.h"
#include "flopmeter/error.h"
#include "flopmeter/flop_model.h"
#include "flopmeter/megatron.h"
#include "output/model_report.h"

namespace flopmeter::cli {

const char* const kCheckUsage =
    "usage: flopmeter check [MODEL ...] [--seq-len S]... [--frozen PARTS] [--json]\n"
    "\n"
    "Compares the exact FLOP model with the Megatron per-token constant, term by term, for every model and\n"
    "row length S: the dense coefficients must equal the constant's token-linear part, pair coefficient x S/2\n"
    "its attention part, and one S-token document (one S-patch image) must differ from constant x S by the\n"
    "ratio the derivation predicts: (S+1)/S for causal text attention, 2 for bidirectional ViT attention.\n"
    "\n"
    "arguments:\n"
    "  MODEL           model TOML files, config.json files, checkpoint directories holding one, or names of\n"
    "                  shipped configs (e.g. qwen3_vl_2b); default: every *.toml in\n"
    "                  the model configs directory ($FLOPMETER_MODEL_CONFIGS, else the installed or source\n"
    "                  tree's model_configs/), sorted by name\n"
    "options:\n"
    "  --seq-len S     row length, a positive integer; repeat for several (default: 4096, 8192 and 32768)\n"
    "  --frozen PARTS  the parts that do not train (vision, merger, text, comma-separated): the check stays a\n"
    "                  full-training comparison (the constant knows no frozen parts) and also prints, per\n"
    "                  term, the regime's factor: regime coefficient / full-training coefficient, the\n"
    "                  documented difference between what the regime runs and what the constant bills\n"
    "  --json          print a JSON array with one object per (model, S); with --frozen each has\n"
    "                  regime {frozen, factors{term: factor}, factors_without_items{...}}\n"
    "  -h, --help      show this help\n"
    "\n"
    "exit status: 0 when every check passes, 1 when a check disagrees or a model file is invalid,\n"
    "2 for a bad command line.\n";

namespace {

// The regime's factor per term: its coefficient over the full-training one (1 where both are 0).
struct regime_factor {
  const char* term;
  double with_items;
  double without_items;
};
std::vector<regime_factor> regime_factors(const model_spec& spec, const training_regime& regime) {
  const coefficients full = compute_coefficients(spec);
  const regime_coefficients rc = compute_coefficients(spec, regime);
  const auto ratio = [](std::int64_t part, std::int64_t whole) {
    return whole == 0 ? 1.0 : static_cast<double>(part) / static_cast<double>(whole);
  };
  const auto row = [&](const char* term, std::int64_t coefficients::*field) {
    return regime_factor{term, ratio(rc.with_items.*field, full.*field), ratio(rc.without_items.*field, full.*field)};
  };
  std::vector<regime_factor> factors = {row("dense_per_token", &coefficients::dense_per_token),
                                        row("text_attn_pair", &coefficients::text_attn_pair),
                                        row("vision_per_patch", &coefficients::vision_per_patch),
                                        row("vision_attn_pair", &coefficients::vision_attn_pair),
                                        row("patch_embed_per_patch", &coefficients::patch_embed_per_patch),
                                        row("merger_per_merged_token", &coefficients::merger_per_merged_token),
                                        row("mtp_per_token", &coefficients::mtp_per_token),
                                        row("mtp_attn_pair", &coefficients::mtp_attn_pair)};
  // A windowed model: each window's pair coefficient too (listed only for the windows the model has).
  static const char* const kWindowTerms[] = {"window_attn_pair[0]", "window_attn_pair[1]"};
  for (std::int64_t k = 0; k < geometry_of(spec).window_count; ++k) {
    factors.push_back({kWindowTerms[k], ratio(rc.with_items.window_attn_pair[k], full.window_attn_pair[k]),
                       ratio(rc.without_items.window_attn_pair[k], full.window_attn_pair[k])});
  }
  return factors;
}

std::string regime_factors_json(const training_regime& regime, const std::vector<regime_factor>& factors) {
  json_object with, without;
  for (const regime_factor& f : factors) {
    with.number(f.term, f.with_items);
    without.number(f.term, f.without_items);
  }
  json_object object;
  object.raw("frozen", detail::frozen_json(regime))
      .raw("factors", with.str())
      .raw("factors_without_items", without.str());
  return object.str();
}

void print_regime(const training_regime& regime, const std::vector<regime_factor>& factors) {
  std::printf("  regime frozen [%s]: the constant above bills full training; per term, the regime runs\n",
              frozen_list(regime).c_str());
  std::printf("  %-26s %18s %22s\n", "term", "x full (items)", "x full (no items)");
  for (const regime_factor& f : factors) {
    std::printf("  %-26s %18.6f %22.6f\n", f.term, f.with_items, f.without_items);
  }
  std::printf("\n");
}

void print_report(const check_report& report, const std::string& source) {
  const megatron_constant& k = report.constant;
  std::printf("%s  S=%lld  %s\n", printable(report.model).c_str(), static_cast<long long>(report.seq_len),
              report.pass ? "PASS" : "FAIL");
  if (!source.empty()) std::printf("  file: %s\n", printable(source).c_str());
  const std::string lead = "  Megatron constant per token at S=" + std::to_string(report.seq_len) + ": ";
  std::printf("%stext   %s (token-linear %s + attention %s)\n", lead.c_str(), short_number(k.text_per_token()).c_str(),
              short_number(k.text_linear_per_token).c_str(), short_number(k.text_attention_per_token).c_str());
  std::printf("%*svision %s (token-linear %s + attention %s)\n", static_cast<int>(lead.size()), "",
              short_number(k.vision_per_token()).c_str(), short_number(k.vision_linear_per_token).c_str(),
              short_number(k.vision_attention_per_token).c_str());
  if (k.text_moe_routed_per_token > 0) {
    std::printf("%*sMoE    routed experts %s + shared expert %s (in token-linear); router + shared-expert gate %s "
                "counted by flopmeter, not billed by Megatron\n",
                static_cast<int>(lead.size()), "", short_number(k.text_moe_routed_per_token).c_str(),
                short_number(k.text_moe_shared_per_token).c_str(), short_number(k.text_moe_unbilled_per_token).c_str());
  }
  std::size_t term_width = 4;
  for (const check_row& row : report.rows) term_width = std::max(term_width, row.term.size());
  const int width = static_cast<int>(term_width);
  std::printf("  %-*s  %13s  %13s  %12s  %12s  %9s  %s\n", width, "term", "exact", "megatron", "expected", "measured",
              "rel.err", "result");
  for (const check_row& row : report.rows) {
    char rel_error[32];
    std::snprintf(rel_error, sizeof rel_error, "%.2e", row.relative_error);
    char expected[32];
    char measured[32];
    std::snprintf(expected, sizeof expected, "%.9g", row.expected_ratio);
    std::snprintf(measured, sizeof measured, "%.9g", row.ratio);
    std::printf("  %-*s  %13s  %13s  %12s  %12s  %9s  %s\n", width, row.term.c_str(), short_number(row.exact).c_str(),
                short_number(row.megatron).c_str(), expected, measured, rel_error, row.pass ? "PASS" : "FAIL");
    std::printf("  %-*s  (%s)\n", width, "", row.explanation.c_str());
  }
  std::printf("\n");
}

}  // namespace

int run_check(const std::vector<std::string>& args) {
  const parsed_args parsed = parse_args("check", args, {{"--seq-len", true}, {"--frozen", true}, {"--json", false}});
  if (parsed.help) {
    std::fputs(kCheckUsage, stdout);
    return kExitOk;
  }
  std::vector<std::int64_t> seq_lens;
  for (const std::string& value : parsed.all("--seq-len")) {
    seq_lens.push_back(parse_positive_int("check", "--seq-len", value));
  }
  if (seq_lens.empty()) seq_lens = {4096, 8192, 32768};
  const bool json = parsed.has("--json");
  const training_regime regime = parse_regime_options(parsed);
  const bool with_regime = !regime.full_training();

  // Load every model first, so a bad file fails before any output.
  std::vector<model_spec> specs;
  if (parsed.positionals.empty()) {
    for (const std::string& file : default_model_files()) specs.push_back(load_model_argument(file));
  } else {
    for (const std::string& argument : parsed.positionals) specs.push_back(load_model_argument(argument));
  }

  std::vector<check_report> reports;
  std::vector<std::string> sources;
  std::vector<std::vector<regime_factor>> factors;
  for (const model_spec& spec : specs) {
    std::vector<regime_factor> model_factors;
    if (with_regime) {
      try {
        model_factors = regime_factors(spec, regime);
      } catch (const error& e) {
        throw error(e.where(), "--frozen for " + spec.name + ": " + e.description());
      }
    }
    for (const std::int64_t seq_len : seq_lens) {
      try {
        reports.push_back(run_sanity_check(spec, seq_len));
      } catch (const error& e) {
        throw error(e.where(), "check of " + spec.name + " at S=" + std::to_string(seq_len) + ": " + e.description());
      }
      sources.push_back(spec.source_path);
      factors.push_back(model_factors);
    }
  }

  std::size_t failed = 0;
  for (const check_report& report : reports) failed += report.pass ? 0 : 1;
  if (json) {
    std::string out = "[";
    for (std::size_t i = 0; i < reports.size(); ++i) {
      std::string one = detail::check_report_json(reports[i]);
      if (with_regime)
        one = one.substr(0, one.size() - 1) + ", \"regime\": " + regime_factors_json(regime, factors[i]) + "}";
      out += (i == 0 ? "\n  " : ",\n  ") + one;
    }
    out += reports.empty() ? "]\n" : "\n]\n";
    std::fputs(out.c_str(), stdout);
  } else {
    for (std::size_t i = 0; i < reports.size(); ++i) {
      print_report(reports[i], sources[i]);
      if (with_regime) print_regime(regime, factors[i]);
    }
    if (failed == 0) {
      std::printf("all %zu (model, S) checks pass: the exact FLOP model and the Megatron constant agree term by term\n",
                  reports.size());
    } else {
      std::printf("%zu of %zu (model, S) checks FAIL: see the rows marked FAIL above\n", failed, reports.size());
    }
  }
  return failed == 0 ? kExitOk : kExitFailure;
}

}  // namespace flopmeter::cli
