// Metric derivation: gathered rows + context -> one metrics record (derive.h). The formulas and why they are
// honest (sums, never averages of ratios) are in METRICS.md; each line below says which.
#include "accounting/derive.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <string>
#include <utility>

#include "flopmeter/error.h"
#include "flopmeter/megatron.h"
#include "flopmeter/metric_names.h"
#include "accounting/row_layout.h"
#include "util/exact_double.h"

namespace flopmeter::detail {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kInverseGiB = 1.0 / kGiB;

// A wait a row carries, or 0 when it is not a positive finite number.
double reported(double value) { return std::isfinite(value) && value > 0 ? value : 0.0; }

// A time or memory figure the trainer reported (>= 0; kNotReported and anything else negative or NaN: not).
bool is_reported(double value) { return value >= 0 && std::isfinite(value); }

std::string format_number(double value) {
  // The message only: "%g" keeps 1e+16 readable.
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

}  // namespace

checked_log check_log_fields(const log_event& event) {
  checked_log out{event, {}};
  const auto drop = [&](const char* name, double value, const char* unit, const char* rule) {
    out.dropped +=
        (out.dropped.empty() ? "" : ", ") + std::string(name) + " " + format_number(value) + unit + " (" + rule + ")";
  };
  const auto check_rate = [&](std::optional<double>& field, const char* name) {
    if (field && !(std::isfinite(*field) && *field >= 0)) {
      drop(name, *field, "", "must be finite and >= 0");
      field.reset();
    }
  };
  check_rate(out.event.learning_rate, "learning_rate");
  check_rate(out.event.grad_norm, "grad_norm");
  const auto check_time = [&](std::optional<std::chrono::duration<double>>& field, const char* name) {
    if (!field) return;
    const double seconds = field->count();
    if (!(std::isfinite(seconds) && seconds >= 0 && seconds <= kMaxLogSeconds)) {
      drop(name, seconds, " s", "must be finite and in [0, 1e6] s");
      field.reset();
    }
  };
  check_time(out.event.data_time, "data_time");
  check_time(out.event.forward_backward_time, "forward_backward_time");
  const auto check_bytes = [&](std::optional<std::int64_t>& field, const char* name) {
    if (field && !(*field >= 0 && static_cast<double>(*field) < kExactIntegerLimit)) {
      drop(name, static_cast<double>(*field), "", "must be in [0, 2^53)");
      field.reset();
    }
  };
  check_bytes(out.event.peak_memory_bytes, "peak_memory_bytes");
  check_bytes(out.event.peak_reserved_memory_bytes, "peak_reserved_memory_bytes");
  return out;
}

void check_loss_pair(const std::optional<double>& loss_sum, const std::optional<std::int64_t>& label_tokens) {
  if (!loss_sum) return;  // label_tokens alone: no loss reported, nothing to skew
  if (!label_tokens) {
    throw error("loss_sum " + format_number(*loss_sum) +
                " without label_tokens: train/loss is the sum of loss_sum over the sum of label_tokens");
  }
  if (*label_tokens == 0 && *loss_sum != 0) {
    throw error("loss_sum " + format_number(*loss_sum) + " over 0 label tokens (a sum over no tokens is 0)");
  }
}

void check_label_tokens_within(const std::optional<double>& loss_sum, const std::optional<std::int64_t>& label_tokens,
                               std::int64_t real_tokens) {
  if (!loss_sum || !label_tokens || *label_tokens <= real_tokens) return;
  throw error("label_tokens " + std::to_string(*label_tokens) + " exceeds the micro-batch's " +
              std::to_string(real_tokens) + " real tokens (a loss is averaged over at most every token)");
}

megatron_billing megatron_billing::of(const model_spec& spec, flop_scope scope) {
  model_spec constant_spec = spec;
  if (scope == flop_scope::seed) constant_spec.train_mtp_layers = false;
  // At S = 1 the attention parts are their slopes: both are (a constant) x S.
  const megatron_constant k = compute_megatron_constant(constant_spec, 1);
  return {k.text_linear_per_token, k.text_attention_per_token, k.vision_linear_per_token, k.vision_attention_per_token};
}

metrics_deriver::metrics_deriver(derive_setup setup) : setup_(std::move(setup)) {}

derive_result metrics_deriver::derive(const double* rows, std::int64_t world, const derive_context& context) {
  derive_result result;
  const auto row = [rows](std::int64_t r) { return rows + static_cast<std::size_t>(r) * kRowFields; };
  // Per-rank rows (each with its own interval, so rank skew shows in its row), one column per figure.
  const std::size_t n = static_cast<std::size_t>(world);
  for (std::vector<double>* c : {&tps_, &tflops_, &step_time_, &mem_gib_, &forward_backward_, &data_, &log_wait_}) {
    c->resize(n);
  }
  headline_figures h;
  std::size_t fastest_rank = 0;  // the rank with the most TFLOP/s (for the MFU plausibility check)
  for (std::int64_t r = 0; r < world; ++r) {
    const double* x = row(r);
    const double t = x[row_interval_seconds];
    if (!(t > 0) || !std::isfinite(t)) {
      result.why = "rank " + std::to_string(r) + " reported an interval of " + format_number(t) + " s";
      return result;
    }
    for (std::size_t f = 0; f < kRowCountFields; ++f) {
      // NaN, negative or fractional: a corrupt row, not a count (a peer's row comes from the trainer's
      // collective); a whole number of 2^53 or more: a count, but no longer exact.
      if (!(x[f] >= 0 && x[f] == std::floor(x[f]))) {
        result.why = "rank " + std::to_string(r) + " reported a count of " + format_number(x[f]) +
                     " in one interval, not a finite non-negative integer (a corrupt row)";
        return result;
      }
      if (!(x[f] < kExactIntegerLimit)) {
        result.why = "rank " + std::to_string(r) + " reported a count of " + format_number(x[f]) +
                     " in one interval, beyond the 2^53 a row carries exactly";
        return result;
      }
    }
    const std::size_t i = static_cast<std::size_t>(r);
    const rank_figures f = rank_figures_of(setup_, x);
    tps_[i] = f.tokens_per_second;
    tflops_[i] = f.tflops;
    // A positive finite interval can still be too short for a rate to be a number (5e-324 s: 1 token over it
    // is inf): skipped like an interval of 0 s, never emitted as inf (JSONL null).
    if (!std::isfinite(tps_[i]) || !std::isfinite(tflops_[i])) {
      result.why = "rank " + std::to_string(r) + " reported an interval of " + format_number(t) +
                   " s, too short for its rates to be finite numbers";
      return result;
    }
    step_time_[i] = f.step_time;
    // Not reported: kNotReported in the column, so that the top-k leaves the rank out (add_topk).
    const bool mem_known = is_reported(x[row_peak_memory_bytes]);
    const bool data_known = is_reported(x[row_data_seconds]);
    const bool fwd_bwd_known = is_reported(x[row_forward_backward_seconds]);
    mem_gib_[i] = mem_known ? x[row_peak_memory_bytes] * kInverseGiB : kNotReported;  // exact: a power of two
    forward_backward_[i] = fwd_bwd_known ? x[row_forward_backward_seconds] : kNotReported;
    data_[i] = data_known ? x[row_data_seconds] : kNotReported;
    log_wait_[i] = reported(x[row_log_wait_ms]);
    h.add_rank(f, x);
    if (tflops_[i] > tflops_[fastest_rank]) fastest_rank = i;
  }
  h.fastest_rank = static_cast<std::int64_t>(fastest_rank);
  h.fastest_tflops = tflops_[fastest_rank];
  // Additive figures: sums over this rank's DP group (TP/CP/PP ranks share micro-batches: not added).
  for (const std::int64_t r : setup_.dp_group) h.add_dp_rank(row(r));
  const std::optional<bool> mfu_plausible = headline_record(setup_, h, world, context, result);
  if (!mfu_plausible) return result;
  if (setup_.topk > 0) {
    add_topk(result.record,
             reported_columns{h.step_time_known, h.fwd_bwd_ranks > 0, h.data_ranks > 0, h.max_wait > 0, *mfu_plausible,
                              h.mem_ranks > 0, h.fwd_bwd_ranks < n, h.data_ranks < n, h.mem_ranks < n});
  }
  return result;
}

rank_figures rank_figures_of(const derive_setup& setup, const double* x) {
  rank_figures f;
  const double t = x[row_interval_seconds];
  const double ranks_per_replica = static_cast<double>(setup.tp * setup.cp * setup.pp);
  // A rank's TFLOP/s is its batches' FLOPs / tp (its TP share) / (cp*pp) (CP and PP split that share
  // further) / t / 1e12: the constant part of the divisor once (an exact product of small integers and
  // 1e12), leaving one division per rank.
  const double tflops_divisor = static_cast<double>(setup.tp * setup.cp * setup.pp) * 1e12;
  const batch_counts counts = counts_from_row(x);
  // Each rank of a TP group holds the same micro-batch and does 1/tp of its matmul work: its share.
  const flop_breakdown flops = compute_flops(setup.flop_coefficients, counts, setup.scope);
  const double batch_flops = flops.total();
  // A replica's tokens are seen by all tp*cp*pp ranks that share its micro-batches; attributing 1/(tp*cp*pp)
  // of them to each makes the rows sum to the job's tokens/s.
  f.tokens_per_second = static_cast<double>(counts.real_tokens) / ranks_per_replica / t;
  f.tflops = batch_flops / tflops_divisor / t;
  // Hardware FLOPs: the same interval and divisor; equal to tflops with recompute "none".
  f.hardware_tflops = flops.hardware_total() / tflops_divisor / t;
  f.step_time = x[row_microbatches] > 0 ? t / x[row_microbatches] : std::numeric_limits<double>::quiet_NaN();
  // The Megatron constant's view of the same interval, formed like tflops (0: not a positive finite figure).
  f.megatron_tflops = std::isfinite(x[row_megatron_flops]) && x[row_megatron_flops] > 0
                          ? x[row_megatron_flops] / tflops_divisor / t
                          : 0.0;
  return f;
}

void headline_figures::add_rank(const rank_figures& f, const double* x) {
  const double t = x[row_interval_seconds];
  const bool mem_known = is_reported(x[row_peak_memory_bytes]);
  const bool data_known = is_reported(x[row_data_seconds]);
  const bool fwd_bwd_known = is_reported(x[row_forward_backward_seconds]);
  if (is_reported(x[row_peak_reserved_memory_bytes])) {
    ++reserved_ranks;
    max_reserved = std::max(max_reserved, x[row_peak_reserved_memory_bytes]);
  }
  // perf/data_time_pct: the highest share of its own interval a rank spent waiting for data.
  if (data_known) max_data_pct = std::max(max_data_pct, x[row_data_seconds] / t * 100.0);
  mem_ranks += mem_known ? 1 : 0;
  data_ranks += data_known ? 1 : 0;
  fwd_bwd_ranks += fwd_bwd_known ? 1 : 0;
  sum_tps += f.tokens_per_second;
  sum_tflops += f.tflops;
  sum_hardware_tflops += f.hardware_tflops;
  fastest_hardware_tflops = std::max(fastest_hardware_tflops, f.hardware_tflops);
  if (f.megatron_tflops > 0) sum_megatron_tflops += f.megatron_tflops;
  sum_step += f.step_time;
  step_time_known = step_time_known && std::isfinite(f.step_time);
  if (mem_known) max_mem = std::max(max_mem, x[row_peak_memory_bytes]);
  if (data_known) max_data = std::max(max_data, x[row_data_seconds]);
  if (fwd_bwd_known) max_fwd_bwd = std::max(max_fwd_bwd, x[row_forward_backward_seconds]);
  max_wait = std::max(max_wait, reported(x[row_log_wait_ms]));
}

void headline_figures::add_dp_rank(const double* x) {
  const batch_counts counts = counts_from_row(x);
  real += static_cast<double>(counts.real_tokens);
  device += static_cast<double>(counts.device_tokens());
  loss += x[row_loss_sum];
  labels += x[row_label_tokens];
  tokens_seen += x[row_tokens_seen];
  samples_seen += x[row_samples_seen];
  labels_seen += x[row_label_tokens_seen];
  labels_seen_exact =
      labels_seen_exact && x[row_label_tokens_seen] >= 0 && x[row_label_tokens_seen] < kExactIntegerLimit;
  // train/max_loss: the highest mean loss (loss sum over label tokens) of a DP rank with label tokens.
  if (x[row_label_tokens] > 0 && std::isfinite(x[row_loss_sum] / x[row_label_tokens])) {
    const double mean = x[row_loss_sum] / x[row_label_tokens];
    max_loss = max_loss ? std::max(*max_loss, mean) : mean;
  }
  tokens_seen_exact = tokens_seen_exact && x[row_tokens_seen] >= 0 && x[row_tokens_seen] < kExactIntegerLimit;
  samples_seen_exact = samples_seen_exact && x[row_samples_seen] >= 0 && x[row_samples_seen] < kExactIntegerLimit;
  flops_seen.add_row(x);
}

std::optional<bool> headline_record(const derive_setup& setup, const headline_figures& h, std::int64_t world,
                                    const derive_context& context, derive_result& result) {
  const double world_size = static_cast<double>(world);
  // Finite per-rank rates can still sum past the double range (many ranks at ~1e308 tokens/s).
  if (!std::isfinite(h.sum_tps) || !std::isfinite(h.sum_tflops) || !std::isfinite(h.sum_hardware_tflops)) {
    result.why = "the ranks' rates sum beyond the double range (intervals too short for their counts)";
    return std::nullopt;
  }
  // Running totals: each rank's own since it started (skipped intervals included), summed over the DP group
  // at this log. Not the sum of emitted intervals, which would lose every interval a failure skipped.
  result.tokens_seen = h.tokens_seen;
  result.samples_seen = h.samples_seen;

  metrics_record& record = result.record;
  record.step = context.step;
  auto& v = record.values;
  namespace m = metric;
  // Headline = sum of the per-rank rows; with equal intervals t this is dp_sum(tokens) / t.
  v.emplace_back(m::kTokensPerSecond, h.sum_tps);
  v.emplace_back(m::kTokensPerSecondPerGpu, h.sum_tps / world_size);
  // Per GPU over every GPU of the job: with equal intervals, dp_sum(flops) * tp / t / world / 1e12.
  const double tflops_per_gpu = h.sum_tflops / world_size;
  v.emplace_back(m::kTflopsPerSecond, tflops_per_gpu);
  const double hardware_tflops_per_gpu = h.sum_hardware_tflops / world_size;
  v.emplace_back(m::kTflopsPerSecondHardware, hardware_tflops_per_gpu);
  // MFU above 100% (the job's or any rank's) is impossible: the peak is too low for this GPU and precision, or
  // the trainer reported micro-batches that did not run in the interval (e.g. events replayed in a burst). Such
  // an MFU is not reported; the warning says which figures disagree. Tokens/s and TFLOP/s stay: they are what
  // the trainer reported over the time that passed.
  bool mfu_plausible = false;
  if (setup.peak_tflops_per_gpu) {
    const double peak = *setup.peak_tflops_per_gpu;
    mfu_plausible = tflops_per_gpu <= peak && h.fastest_tflops <= peak;
    if (mfu_plausible) {
      v.emplace_back(m::kMfu, tflops_per_gpu / peak * 100.0);
    } else {
      const std::string fastest = h.fastest_rank >= 0 ? "rank " + std::to_string(h.fastest_rank) : "the fastest rank";
      result.warning = "MFU not reported: " + format_number(tflops_per_gpu) + " TFLOP/s per GPU (" + fastest + ": " +
                       format_number(h.fastest_tflops) + ") exceeds the peak of " + format_number(peak) +
                       " TFLOP/s; the peak is too low for this GPU and precision, or micro-batches were reported "
                       "that did not run in this interval";
    }
    // HFU (PaLM's hardware FLOPs utilisation) beside MFU, under the same plausibility check: the recomputed
    // forward can push the hardware figure past a peak the model figure stays under.
    if (mfu_plausible && hardware_tflops_per_gpu <= peak && h.fastest_hardware_tflops <= peak) {
      v.emplace_back(m::kHfu, hardware_tflops_per_gpu / peak * 100.0);
    } else if (mfu_plausible) {
      result.warning = "HFU not reported: " + format_number(hardware_tflops_per_gpu) +
                       " hardware TFLOP/s per GPU (model and recomputed FLOPs) exceeds the peak of " +
                       format_number(peak) + " TFLOP/s; the peak is too low for this GPU and precision";
    }
  }
  // Megatron's per-token constant for the same micro-batches, full-training form, beside the exact figures.
  if (h.sum_megatron_tflops > 0 && std::isfinite(h.sum_megatron_tflops)) {
    v.emplace_back(m::kTflopsPerSecondMegatron, h.sum_megatron_tflops / world_size);
    if (setup.peak_tflops_per_gpu) {
      v.emplace_back(m::kMfuMegatron, h.sum_megatron_tflops / world_size / *setup.peak_tflops_per_gpu * 100.0);
    }
  }
  if (h.step_time_known) {
    const double step_time = h.sum_step / world_size;
    v.emplace_back(m::kStepTime, step_time);
    v.emplace_back(m::kOptimizerStepTime, step_time * setup.tpi_multiplier);
  }
  if (h.device > 0) v.emplace_back(m::kBatchEfficiency, h.real / h.device);
  // Peak memory only when some rank reported it (a CPU trainer has none): the max over the ranks that did, a
  // reported 0 included.
  if (h.mem_ranks > 0) v.emplace_back(m::kMemGib, h.max_mem / kGiB);
  if (h.reserved_ranks > 0) v.emplace_back(m::kMemReservedGib, h.max_reserved / kGiB);
  // A DP sum of finite loss sums can still overflow the double range: then there is no loss to report.
  if (h.labels > 0 && std::isfinite(h.loss)) v.emplace_back(m::kLoss, h.loss / h.labels);
  if (h.max_loss) v.emplace_back(m::kMaxLoss, *h.max_loss);
  if (h.tokens_seen_exact) v.emplace_back(m::kTokensSeen, result.tokens_seen);
  std::string flops_seen_why;
  result.flops_seen =
      flops_seen_figure(h.flops_seen.limbs, h.flops_seen.smallest_limb, h.flops_seen.largest_limb, flops_seen_why);
  if (result.flops_seen) {
    v.emplace_back(m::kFlopsSeen, *result.flops_seen);
  } else {
    result.warning += std::string(result.warning.empty() ? "" : "; ") + flops_seen_why;
  }
  if (h.samples_seen_exact) v.emplace_back(m::kNumSamples, result.samples_seen);
  if (h.labels_seen_exact) {
    v.emplace_back(m::kAssistantTokensSeen, h.labels_seen);
  } else {
    result.warning += std::string(result.warning.empty() ? "" : "; ") +
                      "train/assistant_tokens_seen not reported: a rank's running total reached 2^53, beyond what a "
                      "row carries exactly";
  }
  if (!h.tokens_seen_exact || !h.samples_seen_exact) {
    result.warning += std::string(result.warning.empty() ? "" : "; ") +
                      (h.tokens_seen_exact    ? "train/num_samples"
                       : h.samples_seen_exact ? "train/tokens_seen"
                                              : "train/tokens_seen and train/num_samples") +
                      " not reported: a rank's running total reached 2^53, beyond what a row carries exactly";
  }
  v.emplace_back(m::kFrozenVision, setup.regime.vision_frozen ? 1.0 : 0.0);
  v.emplace_back(m::kFrozenMerger, setup.regime.merger_frozen ? 1.0 : 0.0);
  v.emplace_back(m::kFrozenText, setup.regime.text_frozen ? 1.0 : 0.0);
  v.emplace_back(m::kLoraRank, static_cast<double>(setup.regime.lora_rank));
  if (context.learning_rate) v.emplace_back(m::kLearningRate, *context.learning_rate);
  if (context.grad_norm) v.emplace_back(m::kGradNorm, *context.grad_norm);
  if (h.data_ranks > 0) v.emplace_back(m::kDataTime, h.max_data);
  if (h.data_ranks > 0) v.emplace_back(m::kDataTimePct, h.max_data_pct);
  if (h.fwd_bwd_ranks > 0) v.emplace_back(m::kForwardBackwardTime, h.max_fwd_bwd);
  v.emplace_back(m::kLogWaitMs, context.log_wait_ms);
  v.emplace_back(m::kLogEmitMs, context.log_emit_ms);
  result.derived = true;
  return mfu_plausible;
}

// The k worst ranks of a column into order_[0, k) (worst first) and the k best into fast_order_[0, k) (best
// first): the two ends of one order, worst first, ties by rank. For the usual small k one pass over the keys
// keeps both ends in insertion-sorted arrays (about two comparisons per rank); a large k uses partial_sort,
// O(n log k). Either way the whole order is never built.
void metrics_deriver::select_ends(const std::vector<double>& column, std::size_t k, bool higher_is_better) {
  const std::size_t n = column.size();
  const double* key = column.data();
  // worse(a, b): a comes before b in the worst-first order.
  const auto worse = [key, higher_is_better](std::uint32_t a, std::uint32_t b) {
    const double va = key[a], vb = key[b];
    if (va != vb) return higher_is_better ? va < vb : va > vb;
    return a < b;
  };
  const auto better = [&worse](std::uint32_t a, std::uint32_t b) { return worse(b, a); };
  if (k == 0) return;
  if (k > kLinearSelectMax) {
    const auto k_end = static_cast<std::ptrdiff_t>(k);
    std::iota(order_.begin(), order_.end(), std::uint32_t{0});
    std::partial_sort(order_.begin(), order_.begin() + k_end, order_.end(), worse);
    std::iota(fast_order_.begin(), fast_order_.end(), std::uint32_t{0});
    std::partial_sort(fast_order_.begin(), fast_order_.begin() + k_end, fast_order_.end(), better);
    return;
  }
  // Inserts index i into the sorted prefix of `out` that holds `size` entries (size < k: it grows;
  // otherwise i replaces the last entry, which the caller checked it beats).
  const auto insert = [k](std::uint32_t* out, std::size_t size, std::uint32_t i, const auto& before) {
    std::size_t at = size < k ? size : k - 1;
    while (at > 0 && before(i, out[at - 1])) {
      out[at] = out[at - 1];
      --at;
    }
    out[at] = i;
  };
  std::uint32_t* slow = order_.data();
  std::uint32_t* fast = fast_order_.data();
  const std::uint32_t first = static_cast<std::uint32_t>(std::min(k, n));
  for (std::uint32_t i = 0; i < first; ++i) {
    insert(slow, i, i, worse);
    insert(fast, i, i, better);
  }
  // Index i is larger than every index kept so far, so on a tie it is worse than nothing kept (the lower
  // rank comes first on the slow side) and better than a kept one (the higher rank comes first on the fast
  // side): one comparison with the boundary value decides.
  for (std::uint32_t i = first; i < n; ++i) {
    const double v = key[i];
    const double slow_edge = key[slow[k - 1]], fast_edge = key[fast[k - 1]];
    if (higher_is_better ? v < slow_edge : v > slow_edge) insert(slow, k, i, worse);
    if (higher_is_better ? v >= fast_edge : v <= fast_edge) insert(fast, k, i, better);
  }
}

// perf_topk/<metric>_{slow,fast}_<i> and _rank: the k ranks that hold the job back ("slow") and the k that
// do best ("fast") for each metric. Ties go to the lower rank on the slow side and the higher rank on the
// fast side: the two sides are the two ends of one order (worst first, ties by rank).
// step_time only when every rank ran a micro-batch (as perf/step_time): a rank without one has no step
// time. The trainer-reported figures (times, memory) only when some rank reported them (as perf/data_time...),
// ranked over the ranks that did: a rank that did not report is in no row, a rank that reported 0 is. log_wait_ms from the second log on (a rank's row carries its previous wait).
void metrics_deriver::add_topk(metrics_record& record, const reported_columns& reported) {
  const std::size_t n = tps_.size();
  const std::size_t k = std::min<std::size_t>(static_cast<std::size_t>(setup_.topk), n);
  order_.resize(n);
  fast_order_.resize(n);
  // `some_missing`: only the ranks with a reported value (>= 0) are ranked; the others are in no row.
  const auto emit = [&](const char* base, const std::vector<double>& column, bool higher_is_better,
                        bool some_missing = false) {
    const std::vector<double>* keys = &column;
    if (some_missing) {
      reported_ranks_.clear();
      reported_values_.clear();
      for (std::size_t r = 0; r < n; ++r) {
        if (column[r] >= 0) {
          reported_ranks_.push_back(static_cast<std::uint32_t>(r));
          reported_values_.push_back(column[r]);
        }
      }
      keys = &reported_values_;
    }
    const std::size_t kk = std::min(k, keys->size());
    order_.resize(keys->size());
    fast_order_.resize(keys->size());
    select_ends(*keys, kk, higher_is_better);
    const auto rank_of = [&](std::uint32_t i) { return some_missing ? reported_ranks_[i] : i; };
    for (std::size_t i = 0; i < kk; ++i) {
      const std::uint32_t slow = rank_of(order_[i]), fast = rank_of(fast_order_[i]);
      record.values.emplace_back(metric::topk_name(base, metric::topk_side::slow, i), column[slow]);
      record.values.emplace_back(metric::topk_name(base, metric::topk_side::slow, i, true), static_cast<double>(slow));
      record.values.emplace_back(metric::topk_name(base, metric::topk_side::fast, i), column[fast]);
      record.values.emplace_back(metric::topk_name(base, metric::topk_side::fast, i, true), static_cast<double>(fast));
    }
  };
  emit(metric::kTopkTps, tps_, true);
  if (reported.step_time) emit(metric::kTopkStepTime, step_time_, false);
  emit(metric::kTopkTflops, tflops_, true);
  if (reported.mfu) {
    const double peak = *setup_.peak_tflops_per_gpu;
    mfu_.resize(n);
    for (std::size_t i = 0; i < n; ++i) mfu_[i] = tflops_[i] / peak * 100.0;
    emit(metric::kTopkMfu, mfu_, true);
  }
  if (reported.memory) emit(metric::kTopkMemGib, mem_gib_, false, reported.memory_partly);
  if (reported.forward_backward) {
    emit(metric::kTopkForwardBackwardTime, forward_backward_, false, reported.forward_backward_partly);
  }
  if (reported.data) emit(metric::kTopkDataTime, data_, false, reported.data_partly);
  // The host's wait in flopmeter: the rank that waited least is the one the others waited for (slow).
  if (reported.log_wait) emit(metric::kTopkLogWaitMs, log_wait_, true);
}

}  // namespace flopmeter::detail
