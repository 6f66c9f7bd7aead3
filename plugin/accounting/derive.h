// plugin/accounting/derive.h — internal: metric derivation, the pure part of the throughput plugin.
//
// Gathered rows (world_size rows of kRowFields doubles, row_layout.h) plus a context give one metrics record:
// the headline figures (DP-group sums, world maxima, per-GPU means), the per-rank top-k rows, and the running
// totals (tokens and samples seen). No communicator, no clock, no logging: the same rows and context always
// give the same record, so the tests build rows by hand (tests/test_derive.cpp).
//
// Thread-safety: a metrics_deriver keeps scratch buffers; one thread at a time per deriver.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "flopmeter/events.h"
#include "flopmeter/flop_model.h"
#include "flopmeter/model_spec.h"
#include "flopmeter/sinks.h"
#include "accounting/flops_seen.h"

namespace flopmeter::detail {

// What the Megatron per-token constant bills for one micro-batch at its own row length S (real + padding
// tokens), in full-training form: text_per_token(S) x S + vision_per_token(S) x patches, the `megatron_flops`
// of `flopmeter estimate`. Each per-token part is linear in S (attention at S/2 keys per token), so it is kept
// as a constant and a slope; perf/tflops_per_second_megatron sums this over the interval's micro-batches. The
// seed scope's constant leaves out MTP layers, as the seed scope does.
struct megatron_billing {
  double text_linear = 0, text_attention_slope = 0, vision_linear = 0, vision_attention_slope = 0;
  static megatron_billing of(const model_spec& spec, flop_scope scope);
  double flops(double row_tokens, double patches) const {
    return interval_flops(row_tokens, row_tokens * row_tokens, patches, row_tokens * patches);
  }
  // The same summed over an interval's micro-batches, from the sums of S, S^2, patches and S x patches (the
  // attention parts grow with S^2 and S x patches): what row_megatron_flops carries.
  double interval_flops(double tokens, double tokens_squared, double patches, double tokens_times_patches) const {
    return text_linear * tokens + text_attention_slope * tokens_squared + vision_linear * patches +
           vision_attention_slope * tokens_times_patches;
  }
};

// What does not change from log to log: fixed when the plugin starts.
struct derive_setup {
  regime_coefficients flop_coefficients;  // the training regime's (one set for full training)
  training_regime regime;                 // what trains: carried into every record (train/frozen_*)
  flop_scope scope = flop_scope::complete;
  std::int64_t tp = 1, cp = 1, pp = 1;          // the parallel sizes (dp = world / (tp*cp*pp))
  std::vector<std::int64_t> dp_group;           // the ranks whose additive counts are summed (this rank's DP group)
  std::optional<double> peak_tflops_per_gpu;    // MFU and its top-k only when known
  double tpi_multiplier = 1.0;                  // micro-batches per optimizer step
  std::int64_t topk = 3;                        // rows per side; 0: none
};

// What belongs to one log.
struct derive_context {
  std::int64_t step = 0;                        // the step the interval ended at (the record's step)
  std::optional<double> learning_rate;          // this rank's, passed through
  std::optional<double> grad_norm;
  double log_wait_ms = 0;                       // perf/log_wait_ms: the host's wait for these rows
  double log_emit_ms = 0;                       // perf/log_emit_ms: the previous emission's cost
};

struct derive_result {
  bool derived = false;       // false: the interval is skipped and `why` says why
  std::string why;
  metrics_record record;      // when derived
  double tokens_seen = 0;     // the running totals at this log, DP sums of row_tokens_seen (when derived)
  double samples_seen = 0;
  std::optional<double> flops_seen;  // train/flops_seen when reported (flops_seen.h)
  std::string warning;  // when derived: what is not reported and why (e.g. an MFU above 100%); "" if none
};

// A micro-batch's loss fields, checked by both paths before the batch is counted: train/loss is the DP sum of
// loss_sum over the DP sum of label_tokens, so a loss_sum without label_tokens, or a non-zero loss_sum over 0
// label tokens (a sum over no tokens is 0), would be dropped or skew the interval's loss: throws
// flopmeter::error saying which, and the batch is refused like any bad description.
void check_loss_pair(const std::optional<double>& loss_sum, const std::optional<std::int64_t>& label_tokens);

// Once the batch is counted: a loss over more label tokens than the batch's real tokens (10 tokens, 1000 label
// tokens) would divide its loss_sum by tokens that do not exist (train/loss 0.005 instead of 0.5): throws
// flopmeter::error, and the batch is refused like check_loss_pair's. Only when both loss fields are given.
void check_label_tokens_within(const std::optional<double>& loss_sum, const std::optional<std::int64_t>& label_tokens,
                               std::int64_t real_tokens);

// The trainer's optional log fields that pass into a record, each checked by one rule: learning_rate and
// grad_norm finite and >= 0; data_time and forward_backward_time finite, >= 0 and at most kMaxLogSeconds;
// peak_memory_bytes >= 0 and below 2^53 (exact in a row). A field that breaks its rule is left out of the
// event (so of the record, as if not reported) and named in `dropped`, for one warning: never emitted as
// given (a negative grad norm, a 1e308 s time), never dropped silently.
inline constexpr double kMaxLogSeconds = 1e6;  // about 11.6 days: longer is not the time of one log interval
struct checked_log {
  log_event event;
  std::string dropped;  // "grad_norm -1 (must be finite and >= 0), ..."; "" when every field passed
};
checked_log check_log_fields(const log_event& event);

// One rank's figures from its row (derive()'s per-rank formulas; the row's counts already checked).
struct rank_figures {
  double tokens_per_second = 0;  // real tokens / (tp*cp*pp) / interval
  double tflops = 0;             // FLOPs / (tp*cp*pp) / 1e12 / interval
  double step_time = 0;          // interval / micro-batches; NaN without a micro-batch
  double megatron_tflops = 0;    // the Megatron constant's TFLOP/s; 0 when not a positive finite figure
  double hardware_tflops = 0;    // model + recomputed FLOPs, formed like tflops (equal to it with recompute none)
};
rank_figures rank_figures_of(const derive_setup& setup, const double* row);

// What the headline figures are formed from: sums and maxima over the ranks (add_rank) and over one DP group
// (add_dp_rank). derive() fills it from the gathered rows; the fixed-size reduction (log_reduction.h) carries
// the same sums and maxima in two short vectors.
struct headline_figures {
  double sum_tps = 0, sum_tflops = 0, sum_megatron_tflops = 0, sum_step = 0;
  double sum_hardware_tflops = 0, fastest_hardware_tflops = 0;  // model + recomputed FLOPs (HFU)
  bool step_time_known = true;                                  // every rank ran a micro-batch
  double max_mem = 0, max_reserved = 0, max_data = 0, max_data_pct = 0, max_fwd_bwd = 0, max_wait = 0;
  std::size_t mem_ranks = 0, reserved_ranks = 0, data_ranks = 0, fwd_bwd_ranks = 0;  // ranks that reported each
  double fastest_tflops = 0;       // the highest TFLOP/s of a rank (MFU plausibility)
  std::int64_t fastest_rank = -1;  // that rank, when known
  // DP sums
  double real = 0, device = 0, loss = 0, labels = 0, tokens_seen = 0, samples_seen = 0, labels_seen = 0;
  std::optional<double> max_loss;
  // A running total of 2^53 or more is no longer exact in a row (9e15 tokens on one rank): left out, with a
  // warning.
  bool tokens_seen_exact = true, samples_seen_exact = true, labels_seen_exact = true;
  flops_seen_sums flops_seen;  // the DP sums of the rows' FLOPs limbs (flops_seen.h)

