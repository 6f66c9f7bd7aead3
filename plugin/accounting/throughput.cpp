// The throughput plugin: per-rank interval counters, one collective per log, deferred emission.
//
// The collective. Every rank fills one row of kRowFields doubles and all-gathers it: afterwards every rank
// holds every rank's row in a world_size x kRowFields buffer. A communicator without an all-gather runs it
// as a SUM all-reduce of that buffer with the other rows zeroed (communicator.h), which every backend
// supports. From the rows each rank derives DP-group sums, world maxima and the per-rank top-k breakdown
// locally (derive.h), so one collective serves every metric. At 16,384 ranks the buffer is 16,384 x
// kRowFields (25) x 8 B = 3.125 MiB per log; METRICS.md gives the bytes each rank moves.
//
// Every row carries what identifies its log: the step (row_step) and the log's sequence number
// (row_present: every rank counts its on_log calls). The rows of one collective agree unless collectives
// were paired across different logs: a rank that skipped an on_log (its step runs ahead of its peers'), or
// one that issued no collective at some log (its sequence number runs ahead). Such a result is discarded,
// never derived: a mix of intervals would be a wrong number. Every rank then sees the same rows and gets
// back in step by itself: the ranks behind the latest log in the rows start no collective until they pass
// it (the first log whose step is beyond it, or, when the steps agree and only the sequence numbers differ,
// as many logs as they are behind), and adopt that log's sequence number; the ranks at it carry on.
//
// Failures. A failed or timed-out collective costs its interval. After kMaxConsecutiveFailures in a row
// the plugin backs off (reporting pauses, logged once): it stops blocking on_log for the timeout and issues
// a collective (a probe) only at logs whose sequence number is a multiple of kRetryEveryLogs — the same logs
// on every rank, since the schedule depends on nothing but the sequence number — and polls it without
// waiting at later logs. A probe still pending is kept (no new collective until it resolves), so a rank
// that is ahead cannot run further ahead of a slow one. When a probe completes, reporting resumes (logged
// once) with one collective per log; rows that do not match are brought back in step as above.
//
// Deferral. on_log(k) closes interval k and starts its collective; the metrics of interval k are derived and
// emitted at on_log(k+1) (or flush()), after waiting for that collective — which by then has had a whole log
// interval to finish, so perf/log_wait_ms is ~0 unless something stalls. That wait goes into the rank's
// next row, so that the per-rank top-k shows who waited for whom.
#include "flopmeter/throughput.h"

#include <spdlog/spdlog.h>

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
#include "flopmeter/model_config.h"
#include "accounting/derive.h"
#include "accounting/owned_mutex.h"
#include "accounting/count_event.h"
#include "accounting/row_layout.h"
#include "core/device_name.h"
#include "core/exact_double.h"
#include "output/logging.h"

namespace flopmeter {
namespace {

using namespace detail;  // row_layout.h

constexpr int kMaxConsecutiveFailures = 3;
constexpr std::int64_t kRetryEveryLogs = 16;
// Counts travel in the row as doubles, which hold every integer below 2^53 (kExactIntegerLimit) exactly; an
// int64 count of 2^53 or more becomes a double of at least 2^53. derive() refuses a row with such a count
// (or a negative one, or not a number) rather than round it or, at 2^63, convert it back to int64 with
// undefined behaviour. Reaching it takes 9e15 tokens or pairs in one rank's interval.

// True on a thread inside one of the plugin's logger calls. A trainer's logger sink that calls back into the
// plugin is refused like any call-out (owned_mutex.h); the refusal is then not logged, since logging again
// from inside that logger could deadlock on the logger's own sink lock.
thread_local bool t_inside_logger = false;

class inside_logger {
 public:
  inside_logger() noexcept : was_(std::exchange(t_inside_logger, true)) {}
  ~inside_logger() { t_inside_logger = was_; }
  inside_logger(const inside_logger&) = delete;
  inside_logger& operator=(const inside_logger&) = delete;

