// The fixed-size per-log reduction (log_reduction.h): a rank's row -> its SUM and MAX contributions -> the record.
#include "accounting/log_reduction.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "accounting/config_fingerprint.h"
#include "util/exact_double.h"

namespace flopmeter::detail {
namespace {

constexpr double kNone = -std::numeric_limits<double>::infinity();  // the maximum's identity: not reported
constexpr std::size_t kConfigFields = kRowConfigEnd - kRowConfigFirst;

bool is_reported(double value) { return value >= 0 && std::isfinite(value); }

// derive()'s checks of one row, in its order: the first that fails, or -1.
int bad_row(const derive_setup& setup, const double* x) {
  const double t = x[row_interval_seconds];
  if (!(t > 0) || !std::isfinite(t)) return bad_interval;
  for (std::size_t f = 0; f < kRowCountFields; ++f) {
    if (!(x[f] >= 0 && x[f] == std::floor(x[f]))) return bad_count;
    if (!(x[f] < kExactIntegerLimit)) return count_beyond_exact;
  }
  const rank_figures r = rank_figures_of(setup, x);
  if (!std::isfinite(r.tokens_per_second) || !std::isfinite(r.tflops)) return rate_not_finite;
  return -1;
}

derive_setup as_derive_setup(const reduction_setup& setup) {
  derive_setup d;
  d.flop_coefficients = setup.flop_coefficients;
  d.scope = setup.scope;
  d.tp = setup.tp;
  d.cp = setup.cp;
  d.pp = setup.pp;
  return d;
}

}  // namespace

void reduction_identity(double* sums, double* maxima) {
  std::fill(sums, sums + kSumFields, 0.0);
  std::fill(maxima, maxima + kMaxFields, kNone);
}

void reduce_into(const double* sums, const double* maxima, double* total_sums, double* total_maxima) {
  for (std::size_t i = 0; i < kSumFields; ++i) total_sums[i] += sums[i];
  // NaN wins, as a broken value must not vanish in a maximum (std::max would keep either side).
  for (std::size_t i = 0; i < kMaxFields; ++i) {
    if (std::isnan(maxima[i]) || maxima[i] > total_maxima[i]) total_maxima[i] = maxima[i];
  }
}

void contribute(const reduction_setup& setup, const double* x, std::int64_t rank, double* sums, double* maxima) {
  reduction_identity(sums, maxima);
  sums[sum_ranks] = 1;
  sums[sum_rank_ids] = static_cast<double>(rank);
  // The protocol's agreement figures (log_protocol::resolve_reduced).
  maxima[max_step] = x[row_step];
  maxima[neg_min_step] = -x[row_step];
  maxima[max_sequence] = x[row_present];
  maxima[neg_min_sequence] = -x[row_present];
  for (std::size_t i = 0; i < kConfigFields; ++i) {
    maxima[max_config_first + i] = x[kRowConfigFirst + i];
    maxima[max_config_first + kConfigFields + i] = -x[kRowConfigFirst + i];
  }
  bool seen_anything =
      x[row_tokens_seen] != 0 || x[row_samples_seen] != 0 || x[row_microbatches] != 0 || x[row_device_rejected] != 0;
  for (std::size_t f = 0; f < kRowCountFields; ++f) seen_anything = seen_anything || x[f] != 0;
  maxima[max_not_warm_up] = seen_anything ? 1.0 : 0.0;

  const derive_setup d = as_derive_setup(setup);
  if (const int bad = bad_row(d, x); bad >= 0) {
    // The first such rank (and its first failed check) is the largest -(4 r + check).
    maxima[max_bad_row] = -static_cast<double>(4 * rank + bad);
    return;  // its figures are not numbers: the interval is skipped on every rank
  }
  const rank_figures f = rank_figures_of(d, x);
  const double t = x[row_interval_seconds];
  sums[sum_tps] = f.tokens_per_second;
  sums[sum_tflops] = f.tflops;
  sums[sum_megatron_tflops] = f.megatron_tflops;
  sums[sum_hardware_tflops] = f.hardware_tflops;
  maxima[max_rank_hardware_tflops] = f.hardware_tflops;
  const bool step_known = std::isfinite(f.step_time);
  sums[sum_step_time] = step_known ? f.step_time : 0.0;
  sums[sum_step_ranks] = step_known ? 1.0 : 0.0;
  maxima[max_rank_tflops] = f.tflops;
  if (is_reported(x[row_peak_memory_bytes])) {
    sums[sum_mem_ranks] = 1;
    maxima[max_memory] = x[row_peak_memory_bytes];
  }
  if (is_reported(x[row_peak_reserved_memory_bytes])) {
    sums[sum_reserved_ranks] = 1;
    maxima[max_reserved_memory] = x[row_peak_reserved_memory_bytes];
  }
  if (is_reported(x[row_data_seconds])) {
    sums[sum_data_ranks] = 1;
    maxima[max_data_seconds] = x[row_data_seconds];
    maxima[max_data_pct] = x[row_data_seconds] / t * 100.0;
  }
  if (is_reported(x[row_forward_backward_seconds])) {
    sums[sum_forward_backward_ranks] = 1;
    maxima[max_forward_backward_seconds] = x[row_forward_backward_seconds];
  }
  const double wait = x[row_log_wait_ms];
  maxima[max_log_wait_ms] = std::isfinite(wait) && wait > 0 ? wait : 0.0;
  if (!setup.in_dp_sums) return;
  // The DP sums over rank 0's DP group: one rank of each tp/cp/pp replica.
  headline_figures dp;
  dp.add_dp_rank(x);
  sums[sum_dp_real_tokens] = dp.real;
  sums[sum_dp_device_tokens] = dp.device;
  sums[sum_dp_loss] = dp.loss;
  sums[sum_dp_label_tokens] = dp.labels;
  sums[sum_dp_tokens_seen] = dp.tokens_seen;
  sums[sum_dp_samples_seen] = dp.samples_seen;
  sums[sum_dp_label_tokens_seen] = dp.labels_seen;
  if (dp.max_loss) maxima[max_dp_loss] = *dp.max_loss;
  maxima[max_dp_tokens_seen] = x[row_tokens_seen];
  maxima[max_dp_samples_seen] = x[row_samples_seen];
  maxima[max_dp_label_tokens_seen] = x[row_label_tokens_seen];
  maxima[neg_min_dp_tokens_seen] = -x[row_tokens_seen];
  maxima[neg_min_dp_samples_seen] = -x[row_samples_seen];
  maxima[neg_min_dp_label_tokens_seen] = -x[row_label_tokens_seen];
  sums[sum_dp_flops_seen_0] = dp.flops_seen.limbs[0];
  sums[sum_dp_flops_seen_1] = dp.flops_seen.limbs[1];
  sums[sum_dp_flops_seen_2] = dp.flops_seen.limbs[2];
  maxima[max_dp_flops_seen_limb] = dp.flops_seen.largest_limb;
  maxima[neg_min_dp_flops_seen_limb] = -dp.flops_seen.smallest_limb;
}

derive_result reduced_record(const derive_setup& setup, const double* s, const double* m, std::int64_t world,
                             const derive_context& context) {
  derive_result result;
  if (m[max_bad_row] > kNone) {
    const auto code = static_cast<std::int64_t>(-m[max_bad_row]);
    const std::string rank = "rank " + std::to_string(code / 4);
    switch (static_cast<int>(code % 4)) {
      case bad_interval:
        result.why = rank + " reported an interval that is not a positive finite number of seconds";
        break;
      case bad_count:
        result.why = rank + " reported a count that is not a finite non-negative integer (a corrupt row)";
        break;
      case count_beyond_exact:
        result.why = rank + " reported a count in one interval beyond the 2^53 a row carries exactly";
        break;
      default: result.why = rank + " reported an interval too short for its rates to be finite numbers";
    }
    return result;
  }
  headline_figures h;
  h.sum_tps = s[sum_tps];
  h.sum_tflops = s[sum_tflops];
  h.sum_megatron_tflops = s[sum_megatron_tflops];
  h.sum_hardware_tflops = s[sum_hardware_tflops];
  h.sum_step = s[sum_step_time];
  h.step_time_known = s[sum_step_ranks] == static_cast<double>(world);
  const auto count = [&](sum_field f) { return static_cast<std::size_t>(s[f]); };
  h.mem_ranks = count(sum_mem_ranks);
  h.reserved_ranks = count(sum_reserved_ranks);
  h.data_ranks = count(sum_data_ranks);
  h.fwd_bwd_ranks = count(sum_forward_backward_ranks);
  const auto reported_max = [&](max_field f) { return m[f] > kNone ? m[f] : 0.0; };
  h.max_mem = reported_max(max_memory);
  h.max_reserved = reported_max(max_reserved_memory);
  h.max_data = reported_max(max_data_seconds);
  h.max_data_pct = reported_max(max_data_pct);
  h.max_fwd_bwd = reported_max(max_forward_backward_seconds);
  h.max_wait = reported_max(max_log_wait_ms);
  h.fastest_tflops = m[max_rank_tflops];
  h.fastest_hardware_tflops = m[max_rank_hardware_tflops];
  h.real = s[sum_dp_real_tokens];
  h.device = s[sum_dp_device_tokens];
  h.loss = s[sum_dp_loss];
  h.labels = s[sum_dp_label_tokens];
  h.tokens_seen = s[sum_dp_tokens_seen];
  h.samples_seen = s[sum_dp_samples_seen];
  h.labels_seen = s[sum_dp_label_tokens_seen];
  h.flops_seen.limbs[0] = s[sum_dp_flops_seen_0];
  h.flops_seen.limbs[1] = s[sum_dp_flops_seen_1];
  h.flops_seen.limbs[2] = s[sum_dp_flops_seen_2];
  h.flops_seen.smallest_limb = -m[neg_min_dp_flops_seen_limb];
  h.flops_seen.largest_limb = m[max_dp_flops_seen_limb];
  h.flops_seen.any_row = true;
  if (m[max_dp_loss] > kNone) h.max_loss = m[max_dp_loss];
  const auto exact = [&](max_field largest, max_field negated_smallest) {
    return m[largest] < kExactIntegerLimit && -m[negated_smallest] >= 0;
  };
  h.tokens_seen_exact = exact(max_dp_tokens_seen, neg_min_dp_tokens_seen);
  h.samples_seen_exact = exact(max_dp_samples_seen, neg_min_dp_samples_seen);
  h.labels_seen_exact = exact(max_dp_label_tokens_seen, neg_min_dp_label_tokens_seen);
  headline_record(setup, h, world, context, result);
  return result;
}

std::string describe_reduced_differences(const double* m) {
  static constexpr const char* kNames[kConfigFields] = {
      "model name",    "model name",    "model name",    "model coefficients", "scope",
      "[parallel] tp", "[parallel] cp", "[parallel] pp", "rank order",         "tpi_multiplier",
      "what trains",   "LoRA targets",  "recompute"};
  static_assert(kConfigFields == 13, "name every fingerprint field");
  std::string out;
  for (std::size_t i = 0; i < kConfigFields; ++i) {
    const double largest = m[max_config_first + i], smallest = -m[max_config_first + kConfigFields + i];
    if (largest == smallest) continue;
    if (!out.empty() && out.find(kNames[i]) != std::string::npos) continue;  // the name's three fields
    out += (out.empty() ? "" : "; ") + std::string(kNames[i]) + fmt::format(" from {} to {}", smallest, largest);
  }
  return out;
}

}  // namespace flopmeter::detail
