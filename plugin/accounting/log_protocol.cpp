// The per-log protocol (log_protocol.h): which logs start a collective, and what the gathered rows are worth.
#include "accounting/log_protocol.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "accounting/log_reduction.h"
#include "accounting/row_layout.h"
#include "util/exact_double.h"

namespace flopmeter::detail {

log_protocol::log_protocol(std::int64_t rank, std::int64_t world, std::chrono::milliseconds collective_timeout,
                           const config_settings& settings)
    : rank_(rank), world_(world), collective_timeout_(collective_timeout), fingerprint_(kRowFields, 0.0) {
  write_fingerprint(settings, fingerprint_.data());
}

const double* log_protocol::row(const double* rows, std::int64_t r) const {
  return rows + static_cast<std::size_t>(r) * kRowFields;
}

std::chrono::milliseconds log_protocol::wait_timeout() const {
  // Backing off, a probe is only polled: a broken group must not block every log.
  return backing_off() ? std::chrono::milliseconds(0) : collective_timeout_;
}

void log_protocol::write_identity(double* row, std::int64_t step) const {
  row[row_present] = static_cast<double>(sequence_);
  row[row_step] = static_cast<double>(step);
  std::copy(fingerprint_.begin() + kRowConfigFirst, fingerprint_.begin() + kRowConfigEnd, row + kRowConfigFirst);
}

// True (and the interval is skipped) while this rank is getting back in step after rows that did not match;
// adopts the latest log's sequence number at the log where it resumes. It waits for a log beyond the latest
// one in the rows, but never more than kMaxResyncLogs logs: one row's step alone is not trusted to be a real
// log (a step of 10^12 passed once would otherwise stop every rank until its steps reach 10^12). A rank that
// skipped one on_log is met at once; after a wrong step, the ranks meet again one round later.
bool log_protocol::waiting_to_resync(std::int64_t step) {
  if (!resume_) return false;
  const bool passed = resume_->by_step ? static_cast<double>(step) > resume_->step : sequence_ > resume_->sequence;
  if (!passed && resume_->skipped < kMaxResyncLogs) {
    ++resume_->skipped;
    return true;
  }
  sequence_ = resume_->sequence + 1;
  resume_.reset();
  return false;
}

bool log_protocol::may_start(std::int64_t step, bool was_in_flight) {
  if (waiting_to_resync(step)) {
    ++counters_.skipped_intervals;
    return false;
  }
  if (backing_off() && (was_in_flight || sequence_ % kRetryEveryLogs != 0)) {
    // The group is broken or out of step (a peer died, hangs, or issued a different number of collectives): a
    // collective per log would block every log for the timeout. Only a probe at the shared retry logs, and none
    // while one is out — nor at a log where one only just resolved.
    ++counters_.skipped_intervals;
    return false;
  }
  return true;
}

log_verdict log_protocol::lost(std::int64_t step, const std::string& why) {
  ++counters_.failed_collectives;
  ++counters_.skipped_intervals;
  ++consecutive_failures_;
  log_verdict verdict;
  verdict.what = log_verdict::kind::lost;
  verdict.skipped_because = why;
  if (consecutive_failures_ == kMaxConsecutiveFailures) {
    // Once per pause, never rate-limited away: a dashboard going quiet must have a reason in the log.
    verdict.paused = fmt::format(
        "flopmeter: reporting paused at step {} after {} failed collectives in a row; probing the group every {} "
        "logs without blocking, and logging when reporting resumes",
        step, kMaxConsecutiveFailures, kRetryEveryLogs);
  }
  return verdict;
}

log_verdict log_protocol::could_not_start(std::int64_t step, const std::string& why) {
  return lost(step, "could not start the collective: " + why);
}

// Why the gathered rows cannot be what the ranks sent, or "" when they can. Every rank fills its row with a
// finite step and a sequence number >= 1, and the host alone writes this rank's step, sequence number and
// interval (a tensor path adds counts only). So this rank's own row must come back exactly as sent, and every
// row must carry a whole sequence number >= 1 and a finite step. An all-reduce over a zero-filled buffer breaks
// the first rule when two ranks write the same row (world_size smaller than the all-reduce's group, or two
// ranks with one index: the row reads twice what was sent, and every rate would be 1/N) and the second when a
// row stays empty (world_size larger than the group).
std::string log_protocol::rows_no_rank_sent(const double* sent, const double* rows) const {
  const double* mine = row(rows, rank_);
  const auto shown = [](double value) {
    return std::isfinite(value) ? std::to_string(static_cast<long long>(value)) : std::string("not a number");
  };
  const std::string remedy = " (values no rank sent: the all-reduce or all-gather is broken, or world_size " +
                             std::to_string(world_) + " and rank " + std::to_string(rank_) +
                             " do not describe its group, every rank with its own index); the interval is discarded";
  // NaN comes back as NaN (NaN + 0 is NaN): an interval a bad clock made NaN is the trainer's, skipped by
  // derive(), not a sign of a broken collective.
  const auto same = [](double got, double was) { return got == was || (std::isnan(got) && std::isnan(was)); };
  if (!same(mine[row_step], sent[row_step]) || !same(mine[row_present], sent[row_present]) ||
      !same(mine[row_interval_seconds], sent[row_interval_seconds])) {
    return "the collective returned this rank's own row (rank " + std::to_string(rank_) + ") changed: step " +
           shown(mine[row_step]) + " and log " + shown(mine[row_present]) + " where step " + shown(sent[row_step]) +
           " and log " + shown(sent[row_present]) + " were sent" + remedy;
  }
  for (std::int64_t r = 0; r < world_; ++r) {
    const double* x = row(rows, r);
    const bool filled = x[row_present] >= 1 && x[row_present] < kExactIntegerLimit &&
                        std::floor(x[row_present]) == x[row_present] && std::isfinite(x[row_step]);
    if (!filled) {
      return "the collective returned a row for rank " + std::to_string(r) + " that no rank fills that way (step " +
             shown(x[row_step]) + ", log " + shown(x[row_present]) + ")" + remedy;
    }
  }
  return "";
}

// True when the gathered interval comes before any rank has recorded a micro-batch: every rank's running totals
// (tokens and samples seen) are 0, and so are its interval's micro-batches and counts. That is the warm-up
// on_log throughput.h recommends (called before the first micro-batch to start the first interval after
// set-up): its record would be all zeros (0 tok/s, 0% MFU), a point that is no measurement, so it is not
// written to the sinks and not counted in health() (nothing went wrong). Decided from the rows alone, so every
// rank decides the same. A later interval without micro-batches has a rank with a token or sample seen and is
// emitted as usual.
bool log_protocol::is_warm_up_interval(const double* rows) const {
  for (std::int64_t r = 0; r < world_; ++r) {
    const double* x = row(rows, r);
    if (x[row_tokens_seen] != 0 || x[row_samples_seen] != 0 || x[row_microbatches] != 0 ||
        x[row_device_rejected] != 0) {
      return false;
    }
    for (std::size_t field = 0; field < kRowCountFields; ++field) {
      if (x[field] != 0) return false;
    }
  }
  return true;
}

// Compares every row's (step, sequence number) with this rank's. On a mismatch sets resume_ when this rank is
// behind the latest log in the rows, or adopts that log's sequence number when it is at it.
log_protocol::step_check log_protocol::check_rows_in_step(const double* rows) {
  const double my_step = row(rows, rank_)[row_step];
  const double my_sequence = row(rows, rank_)[row_present];
  step_check check;
  double latest_step = my_step;
  for (std::int64_t r = 0; r < world_; ++r) {
    const double* x = row(rows, r);
    if (x[row_step] != my_step || x[row_present] != my_sequence) {
      if (check.match) {
        check.match = false;
        check.other_rank = r;
        check.other_step = x[row_step];
      }
    }
    if (x[row_step] > latest_step) latest_step = x[row_step];
  }
  if (check.match) return check;
  // The latest log: the highest step, and of the rows at it the highest sequence number. Every rank computes
  // the same from the same rows.
  double latest_sequence = 0;
  for (std::int64_t r = 0; r < world_; ++r) {
    if (row(rows, r)[row_step] == latest_step) latest_sequence = std::max(latest_sequence, row(rows, r)[row_present]);
  }
  resume_after(my_step, my_sequence, latest_step, latest_sequence);
  return check;
}

void log_protocol::resume_after(double my_step, double my_sequence, double latest_step, double latest_sequence) {
  if (!(latest_sequence >= 0 && latest_sequence < kExactIntegerLimit)) return;  // not a row of ours
  const auto sequence = static_cast<std::int64_t>(latest_sequence);
  if (my_step < latest_step) {
    resume_ = resume_point{true, latest_step, sequence};
  } else if (my_sequence < latest_sequence) {
    resume_ = resume_point{false, latest_step, sequence};  // the steps agree: behind in sequence only
  }
}

void log_protocol::completed(std::int64_t step, log_verdict& verdict) {
  // The collective completed: the group works. Reporting resumes if it was paused.
  if (backing_off())
    verdict.resumed = fmt::format("flopmeter: reporting resumed: the collective of step {} completed", step);
  consecutive_failures_ = 0;
}

log_verdict log_protocol::out_of_step(std::int64_t step, std::int64_t other_rank, double other_step) {
  ++counters_.failed_collectives;
  ++counters_.skipped_intervals;
  ++counters_.out_of_step_intervals;
  log_verdict verdict;
  verdict.what = log_verdict::kind::out_of_step;
  if (!out_of_step_reported_) {
    out_of_step_reported_ = true;
    const std::string other = other_rank >= 0 ? fmt::format("rank {}'s", other_rank) : std::string("a rank's");
    verdict.out_of_step = fmt::format(
        "flopmeter: ranks out of step: this rank's row of step {} met {} of step {} (a rank skipped or "
        "added an on_log, or issued no collective at some log); the interval is discarded and the ranks get back "
        "in step at the next log they all share",
        step, other, other_step);
  }
  return verdict;
}

log_verdict log_protocol::resolve(std::int64_t step, collective_status status, const std::string& error,
                                  const double* sent, const double* rows) {
  log_verdict verdict;
  if (status == collective_status::pending && backing_off()) {
    verdict.what = log_verdict::kind::probe_pending;  // the probe stays out; see may_start
    return verdict;
  }
  if (status != collective_status::done) {
    return lost(step, status == collective_status::pending ? "the collective did not finish within " +
                                                                 std::to_string(collective_timeout_.count()) + " ms"
                                                           : error);
  }
  if (const std::string broken = rows_no_rank_sent(sent, rows); !broken.empty()) {
    return lost(step, broken);  // not a working group: counts towards backing off
  }
  completed(step, verdict);
  const step_check check = check_rows_in_step(rows);
  if (!check.match) {
    log_verdict skipped = out_of_step(step, check.other_rank, check.other_step);
    skipped.resumed = verdict.resumed;
    return skipped;
  }
  out_of_step_reported_ = false;
  // The rows are of one log: they mean the same only if every rank loaded the same settings. Checked before
  // the warm-up, so that the first log, often the warm-up one, finds a mismatch.
  if (!fingerprints_agree(rows, world_, rank_)) {
    ++counters_.skipped_intervals;
    ++counters_.config_mismatch_intervals;
    verdict.what = log_verdict::kind::config_mismatch;
    if (!config_mismatch_reported_) {
      config_mismatch_reported_ = true;
      verdict.config_mismatch =
          "flopmeter: the ranks loaded different settings, so their rows cannot be summed; no interval is reported "
          "while they differ (every rank must load the same plugin file and model): " +
          describe_fingerprint_differences(rows, world_);
    }
    return verdict;
  }
  // Batches a tensor path rejected on the device surface here, one log later, without a sync. Only a finite
  // count in range converts: anything else in that slot would be undefined behaviour to cast.
  const double device_rejected = row(rows, rank_)[row_device_rejected];
  if (device_rejected > 0 && device_rejected < kExactIntegerLimit) {
    verdict.device_rejected = static_cast<std::uint64_t>(device_rejected);
  }
  verdict.what = is_warm_up_interval(rows) ? log_verdict::kind::warm_up : log_verdict::kind::derive;
  return verdict;
}

// resolve() for an ordinary log's reduction. The checks mirror resolve()'s on the rows: values no set of the
// job's ranks sent (the wrong number of ranks, ids that are not 0..world-1 once each, this rank's own step or
// sequence number outside the reduced range: NaN is outside every range), then steps and sequence numbers that
// differ, then settings that differ, then the warm-up.
log_verdict log_protocol::resolve_reduced(std::int64_t step, collective_status status, const std::string& error,
                                          const double* sent, const double* sums, const double* maxima) {
  log_verdict verdict;
  if (status == collective_status::pending && backing_off()) {
    verdict.what = log_verdict::kind::probe_pending;
    return verdict;
  }
  if (status != collective_status::done) {
    return lost(step, status == collective_status::pending ? "the collective did not finish within " +
                                                                 std::to_string(collective_timeout_.count()) + " ms"
                                                           : error);
  }
  const double w = static_cast<double>(world_);
  const double max_step_seen = maxima[max_step], min_step_seen = -maxima[neg_min_step];
  const double max_seq = maxima[max_sequence], min_seq = -maxima[neg_min_sequence];
  const bool own_within = sent[row_step] >= min_step_seen && sent[row_step] <= max_step_seen &&
                          sent[row_present] >= min_seq && sent[row_present] <= max_seq;
  if (sums[sum_ranks] != w || sums[sum_rank_ids] != w * (w - 1) / 2 || !own_within) {
    const auto shown = [](double value) {
      return std::isfinite(value) ? fmt::format("{}", value) : std::string("not a number");
    };
    return lost(step, "the reduction returned values no set of the job's ranks sends: " + shown(sums[sum_ranks]) +
                          " ranks with ids summing to " + shown(sums[sum_rank_ids]) + ", steps " +
                          shown(min_step_seen) + " to " + shown(max_step_seen) + " (this rank sent step " +
                          shown(sent[row_step]) + " and log " + shown(sent[row_present]) +
                          ") (the all-reduce is broken, or world_size " + std::to_string(world_) + " and rank " +
                          std::to_string(rank_) +
                          " do not describe its group, every rank with its own index); the interval is discarded");
  }
  completed(step, verdict);
  if (min_step_seen != max_step_seen || min_seq != max_seq) {
    resume_after(sent[row_step], sent[row_present], max_step_seen, max_seq);
    const double other = sent[row_step] != max_step_seen ? max_step_seen : min_step_seen;
    log_verdict skipped = out_of_step(step, -1, other);
    skipped.resumed = verdict.resumed;
    return skipped;
  }
  out_of_step_reported_ = false;
  if (!describe_reduced_differences(maxima).empty()) {
    // Which ranks differ only the table says: it is gathered at the next log, whose verdict names them.
    ++counters_.skipped_intervals;
    ++counters_.config_mismatch_intervals;
    verdict.what = log_verdict::kind::config_mismatch;
    table_wanted_ = !config_mismatch_reported_;
    return verdict;
  }
  const double device_rejected = sent[row_device_rejected];
  if (device_rejected > 0 && device_rejected < kExactIntegerLimit) {
    verdict.device_rejected = static_cast<std::uint64_t>(device_rejected);
  }
  verdict.what = maxima[max_not_warm_up] > 0 ? log_verdict::kind::derive : log_verdict::kind::warm_up;
  return verdict;
}

}  // namespace flopmeter::detail