 private:
  bool was_;
};

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

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

}  // namespace

class throughput_plugin::impl {
 public:
  impl(throughput_options options, std::shared_ptr<communicator> comm)
      : options_(std::move(options)),
        comm_(std::move(comm)),
        layout_(options_.parallel, comm_ ? comm_->world_size() : 1, options_.rank_order) {
    if (!comm_) throw error("a communicator is required (make_local_communicator() for one process)");
    logger_ = detail::logger_or_private(options_.logger);
    if (options_.topk < 0) throw error("topk must be >= 0 (got " + std::to_string(options_.topk) + ")");
    if (!(options_.tpi_multiplier >= setting_range::min_tpi_multiplier &&
          options_.tpi_multiplier <= setting_range::max_tpi_multiplier)) {  // also false for NaN
      throw error("tpi_multiplier must be in [1, 1e6] (got " + std::to_string(options_.tpi_multiplier) + ")");
    }
    if (options_.collective_timeout.count() < 0 ||
        options_.collective_timeout.count() > setting_range::max_timeout_ms) {
      throw error("collective_timeout must be in [0, 3600000] ms (got " +
                  std::to_string(options_.collective_timeout.count()) + " ms)");
    }
    validate_model_spec(options_.model);
    regime_coefficients_ = compute_coefficients(options_.model, options_.training);
    coefficients_ = regime_coefficients_.with_items;
    megatron_ = megatron_billing::of(options_.model, options_.scope);
    geometry_ = geometry_of(options_.model);
    rank_ = comm_->rank();
    world_ = comm_->world_size();

    if (options_.sanity_check) {
      for (const std::int64_t s : {4096, 8192, 32768}) {
        const check_report report = run_sanity_check(options_.model, s);
        if (!report.pass) {
          std::string failed;
          for (const check_row& row : report.rows) {
            if (!row.pass) failed += "\n  " + row.term + ": ratio " + std::to_string(row.ratio) + ", expected " +
                                     std::to_string(row.expected_ratio);
          }
          throw error("sanity check failed for model '" + options_.model.name + "' at S=" + std::to_string(s) + ":" +
                      failed);
        }
      }
    }

    if (options_.peak_tflops_per_gpu) {
      const double peak = *options_.peak_tflops_per_gpu;
      if (!(peak >= setting_range::min_peak_tflops_per_gpu && peak <= setting_range::max_peak_tflops_per_gpu)) {
        char shown[64];
        std::snprintf(shown, sizeof shown, "%g", peak);  // 1e-300 shows as itself, not as 0.000000
        throw error(std::string("peak_tflops_per_gpu must be in [0.001, 100000] TFLOP/s (got ") + shown + ")");
      }
      peak_ = options_.peak_tflops_per_gpu;
    }
    peak_resolution resolution;  // gpu = "auto": the device this process runs on, read once, here
    if (!options_.peak_tflops_per_gpu && !options_.gpu.empty()) {
      const detail::detected_device device =
          is_auto_gpu(options_.gpu) ? detail::detect_cuda_device() : detail::detected_device{};
      resolution = resolve_peak(options_.gpu, device.name, options_.precision, device.why);
      if (resolution.match) peak_ = resolution.match->tflops;
    }
    if (!peak_ && rank_ == 0 && options_.gpu.empty()) {
      logger_->warn("flopmeter: neither peak_tflops_per_gpu nor gpu is configured; perf/mfu will not be reported");
    } else if (!peak_ && rank_ == 0) {
      logger_->warn("flopmeter: {}", resolution.warning);
    }
    buffer_.assign(static_cast<std::size_t>(world_) * kRowFields, 0.0);
    row_.assign(kRowFields, 0.0);
    derive_setup setup;
    setup.flop_coefficients = regime_coefficients_;
    setup.regime = options_.training;
    setup.scope = options_.scope;
    setup.tp = layout_.tp();
    setup.cp = layout_.cp();
    setup.pp = layout_.pp();
    setup.dp_group = layout_.dp_group(rank_);
    setup.peak_tflops_per_gpu = peak_;
    setup.tpi_multiplier = options_.tpi_multiplier;
    setup.topk = options_.topk;
    deriver_.emplace(std::move(setup));
    clock_ = options_.clock_seconds ? options_.clock_seconds : std::function<double()>(seconds_now);
    interval_start_ = clock_();
  }

