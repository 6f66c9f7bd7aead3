// plugin/output/model_report.h — internal (not installed): the FLOP model's two reports as the `flopmeter`
// tool prints them with --json, in one place, so that the CLI and the C ABI (and through it the Python
// package's FlopModel.coefficients and FlopModel.estimate) give the same keys and the same numbers.
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "flopmeter/flop_model.h"
#include "flopmeter/megatron.h"
#include "flopmeter/model_spec.h"

namespace flopmeter::detail {

// A report as values: one entry per leaf of its JSON object, in the object's order. `key` is the path of the
// leaf, its components joined by '/', an array element's component being its index ("windows/0/kind",
// "frozen/1"); an empty array is one entry of kind empty_list at the array's path. The JSON text of a report
// (report_json) and its values across the C ABI (flopmeter_model_coefficients, flopmeter_model_estimate) are
// both made from these entries, so they cannot disagree.
enum class report_kind { integer, number, boolean, text, empty_list };  // FLOPMETER_VALUE_*'s order
struct report_entry {
  std::string key;
  report_kind kind = report_kind::integer;
  std::int64_t integer = 0;  // integer; boolean as 0 or 1
  double number = 0;         // number (non-finite: JSON null)
  std::string text;          // text
};
using report_entries = std::vector<report_entry>;

// The entries as one JSON object on one line ({"a": 1, "b": [2, 3], "c": {"d": true}}), numbers written by
// the one JSON writer (output/json_writer.h).
std::string report_json(const report_entries& entries);

// One coefficient of `flopmeter coefficients`, with what it means (the text table prints the meaning).
struct coefficient_entry {
  const char* key;
  std::int64_t value;
  const char* meaning;
};

// The coefficients of the top level, in the order of the JSON object.
struct coefficient_table {
  coefficient_entry entries[11];
  coefficient_entry dense_parts[9];  // dense_per_token by GEMM family; the parts sum to it exactly
};
coefficient_table coefficient_entries(const coefficients& c);

// `flopmeter coefficients MODEL --json`: model, file (when the spec came from one), the training regime
// (frozen, lora_rank, lora_targets), the regime's coefficients and dense_per_token_breakdown, recompute (the
// settings, the recompute coefficients and text_per_token_breakdown), and when a frozen decoder bills
// micro-batches without images differently, without_items (their text coefficients).
std::string coefficients_json(const model_spec& spec, const regime_coefficients& c, const training_regime& regime = {});
report_entries coefficients_report(const model_spec& spec, const regime_coefficients& c,
                                   const training_regime& regime = {});
// The four text coefficients a micro-batch without images may be billed with (regime_coefficients).
struct itemless_table {
  bool differs = false;  // from the with-items coefficients: only then are they reported
  coefficient_entry entries[6];
};
itemless_table itemless_entries(const regime_coefficients& c);
// The recompute coefficients (coefficients::recompute): the four per unit and text_per_token by GEMM family.
struct recompute_table {
  coefficient_entry entries[4];
  coefficient_entry dense_parts[8];
};
recompute_table recompute_entries(const coefficients& c);
// The frozen parts as a JSON array of strings (["vision", "merger"], [] when nothing is frozen).
std::string frozen_json(const training_regime& regime);
// "sliding" / "chunked".
const char* window_kind_name(window_kind kind);

// The exact count of one micro-batch and the Megatron constant's view of the same batch.
struct estimate_result {
  model_spec spec;
  training_regime regime;  // what trains: the terms are the regime's, the Megatron constant stays full training
  regime_coefficients c;
  flop_scope scope = flop_scope::complete;
  batch_counts n;
  flop_breakdown f;
  double exact = 0;
  std::int64_t row_length = 0;  // the constant's row length: the seq_len asked for, else the device tokens
  std::optional<megatron_constant> constant;  // none when there is no row length (no tokens, no seq_len)
  double megatron_flops = std::numeric_limits<double>::quiet_NaN();
  double over_exact = std::numeric_limits<double>::quiet_NaN();
};

// `seq_len` 0: the row length is the batch's device tokens. With the seed scope the constant leaves out MTP
// layers, as the seed scope does, so that megatron_over_exact compares like with like.
estimate_result estimate_batch(const model_spec& spec, const batch_counts& counts, flop_scope scope,
                               std::int64_t seq_len, const training_regime& regime = {});

// `flopmeter estimate MODEL ... --json`.
std::string estimate_json(const estimate_result& r);
report_entries estimate_report(const estimate_result& r);

// One (model, S) report of `flopmeter check --json` (run_sanity_check): the constant's parts, then a row per term.
std::string check_report_json(const check_report& report);

}  // namespace flopmeter::detail
