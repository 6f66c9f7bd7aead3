// plugin/accounting/interval_counters.h — internal: what one rank counts between two logs, and the row of the
// per-log collective it becomes. The throughput plugin (throughput.cpp) owns one interval_counters and one
// running_totals under its lock; this is their arithmetic, free of locking, logging and the collective.
//
// Counts travel in the row as doubles, which hold every integer below 2^53 (kExactIntegerLimit) exactly; an
// int64 count of 2^53 or more becomes a double of at least 2^53. derive() refuses a row with such a count
// (or a negative one, or not a number) rather than round it or, at 2^63, convert it back to int64 with
// undefined behaviour. Reaching it takes 9e15 tokens or pairs in one rank's interval.
// Thread-safety: plain values and pure functions; the owner serializes access.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include "flopmeter/error.h"
#include "flopmeter/events.h"
#include "flopmeter/flop_model.h"
#include "accounting/count_event.h"
#include "accounting/derive.h"
#include "arch/flop_terms.h"

namespace flopmeter::detail {

// Counters of the interval being filled. Plain integers: on_microbatch only adds.
struct interval_counters {
  batch_counts counts;
  std::int64_t samples = 0;
  double loss_sum = 0;
  std::int64_t label_tokens = 0;
  std::int64_t microbatches = 0;
  // Per micro-batch of S device tokens and P patches: sums of S^2 and S*P, what the Megatron constant's
  // attention parts grow with (megatron_billing::interval_flops forms row_megatron_flops from them at the log).
  double row_tokens_squared = 0;
  double row_tokens_times_patches = 0;
};

// This rank's running totals since it started, every interval included (row_tokens_seen, row_samples_seen,
// row_label_tokens_seen, row_flops_seen_*).
struct running_totals {
  double tokens_seen = 0;
  double samples_seen = 0;
  double label_tokens_seen = 0;
  // Exact model FLOPs (flops_seen.h); nullopt once a sum reached 2^128, which no row can carry.
  std::optional<uint128> flops_seen = uint128{0};

  // The interval ends whatever becomes of its collective: its tokens and samples join the totals.
  void add(const interval_counters& interval) {
    tokens_seen += static_cast<double>(interval.counts.real_tokens);
    samples_seen += static_cast<double>(interval.samples);
    label_tokens_seen += static_cast<double>(interval.label_tokens);
  }
  // The interval's exact model FLOPs (count/exact_flops.h), likewise whatever becomes of its collective.
  void add_flops(const std::optional<uint128>& interval_flops) {
    if (!flops_seen || !interval_flops || *flops_seen + *interval_flops < *flops_seen) {
      flops_seen.reset();
      return;
    }
    *flops_seen += *interval_flops;
  }
};

// Adds one micro-batch to `interval`, all or nothing: throws flopmeter::error saying why it is not counted (a
// negative count, a bad description, a loss without its label tokens, a sum past 64 bits or the double
// range), leaving `interval` as it was. The caller counts the micro-batch itself (interval.microbatches).
// Inline: it is the whole of on_microbatch's work besides the count, and a call into another translation unit
// cost the hook 6-8% (bench_on_microbatch).
// `plan` is count_plan_of(geometry), made once with the model.
inline void add_microbatch(interval_counters& interval, const microbatch_event& event, const vision_geometry& geometry,
                           const count_plan& plan) {
  if (event.samples < 0) throw error("samples must be >= 0 (got " + std::to_string(event.samples) + ")");
  if (event.label_tokens && *event.label_tokens < 0) throw error("label_tokens must be >= 0");
  if (event.loss_sum && !std::isfinite(*event.loss_sum)) throw error("loss_sum is not finite");
  check_loss_pair(event.loss_sum, event.label_tokens);
  const batch_counts counts = count_event(event, geometry, plan);
  check_label_tokens_within(event.loss_sum, event.label_tokens, counts.real_tokens);
  interval_counters next = interval;
  next.counts += counts;
  const double row_tokens = static_cast<double>(counts.device_tokens());
  next.row_tokens_squared += row_tokens * row_tokens;
  next.row_tokens_times_patches += row_tokens * static_cast<double>(counts.patches);
  // Checked like the counts: samples or label tokens summed past int64 (a trainer passing garbage) were
  // signed overflow, and a loss sum past the double range an infinite train/loss.
  if (__builtin_add_overflow(next.samples, event.samples, &next.samples)) {
    throw error("the interval's sample count overflows a 64-bit count");
  }
  if (event.loss_sum && event.label_tokens) {
    next.loss_sum += *event.loss_sum;
    if (!std::isfinite(next.loss_sum)) throw error("the interval's loss sum is not finite");
    if (__builtin_add_overflow(next.label_tokens, *event.label_tokens, &next.label_tokens)) {
      throw error("the interval's label token count overflows a 64-bit count");
    }
  }
  interval = next;
}

// Fills the first kRowFields doubles of `row` with the interval's counts, its seconds, the trainer's fields of
// `event` (checked by check_log_fields: a value left is finite and >= 0; what the trainer did not report
// travels as kNotReported, so that a reported 0 stays a 0), `totals`, and `log_wait_ms`. The identity fields
// (the step, the fingerprint) are the protocol's to write (log_protocol::write_identity).
void fill_row(double* row, const interval_counters& interval, const megatron_billing& megatron, const log_event& event,
              double interval_seconds, const running_totals& totals, double log_wait_ms);

}  // namespace flopmeter::detail