  microbatch_result on_microbatch(const microbatch_event& event) noexcept {
    if (mutex_.held_by_this_thread()) {
      refuse_reentrant("on_microbatch");
      return microbatch_result::reentrant;
    }
    std::lock_guard<detail::owned_mutex> lock(mutex_);
    if (flushed_) {
      ++health_.events_after_flush;
      return microbatch_result::after_flush;
    }
    current_.microbatches += 1;
    try {
      if (event.samples < 0) throw error("samples must be >= 0 (got " + std::to_string(event.samples) + ")");
      if (event.label_tokens && *event.label_tokens < 0) throw error("label_tokens must be >= 0");
      if (event.loss_sum && !std::isfinite(*event.loss_sum)) throw error("loss_sum is not finite");
      check_loss_pair(event.loss_sum, event.label_tokens);
      const batch_counts counts = detail::count_event(event, geometry_);
      check_label_tokens_within(event.loss_sum, event.label_tokens, counts.real_tokens);
      interval_counters next = current_;
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
      current_ = next;
    } catch (const std::exception& e) {
      ++health_.bad_microbatches;
      warn_rate_limited(last_batch_warning_, "flopmeter: micro-batch not counted: {}", e.what());
      return microbatch_result::rejected;
    }
    return microbatch_result::counted;
  }

  // Destroyed without flush(): the last interval is flushed here, bounded like any on_log by the collective
  // timeout (not at all while backing off), so that it does not vanish (throughput.h).
  // Destroying the plugin from inside its own call-out (its last shared_ptr dropped in a sink) is outside the
  // contract (throughput.h); flush() then refuses instead of deadlocking.
  ~impl() {
    bool had_interval = false;
    if (mutex_.held_by_this_thread()) return;
    {
      std::lock_guard<detail::owned_mutex> lock(mutex_);
      had_interval = !flushed_ && in_flight_.pending != nullptr;
    }
    if (had_interval) flush();
  }

  void on_log(const log_event& event) noexcept {
    if (mutex_.held_by_this_thread()) {
      refuse_reentrant("on_log");
      return;
    }
    std::lock_guard<detail::owned_mutex> lock(mutex_);
    if (flushed_) {
      ++health_.events_after_flush;
      return;
    }
    // Each stage is guarded on its own: whatever fails, this rank still takes part in the log's collective
    // (the other ranks are issuing theirs) and the next interval starts here.
    ++log_sequence_;
    // The interval ends here whatever becomes of its collective: its tokens and samples join the running
    // totals now, so a skipped or failed interval still counts in train/tokens_seen at the next record.
    tokens_seen_ += static_cast<double>(current_.counts.real_tokens);
    samples_seen_ += static_cast<double>(current_.samples);
    const double now = read_clock();
    const bool was_in_flight = in_flight_.pending != nullptr;
    try {
      emit_in_flight();
    } catch (const std::exception& e) {
      warn_rate_limited(last_log_warning_, "flopmeter: on_log failed: {}", e.what());
    }
    try {
      // Optional fields that break their rules are left out, with one warning (detail::check_log_fields).
      const detail::checked_log checked = detail::check_log_fields(event);
      if (!checked.dropped.empty()) {
        warn_rate_limited(last_log_field_warning_, "flopmeter: step {}: left out of the record: {}", event.step,
                          checked.dropped);
      }
      start_collective(checked.event, now - interval_start_, was_in_flight);
    } catch (const std::exception& e) {
      warn_rate_limited(last_log_warning_, "flopmeter: on_log failed: {}", e.what());
    }
    interval_start_ = now;
    current_ = interval_counters{};
  }

  void flush() noexcept {
    if (mutex_.held_by_this_thread()) {
      refuse_reentrant("flush");
      return;
    }
    std::lock_guard<detail::owned_mutex> lock(mutex_);
    if (flushed_) return;
    flushed_ = true;
    try {
      emit_in_flight();
    } catch (const std::exception& e) {
      warn_rate_limited(last_log_warning_, "flopmeter: flush failed: {}", e.what());
    }
  }

  // Called from inside a call-out of this plugin (a sink reading health in its callback): this thread holds
  // the lock, so nobody else changes the counters; read them directly.
  throughput_health health() const {
    if (mutex_.held_by_this_thread()) return health_with_sinks();
    std::lock_guard<detail::owned_mutex> lock(mutex_);
    return health_with_sinks();
  }
  bool in_callout() const noexcept { return mutex_.held_by_this_thread(); }
  const coefficients& flop_coefficients() const { return coefficients_; }
  const model_spec& model() const { return options_.model; }
  flop_scope scope() const { return options_.scope; }
  std::optional<double> peak() const { return peak_; }