  void add_rank(const rank_figures& figures, const double* row);
  void add_dp_rank(const double* row);
};

// The record's headline, train/* and pass-through figures from `figures`, in the record's order, into
// `result` (derived = true). nullopt, with result.why, when the rates sum beyond the double range; otherwise
// whether MFU is plausible (perf_topk/mfu follows it).
std::optional<bool> headline_record(const derive_setup& setup, const headline_figures& figures, std::int64_t world,
                                    const derive_context& context, derive_result& result);

class metrics_deriver {
 public:
  explicit metrics_deriver(derive_setup setup);

  // `rows` holds `world` rows of kRowFields. A row with a count that is negative, not a number or 2^53 or
  // more, or an interval time that is not a positive finite number, skips the interval (a rate over it would
  // not be a number, a count beyond 2^53 not exact). An MFU above 100% (the job's or a rank's) is left out of
  // the record, headline and top-k alike, and `warning` says why.
  derive_result derive(const double* rows, std::int64_t world, const derive_context& context);

  const derive_setup& setup() const { return setup_; }

 private:
  static constexpr std::size_t kLinearSelectMax = 16;  // larger k: partial_sort
  // The k worst entries of `column` into order_ (worst first) and the k best into fast_order_ (best first).
  void select_ends(const std::vector<double>& column, std::size_t k, bool higher_is_better);
  // The optional columns some rank reported (or, for MFU, that are plausible): only those get a top-k.
  struct reported_columns {
    bool step_time = false, forward_backward = false, data = false, log_wait = false, mfu = false, memory = false;
    // Reported by some ranks but not all: ranked over those that did.
    bool forward_backward_partly = false, data_partly = false, memory_partly = false;
  };
  void add_topk(metrics_record& record, const reported_columns& reported);

  derive_setup setup_;
  // One column per per-rank figure, indexed by rank (contiguous, so a top-k is one pass over one array).
  std::vector<double> tps_, tflops_, step_time_, mem_gib_, forward_backward_, data_, log_wait_, mfu_;
  std::vector<std::uint32_t> order_;       // the slow end of each top-k
  std::vector<std::uint32_t> fast_order_;  // the fast end
  std::vector<std::uint32_t> reported_ranks_;  // a column reported by some ranks only: those ranks,
  std::vector<double> reported_values_;        // and their values
};

}  // namespace flopmeter::detail
