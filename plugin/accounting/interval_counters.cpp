// One rank's interval counters and its row of the collective (interval_counters.h).
#include "accounting/interval_counters.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "flopmeter/error.h"
#include "accounting/count_event.h"
#include "accounting/flops_seen.h"
#include "accounting/row_layout.h"

namespace flopmeter::detail {
namespace {

double seconds_or_not_reported(const std::optional<std::chrono::duration<double>>& time) {
  return time && std::isfinite(time->count()) && time->count() >= 0 ? time->count() : kNotReported;
}

}  // namespace

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
  flops_seen_to_row(totals.flops_seen, row);
  row[row_peak_reserved_memory_bytes] =
      event.peak_reserved_memory_bytes ? static_cast<double>(*event.peak_reserved_memory_bytes) : kNotReported;
}

}  // namespace flopmeter::detail