 private:
  struct in_flight {
    std::unique_ptr<pending_collective> pending;
    log_event event;
  };

  // Where a rank that found the rows out of step resumes (see the comment at the top).
  struct resume_point {
    bool by_step = true;          // resume at the first log whose step is beyond `step`; otherwise at the
                                  // first log whose sequence number is beyond `sequence`
    double step = 0;
    std::int64_t sequence = 0;    // the sequence number of that latest log; adopted when resuming by step
  };

  // health_ plus the records the sinks dropped (each sink counts its own failures).
  throughput_health health_with_sinks() const {
    throughput_health h = health_;
    for (const auto& s : options_.sinks) {
      if (s) h.dropped_records += s->failures();
    }
    return h;
  }

  // The clock, or NaN when it throws. A NaN (or a clock that went backwards) makes the intervals on either
  // side of it non-positive or not a number: derive() skips them and the one after is measured again.
  double read_clock() noexcept {
    try {
      return clock_();
    } catch (...) {
      return std::numeric_limits<double>::quiet_NaN();
    }
  }

  bool backing_off() const { return consecutive_failures_ >= kMaxConsecutiveFailures; }

  // A hook called from inside one of this plugin's call-outs on the thread that holds the lock: refused,
  // counted, logged once a minute. Written without locking: this thread holds the lock (owned_mutex.h).
  void refuse_reentrant(const char* hook) noexcept {
    ++health_.reentrant_calls;
    warn_rate_limited(reentrant_warning_,
                      "flopmeter: {} refused: called from inside this plugin's own sink, logger, clock or "
                      "communicator on the thread that is emitting (it would deadlock); call it after the hook "
                      "that emitted returns",
                      hook);
  }

  // One warning a minute per kind (`limit`); the ones held back are counted in the next.
  template <class... Args>
  void warn_rate_limited(detail::rate_limiter& limit, const char* format, const Args&... args) noexcept {
    if (t_inside_logger) return;
    try {
      if (!limit.allow()) return;
      const std::uint64_t suppressed = limit.take_suppressed();
      std::string message = fmt::format(fmt::runtime(format), args...);
      if (suppressed > 0) message += fmt::format(" ({} similar warnings suppressed)", suppressed);
      const inside_logger marker;
      // Printable: the arguments include exception texts from the trainer's sinks, clock and communicator.
      logger_->warn("{}", printable_text(message, /*keep_newlines=*/true));
    } catch (...) {
      // Logging must not be the thing that throws into the training loop.
    }
  }

  template <class... Args>
  void log_noexcept(spdlog::level::level_enum level, const char* format, const Args&... args) noexcept {
    if (t_inside_logger) return;
    try {
      const inside_logger marker;
      logger_->log(level, fmt::runtime(format), args...);
    } catch (...) {
    }
  }

  // True (and the interval is skipped) while this rank is getting back in step after rows that did not
  // match; adopts the latest log's sequence number at the log where it resumes.
  bool waiting_to_resync(const log_event& event) {
    if (!resume_) return false;
    if (resume_->by_step) {
      if (!(static_cast<double>(event.step) > resume_->step)) return true;
      log_sequence_ = resume_->sequence + 1;
    } else if (log_sequence_ <= resume_->sequence) {
      return true;
    }
    resume_.reset();
    return false;
  }

