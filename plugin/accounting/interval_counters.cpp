// One rank's interval counters and its row of the collective (interval_counters.h).
#include "accounting/interval_counters.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "flopmeter/error.h"
#include "accounting/count_event.h"
#include "accounting/row_layout.h"

namespace flopmeter::detail {
namespace {

double seconds_or_not_reported(const std::optional<std::chrono::duration<double>>& time) {
  return time && std::isfinite(time->count()) && time->count() >= 0 ? time->count() : kNotReported;
}

}  // namespace

void add_microbatch(interval_counters& interval, const microbatch_event& event, const vision_geometry& geometry) {
  if (event.samples < 0) throw error("samples must be >= 0 (got " + std::to_string(event.samples) + ")");
  if (event.label_tokens && *event.label_tokens < 0) throw error("label_tokens must be >= 0");
  if (event.loss_sum && !std::isfinite(*event.loss_sum)) throw error("loss_sum is not finite");
  check_loss_pair(event.loss_sum, event.label_tokens);
  const batch_counts counts = count_event(event, geometry);
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

void fill_row(double* row, const interval_counters& interval, const megatron_billing& megatron, const log_event& event,
              double interval_seconds, const running_totals& totals, double log_wait_ms) {
  std::fill(row, row + kRowFields, 0.0);
  // The counts, not FLOPs: FLOPs are formed from the gathered counts (derive()), identically for counts
  // accumulated here and counts a tensor path adds on the device.
  counts_to_row(interval.counts, row);
  row[row_loss_sum] = interval.loss_sum;
  row[row_label_tokens] = static_cast<double>(interval.label_tokens);
  row[row_microbatches] = static_cast<double>(interval.microbatches);
  row[row_megatron_flops] =
      megatron.interval_flops(static_cast<double>(interval.counts.device_tokens()), interval.row_tokens_squared,
                              static_cast<double>(interval.counts.patches), interval.row_tokens_times_patches);
  row[row_interval_seconds] = interval_seconds;
  row[row_peak_memory_bytes] = event.peak_memory_bytes ? static_cast<double>(*event.peak_memory_bytes) : kNotReported;
  row[row_data_seconds] = seconds_or_not_reported(event.data_time);
  row[row_forward_backward_seconds] = seconds_or_not_reported(event.forward_backward_time);
  row[row_log_wait_ms] = log_wait_ms;
  row[row_tokens_seen] = totals.tokens_seen;
  row[row_samples_seen] = totals.samples_seen;
  row[row_label_tokens_seen] = totals.label_tokens_seen;
  row[row_peak_reserved_memory_bytes] =
      event.peak_reserved_memory_bytes ? static_cast<double>(*event.peak_reserved_memory_bytes) : kNotReported;
}

}  // namespace flopmeter::detail