  // Fills this rank's row and starts the interval's collective (every rank, every log: never gated on
  // local data).
  // `was_in_flight`: a collective was still out when this log began.
  void start_collective(const log_event& event, double interval_seconds, bool was_in_flight) {
    if (waiting_to_resync(event)) {
      ++health_.skipped_intervals;
      return;
    }
    if (backing_off() && (was_in_flight || log_sequence_ % kRetryEveryLogs != 0)) {
      // The group is broken or out of step (a peer died, hangs, or issued a different number of
      // collectives): a collective per log would block every log for the timeout. Only a probe at the shared
      // retry logs, and none while one is out — nor at a log where one only just resolved.
      ++health_.skipped_intervals;
      return;
    }
    double* row = row_.data();
    std::fill(row_.begin(), row_.end(), 0.0);
    // The counts, not FLOPs: FLOPs are formed from the gathered counts (derive()), identically for counts
    // accumulated here and counts a tensor path adds on the device.
    counts_to_row(current_.counts, row);
    row[row_loss_sum] = current_.loss_sum;
    row[row_label_tokens] = static_cast<double>(current_.label_tokens);
    row[row_microbatches] = static_cast<double>(current_.microbatches);
    row[row_megatron_flops] =
        megatron_.interval_flops(static_cast<double>(current_.counts.device_tokens()), current_.row_tokens_squared,
                                 static_cast<double>(current_.counts.patches), current_.row_tokens_times_patches);
    row[row_interval_seconds] = interval_seconds;
    row[row_peak_memory_bytes] = event.peak_memory_bytes ? static_cast<double>(*event.peak_memory_bytes) : 0.0;
    row[row_data_seconds] = seconds_or_zero(event.data_time);
    row[row_forward_backward_seconds] = seconds_or_zero(event.forward_backward_time);
    if (event.peak_memory_bytes && *event.peak_memory_bytes < 0) row[row_peak_memory_bytes] = 0.0;
    row[row_present] = static_cast<double>(log_sequence_);
    row[row_step] = static_cast<double>(event.step);
    row[row_log_wait_ms] = last_wait_ms_;
    row[row_tokens_seen] = tokens_seen_;
    row[row_samples_seen] = samples_seen_;
    in_flight_.event = event;
    ++health_.collectives_started;
    try {
      in_flight_.pending = comm_->start_allgather(row_.data(), kRowFields, buffer_.data());
    } catch (const std::exception& e) {
      in_flight_.pending.reset();
      collective_failed(std::string("could not start the collective: ") + e.what());
    }
  }

  // A time the trainer gave, or 0 (not reported) when it is negative or not finite: one rank's NaN would
  // otherwise hide the others' figures in the world maximum, and an infinity is not a duration.
  static double seconds_or_zero(const std::optional<std::chrono::duration<double>>& time) {
    if (!time) return 0.0;
    const double seconds = time->count();
    return std::isfinite(seconds) && seconds > 0 ? seconds : 0.0;
  }

  void collective_failed(const std::string& why) {
    ++health_.failed_collectives;
    ++health_.skipped_intervals;
    ++consecutive_failures_;
    warn_rate_limited(last_collective_warning_, "flopmeter: metrics of step {} skipped: {}", in_flight_.event.step,
                      why);
    if (consecutive_failures_ == kMaxConsecutiveFailures) {
      // Once per pause, never rate-limited away: a dashboard going quiet must have a reason in the log.
      log_noexcept(spdlog::level::warn,
                   "flopmeter: reporting paused at step {} after {} failed collectives in a row; probing the group "
                   "every {} logs without blocking, and logging when reporting resumes",
                   in_flight_.event.step, kMaxConsecutiveFailures, kRetryEveryLogs);
    }
  }

  // Why the gathered rows cannot be what the ranks sent, or "" when they can. Every rank fills its row with a
  // finite step and a sequence number >= 1, and the host alone writes this rank's step, sequence number and
  // interval (a tensor path adds counts only). So this rank's own row must come back exactly as sent, and
  // every row must carry a whole sequence number >= 1 and a finite step. An all-reduce over a zero-filled
  // buffer breaks the first rule when two ranks write the same row (world_size smaller than the all-reduce's
  // group, or two ranks with one index: the row reads twice what was sent, and every rate would be 1/N) and
  // the second when a row stays empty (world_size larger than the group).
  std::string rows_no_rank_sent() const {
    const double* mine = row(rank_);
    const auto shown = [](double value) {
      return std::isfinite(value) ? std::to_string(static_cast<long long>(value)) : std::string("not a number");
    };
    const std::string remedy = " (values no rank sent: the all-reduce or all-gather is broken, or world_size " +
                               std::to_string(world_) + " and rank " + std::to_string(rank_) +
                               " do not describe its group, every rank with its own index); the interval is discarded";
    // NaN comes back as NaN (NaN + 0 is NaN): an interval a bad clock made NaN is the trainer's, skipped by
    // derive(), not a sign of a broken collective.
    const auto same = [](double got, double sent) { return got == sent || (std::isnan(got) && std::isnan(sent)); };
    if (!same(mine[row_step], row_[row_step]) || !same(mine[row_present], row_[row_present]) ||
        !same(mine[row_interval_seconds], row_[row_interval_seconds])) {
      return "the collective returned this rank's own row (rank " + std::to_string(rank_) + ") changed: step " +
             shown(mine[row_step]) + " and log " + shown(mine[row_present]) + " where step " + shown(row_[row_step]) +
             " and log " + shown(row_[row_present]) + " were sent" + remedy;
    }
    for (std::int64_t r = 0; r < world_; ++r) {
      const double* x = row(r);
      const bool filled = x[row_present] >= 1 && x[row_present] < kExactIntegerLimit &&
                          std::floor(x[row_present]) == x[row_present] && std::isfinite(x[row_step]);
      if (!filled) {
        return "the collective returned a row for rank " + std::to_string(r) + " that no rank fills that way (step " +
               shown(x[row_step]) + ", log " + shown(x[row_present]) + ")" + remedy;
      }
    }
    return "";
  }

  // True when the gathered interval comes before any rank has recorded a micro-batch: every rank's running
  // totals (tokens and samples seen) are 0, and so are its interval's micro-batches and counts. That is the
  // warm-up on_log throughput.h recommends (called before the first micro-batch to start the first interval
  // after set-up): its record would be all zeros (0 tok/s, 0% MFU), a point that is no measurement, so it is
  // not written to the sinks and not counted in health() (nothing went wrong). Decided from the rows alone, so
  // every rank decides the same. A later interval without micro-batches has a rank with a token or sample seen
  // and is emitted as usual.
  bool is_warm_up_interval() const {
    for (std::int64_t r = 0; r < world_; ++r) {
      const double* x = row(r);
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

  // The outcome of comparing the gathered rows' log identities.
  struct step_check {
    bool match = true;
    std::int64_t other_rank = 0;   // the first rank whose log differs from this rank's
    double other_step = 0;
  };

  // Compares every row's (step, sequence number) with this rank's. On a mismatch sets resume_ when this rank
  // is behind the latest log in the rows, or adopts that log's sequence number when it is at it.
  step_check check_rows_in_step() {
    const double my_step = row(rank_)[row_step];
    const double my_sequence = row(rank_)[row_present];
    step_check check;
    double latest_step = my_step;
    for (std::int64_t r = 0; r < world_; ++r) {
      const double* x = row(r);
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
    // The latest log: the highest step, and of the rows at it the highest sequence number. Every rank
    // computes the same from the same rows.
    double latest_sequence = 0;
    for (std::int64_t r = 0; r < world_; ++r) {
      if (row(r)[row_step] == latest_step) latest_sequence = std::max(latest_sequence, row(r)[row_present]);
    }
    if (!(latest_sequence >= 0 && latest_sequence < kExactIntegerLimit)) return check;  // not a row of ours
    const auto sequence = static_cast<std::int64_t>(latest_sequence);
    if (my_step < latest_step) {
      resume_ = resume_point{true, latest_step, sequence};
    } else if (my_sequence < latest_sequence) {
      resume_ = resume_point{false, latest_step, sequence};  // the steps agree: behind in sequence only
    }
    return check;
  }

  // Waits for the previous log's collective and emits its metrics.
  void emit_in_flight() {
    if (!in_flight_.pending) return;
    // Backing off, a probe is only polled: a broken group must not block every log.
    const std::chrono::milliseconds timeout = backing_off() ? std::chrono::milliseconds(0) : options_.collective_timeout;
    const double wait_start = seconds_now();
    const collective_status status = in_flight_.pending->wait(timeout);
    const double log_wait_ms = (seconds_now() - wait_start) * 1e3;
    last_wait_ms_ = log_wait_ms;
    if (status == collective_status::pending && backing_off()) return;  // the probe stays out; see start_collective
    if (status != collective_status::done) {
      collective_failed(status == collective_status::pending
                            ? "the collective did not finish within " +
                                  std::to_string(options_.collective_timeout.count()) + " ms"
                            : in_flight_.pending->error_message());
      in_flight_.pending.reset();
      return;
    }
    in_flight_.pending.reset();
    if (const std::string broken = rows_no_rank_sent(); !broken.empty()) {
      collective_failed(broken);  // not a working group: counts towards backing off
      return;
    }
    // The collective completed: the group works. Reporting resumes if it was paused.
    if (backing_off()) {
      log_noexcept(spdlog::level::info, "flopmeter: reporting resumed: the collective of step {} completed",
                   in_flight_.event.step);
    }
    consecutive_failures_ = 0;
    const step_check check = check_rows_in_step();
    if (!check.match) {
      ++health_.failed_collectives;
      ++health_.skipped_intervals;
      ++health_.out_of_step_intervals;
      if (!out_of_step_reported_) {
        out_of_step_reported_ = true;
        log_noexcept(spdlog::level::warn,
                     "flopmeter: ranks out of step: this rank's row of step {} met rank {}'s of step {} (a rank "
                     "skipped or added an on_log, or issued no collective at some log); the interval is "
                     "discarded and the ranks get back in step at the next log they all share",
                     in_flight_.event.step, check.other_rank, check.other_step);
      }
      return;
    }
    out_of_step_reported_ = false;
    // Batches a tensor path rejected on the device surface here, one log later, without a sync.
    // Only a finite count in range converts: anything else in that slot would be undefined behaviour to cast.
    const double device_rejected = row(rank_)[row_device_rejected];
    if (device_rejected > 0 && device_rejected < kExactIntegerLimit) {
      health_.bad_microbatches += static_cast<std::uint64_t>(device_rejected);
    }
    if (is_warm_up_interval()) return;  // the warm-up on_log: nothing to report, nothing went wrong
    const double emit_start = seconds_now();
    derive_context context;
    context.step = in_flight_.event.step;
    context.learning_rate = in_flight_.event.learning_rate;
    context.grad_norm = in_flight_.event.grad_norm;
    context.log_wait_ms = log_wait_ms;
    context.log_emit_ms = last_emit_ms_;
    derive_result result = deriver_->derive(buffer_.data(), world_, context);
    if (!result.derived) {
      ++health_.skipped_intervals;
      warn_rate_limited(last_interval_warning_, "flopmeter: metrics of step {} skipped: {}", in_flight_.event.step,
                        result.why);
      return;
    }
    if (!result.warning.empty()) {
      warn_rate_limited(last_derive_warning_, "flopmeter: step {}: {}", in_flight_.event.step, result.warning);
    }
    if (emits_here()) {
      append_health(result.record);
      for (const auto& s : options_.sinks) {
        if (s) s->write(result.record);
      }
    }
    last_emit_ms_ = (seconds_now() - emit_start) * 1e3;
  }

  // This rank's health counters, as of this record, at its end (METRICS.md, "When things go wrong").
  void append_health(metrics_record& record) const {
    const throughput_health h = health_with_sinks();
    auto& v = record.values;
    v.emplace_back(metric::kHealthBadMicrobatches, static_cast<double>(h.bad_microbatches));
    v.emplace_back(metric::kHealthFailedCollectives, static_cast<double>(h.failed_collectives));
    v.emplace_back(metric::kHealthSkippedIntervals, static_cast<double>(h.skipped_intervals));
    v.emplace_back(metric::kHealthOutOfStepIntervals, static_cast<double>(h.out_of_step_intervals));
    v.emplace_back(metric::kHealthDroppedRecords, static_cast<double>(h.dropped_records));
    v.emplace_back(metric::kHealthReentrantCalls, static_cast<double>(h.reentrant_calls));
  }

  bool emits_here() const { return options_.emit == emit_ranks::all || rank_ == 0; }

  const double* row(std::int64_t r) const { return buffer_.data() + static_cast<std::size_t>(r) * kRowFields; }

  throughput_options options_;
  std::shared_ptr<communicator> comm_;
  parallel_layout layout_;
  std::shared_ptr<spdlog::logger> logger_;
  coefficients coefficients_;  // of a micro-batch with images (the regime's)
  vision_geometry geometry_;
  std::optional<double> peak_;
  std::int64_t rank_ = 0;
  std::int64_t world_ = 1;
  std::optional<metrics_deriver> deriver_;

  mutable detail::owned_mutex mutex_;  // held_by_this_thread(): inside one of our own call-outs
  std::function<double()> clock_;
  double interval_start_ = 0;
  interval_counters current_;
  std::vector<double> row_;     // this rank's row of the collective in flight (the all-gather's input)
  std::vector<double> buffer_;  // every rank's row once it completes
  in_flight in_flight_;
  // This rank's running totals since it started, every interval included (row_tokens_seen, row_samples_seen).
  double tokens_seen_ = 0;
  double samples_seen_ = 0;
  double last_emit_ms_ = 0;
  double last_wait_ms_ = 0;     // this rank's latest perf/log_wait_ms, sent in its next row
  int consecutive_failures_ = 0;
  std::int64_t log_sequence_ = 0;  // on_log calls so far; the same on every rank (the rows' tag)
  std::optional<resume_point> resume_;
  bool out_of_step_reported_ = false;
  bool flushed_ = false;
  throughput_health health_;
  // One rate limiter per kind of warning (the names are those of the time points they replaced).
  detail::rate_limiter last_batch_warning_, last_log_warning_, last_collective_warning_, last_interval_warning_;
  detail::rate_limiter last_derive_warning_;  // what an emitted record leaves out (derive_result::warning)
  detail::rate_limiter last_log_field_warning_;  // log fields left out (detail::check_log_fields)
  detail::rate_limiter reentrant_warning_;  // hooks refused from inside our own call-outs (refuse_reentrant)
  // Last: on_microbatch reads only megatron_ of these, and the members it uses most keep their places.
  detail::megatron_billing megatron_;
  regime_coefficients regime_coefficients_;
};

std::shared_ptr<throughput_plugin> throughput_plugin::create(throughput_options options,
                                                             std::shared_ptr<communicator> comm) {
  return std::shared_ptr<throughput_plugin>(
      new throughput_plugin(std::make_unique<impl>(std::move(options), std::move(comm))));
}

throughput_plugin::throughput_plugin(std::unique_ptr<impl> state) : impl_(std::move(state)) {}
throughput_plugin::~throughput_plugin() = default;

void throughput_plugin::on_microbatch(const microbatch_event& event) noexcept { (void)impl_->on_microbatch(event); }
microbatch_result throughput_plugin::record_microbatch(const microbatch_event& event) noexcept {
  return impl_->on_microbatch(event);
}
void throughput_plugin::on_log(const log_event& event) noexcept { impl_->on_log(event); }
void throughput_plugin::flush() noexcept { impl_->flush(); }
throughput_health throughput_plugin::health() const { return impl_->health(); }
bool throughput_plugin::in_callout() const noexcept { return impl_->in_callout(); }
const coefficients& throughput_plugin::flop_coefficients() const { return impl_->flop_coefficients(); }
const model_spec& throughput_plugin::model() const { return impl_->model(); }
flop_scope throughput_plugin::scope() const { return impl_->scope(); }
std::optional<double> throughput_plugin::peak_tflops_per_gpu() const { return impl_->peak(); }

std::vector<std::int64_t> accumulation_schedule(double m) {
  if (!std::isfinite(m) || m < 1.0) {
    throw error("accumulation_schedule: tpi_multiplier must be a finite number >= 1 (got " + std::to_string(m) + ")");
  }
  // m as an exact fraction p/q with q <= 10^6 (the nearest one): decimal multipliers such as 1.1 are then
  // exact, where (i+1)*m in floating point would never be "whole".
  constexpr std::int64_t kDenominator = 1000000;
  if (m > 1e12) throw error("accumulation_schedule: tpi_multiplier " + std::to_string(m) + " is too large");
  std::int64_t p = static_cast<std::int64_t>(std::llround(m * static_cast<double>(kDenominator)));
  std::int64_t q = kDenominator;
  const std::int64_t g = std::gcd(p, q);
  p /= g;
  q /= g;
  // The schedule has q entries: (i+1)*p/q is first whole at i+1 = q.
  std::vector<std::int64_t> schedule;
  schedule.reserve(static_cast<std::size_t>(q));
  for (std::int64_t i = 0; i < q; ++i) {
    schedule.push_back((i + 1) * p / q - i * p / q);  // floor((i+1)m) - floor(im), exact in integers
  }
  return schedule;
}

}  // namespace flopmeter
