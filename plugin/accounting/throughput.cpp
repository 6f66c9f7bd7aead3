// The throughput plugin: per-rank interval counters, one all-reduce per log, deferred emission.
//
// The collective. Every rank owns one row of kRowFields doubles in a world_size x kRowFields buffer, zeroes the
// other rows and all-reduces with SUM: afterwards every rank holds every rank's row (an all-gather done as
// an all-reduce, which every backend supports). From the rows each rank derives DP-group sums, world maxima
// and the per-rank top-k breakdown locally, so one collective serves every metric. At 16,384 ranks the
// buffer is 16,384 x kRowFields (19) x 8 B = 2.4 MiB per log.
//
// Every row carries the log's sequence number (row_present): every rank counts its on_log calls, and they
// all call on_log at the same steps, so the rows of one collective agree unless collectives were paired
// across different logs (a rank that gave up on a collective its peers still ran). Such a result is
// discarded, never derived: a mix of intervals would be a wrong number.
//
// Failures. A failed or timed-out collective costs its interval. After kMaxConsecutiveFailures in a row
// the plugin backs off: it stops blocking on_log for the timeout and issues a collective (a probe) only at
// logs whose sequence number is a multiple of kRetryEveryLogs — the same logs on every rank, since the
// schedule depends on nothing but the sequence number — and polls it without waiting at later logs. A
// probe still pending is kept (no new collective until it resolves), so a rank that is ahead cannot run
// further ahead of a slow one, and ranks that issued different numbers of collectives fall back into step
// (see start_collective). When a probe completes with matching rows, its interval is emitted and
// reporting resumes with one collective per log.
//
// Deferral. on_log(k) closes interval k and starts its collective; the metrics of interval k are derived and
// emitted at on_log(k+1) (or flush()), after waiting for that collective — which by then has had a whole log
// interval to finish, so perf/log_wait_ms is ~0 unless something stalls.
#include "flopmeter/throughput.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "flopmeter/error.h"
#include "flopmeter/megatron.h"
#include "flopmeter/model_config.h"
#include "accounting/row_layout.h"

namespace flopmeter {
namespace {

using namespace detail;  // row_layout.h

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr int kMaxConsecutiveFailures = 3;
constexpr std::int64_t kRetryEveryLogs = 16;
// Counts travel in the row as doubles, which hold every integer below 2^53 exactly; an int64 count of 2^53
// or more becomes a double of at least 2^53 (2^53 + 1 rounds to 2^53). derive() refuses a row with such a
// count (or a negative one, or not a number) rather than round it or, at 2^63, convert it back to int64
// with undefined behaviour. Reaching it takes 9e15 tokens or pairs in one rank's interval.
constexpr double kExactCountLimit = 9007199254740992.0;  // 2^53, exclusive
constexpr std::chrono::seconds kWarnEvery{60};

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
};

}  // namespace

class throughput_plugin::impl {
 public:
  impl(throughput_options options, std::shared_ptr<communicator> comm)
      : options_(std::move(options)),
        comm_(std::move(comm)),
        layout_(options_.parallel, comm_ ? comm_->world_size() : 1, options_.rank_order) {
    if (!comm_) throw error("throughput plugin: a communicator is required (make_local_communicator() for one process)");
    logger_ = options_.logger;
    if (!logger_) {
      // A private logger: never registered, never the default, so the trainer's spdlog setup is untouched.
      logger_ = std::make_shared<spdlog::logger>("flopmeter", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    }
    if (options_.topk < 0) throw error("throughput plugin: topk must be >= 0 (got " + std::to_string(options_.topk) + ")");
    if (!(options_.tpi_multiplier >= 1.0) || !std::isfinite(options_.tpi_multiplier)) {
      throw error("throughput plugin: tpi_multiplier must be a finite number >= 1 (got " +
                  std::to_string(options_.tpi_multiplier) + ")");
    }
    if (options_.collective_timeout.count() < 0) throw error("throughput plugin: collective_timeout must be >= 0");
    validate_model_spec(options_.model);
    coefficients_ = compute_coefficients(options_.model);
    geometry_ = geometry_of(options_.model);
    rank_ = comm_->rank();
    world_ = comm_->world_size();
    dp_group_ = layout_.dp_group(rank_);

    if (options_.sanity_check) {
      for (const std::int64_t s : {4096, 8192, 32768}) {
        const check_report report = run_sanity_check(options_.model, s);
        if (!report.pass) {
          std::string failed;
          for (const check_row& row : report.rows) {
            if (!row.pass) failed += "\n  " + row.term + ": ratio " + std::to_string(row.ratio) + ", expected " +
                                     std::to_string(row.expected_ratio);
          }
          throw error("throughput plugin: sanity check failed for model '" + options_.model.name + "' at S=" +
                      std::to_string(s) + ":" + failed);
        }
      }
    }

    if (options_.peak_tflops_per_gpu) {
      if (!(*options_.peak_tflops_per_gpu > 0) || !std::isfinite(*options_.peak_tflops_per_gpu)) {
        throw error("throughput plugin: peak_tflops_per_gpu must be a finite number > 0 (got " +
                    std::to_string(*options_.peak_tflops_per_gpu) + ")");
      }
      peak_ = options_.peak_tflops_per_gpu;
    } else if (!options_.gpu.empty()) {
      if (const auto match = find_peak(options_.gpu, options_.precision)) peak_ = match->tflops;
    }
    if (!peak_ && rank_ == 0 && options_.gpu.empty()) {
      logger_->warn("flopmeter: neither peak_tflops_per_gpu nor gpu is configured; perf/mfu will not be reported");
    } else if (!peak_ && rank_ == 0) {
      // The known names, so the message says how to fix it (the tool has no command that lists them).
      std::string known;
      for (const peak_entry& entry : peak_table()) known += std::string(known.empty() ? "" : ", ") + entry.name;
      logger_->warn("flopmeter: no {} peak FLOP/s for GPU '{}'; perf/mfu will not be reported. Set "
                    "peak_tflops_per_gpu, or gpu to one of: {}.",
                    to_string(options_.precision), options_.gpu, known);
    }
    buffer_.assign(static_cast<std::size_t>(world_) * kRowFields, 0.0);
    clock_ = options_.clock_seconds ? options_.clock_seconds : std::function<double()>(seconds_now);
    interval_start_ = clock_();
  }

  microbatch_result on_microbatch(const microbatch_event& event) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    if (flushed_) {
      ++health_.events_after_flush;
      return microbatch_result::after_flush;
    }
    current_.microbatches += 1;
    try {
      const std::size_t formats = (event.document_lengths.empty() ? 0 : 1) + (event.cu_seqlens.empty() ? 0 : 1) +
                                  (event.positions.empty() ? 0 : 1);
      if (formats > 1) throw error("flopmeter: a micro-batch gives more than one of document_lengths, cu_seqlens, positions");
      if (event.samples < 0) throw error("flopmeter: samples must be >= 0 (got " + std::to_string(event.samples) + ")");
      if (event.label_tokens && *event.label_tokens < 0) throw error("flopmeter: label_tokens must be >= 0");
      if (event.loss_sum && !std::isfinite(*event.loss_sum)) throw error("flopmeter: loss_sum is not finite");
      batch_counts counts;
      if (!event.cu_seqlens.empty()) {
        counts = count_from_cu_seqlens(event.cu_seqlens, event.padding_tokens, event.image_grids, geometry_);
      } else if (!event.positions.empty()) {
        counts = count_from_positions(event.positions, event.padding_tokens, event.image_grids, geometry_);
      } else {
        counts = count_from_lengths(event.document_lengths, event.padding_tokens, event.image_grids, geometry_);
      }
      interval_counters next = current_;
      next.counts += counts;
      // Checked like the counts: samples or label tokens summed past int64 (a trainer passing garbage) were
      // signed overflow, and a loss sum past the double range an infinite train/loss.
      if (__builtin_add_overflow(next.samples, event.samples, &next.samples)) {
        throw error("flopmeter: the interval's sample count overflows a 64-bit count");
      }
      if (event.loss_sum && event.label_tokens) {
        next.loss_sum += *event.loss_sum;
        if (!std::isfinite(next.loss_sum)) throw error("flopmeter: the interval's loss sum is not finite");
        if (__builtin_add_overflow(next.label_tokens, *event.label_tokens, &next.label_tokens)) {
          throw error("flopmeter: the interval's label token count overflows a 64-bit count");
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

  void on_log(const log_event& event) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    if (flushed_) {
      ++health_.events_after_flush;
      return;
    }
    // Each stage is guarded on its own: whatever fails, this rank still takes part in the log's collective
    // (the other ranks are issuing theirs) and the next interval starts here.
    ++log_sequence_;
    const double now = read_clock();
    const bool was_in_flight = in_flight_.pending != nullptr;
    try {
      emit_in_flight();
    } catch (const std::exception& e) {
      warn_rate_limited(last_log_warning_, "flopmeter: on_log failed: {}", e.what());
    }
    try {
      start_collective(event, now - interval_start_, was_in_flight);
    } catch (const std::exception& e) {
      warn_rate_limited(last_log_warning_, "flopmeter: on_log failed: {}", e.what());
    }
    interval_start_ = now;
    current_ = interval_counters{};
  }

  void flush() noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    if (flushed_) return;
    flushed_ = true;
    try {
      emit_in_flight();
    } catch (const std::exception& e) {
      warn_rate_limited(last_log_warning_, "flopmeter: flush failed: {}", e.what());
    }
  }

  throughput_health health() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return health_;
  }
  const coefficients& flop_coefficients() const { return coefficients_; }
  std::optional<double> peak() const { return peak_; }

 private:
  struct in_flight {
    std::unique_ptr<pending_collective> pending;
    log_event event;
  };

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

  template <class... Args>
  void warn_rate_limited(std::chrono::steady_clock::time_point& last, const char* format, const Args&... args) noexcept {
    try {
      const auto now = std::chrono::steady_clock::now();
      if (last.time_since_epoch().count() != 0 && now - last < kWarnEvery) return;
      last = now;
      logger_->warn(fmt::runtime(format), args...);
    } catch (...) {
      // Logging must not be the thing that throws into the training loop.
    }
  }

  // Fills this rank's row and starts the interval's collective (every rank, every log: never gated on
  // local data).
  // `was_in_flight`: a collective was still out when this log began.
  void start_collective(const log_event& event, double interval_seconds, bool was_in_flight) {
    if (backing_off() && (was_in_flight || log_sequence_ % kRetryEveryLogs != 0)) {
      // The group is broken or out of step (a peer died, hangs, or issued a different number of
      // collectives): a collective per log would block every log for the timeout. Only a probe at the shared
      // retry logs, and none while one is out — nor at a log where one only just resolved: if ranks have
      // issued different numbers of collectives, the one that is behind issues a probe at each retry log
      // (each pairs with one the others issued earlier and resolves at once) while the one ahead holds its
      // unmatched probe, so every retry log closes the gap by one and then both start the same probe.
      ++health_.skipped_intervals;
      return;
    }
    std::fill(buffer_.begin(), buffer_.end(), 0.0);
    double* row = buffer_.data() + static_cast<std::size_t>(rank_) * kRowFields;
    // The counts, not FLOPs: FLOPs are formed from the gathered counts (derive()), identically for counts
    // accumulated here and counts a tensor path adds on the device.
    counts_to_row(current_.counts, row);
    row[row_samples] = static_cast<double>(current_.samples);
    row[row_loss_sum] = current_.loss_sum;
    row[row_label_tokens] = static_cast<double>(current_.label_tokens);
    row[row_microbatches] = static_cast<double>(current_.microbatches);
    row[row_interval_seconds] = interval_seconds;
    row[row_peak_memory_bytes] = event.peak_memory_bytes ? static_cast<double>(*event.peak_memory_bytes) : 0.0;
    row[row_data_seconds] = seconds_or_zero(event.data_time);
    row[row_forward_backward_seconds] = seconds_or_zero(event.forward_backward_time);
    if (event.peak_memory_bytes && *event.peak_memory_bytes < 0) row[row_peak_memory_bytes] = 0.0;
    row[row_present] = static_cast<double>(log_sequence_);
    in_flight_.event = event;
    ++health_.collectives_started;
    try {
      in_flight_.pending = comm_->start_allreduce_sum(buffer_.data(), buffer_.size());
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
    warn_rate_limited(last_collective_warning_, "flopmeter: metrics of step {} skipped: {}{}", in_flight_.event.step, why,
                      backing_off() ? " (after repeated failures, retrying every " + std::to_string(kRetryEveryLogs) +
                                          " logs without blocking)"
                                    : std::string());
  }

  // Waits for the previous log's collective and emits its metrics.
  void emit_in_flight() {
    if (!in_flight_.pending) return;
    // Backing off, a probe is only polled: a broken group must not block every log.
    const std::chrono::milliseconds timeout = backing_off() ? std::chrono::milliseconds(0) : options_.collective_timeout;
    const double wait_start = seconds_now();
    const collective_status status = in_flight_.pending->wait(timeout);
    const double log_wait_ms = (seconds_now() - wait_start) * 1e3;
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
    if (!rows_of_one_log()) {
      collective_failed("the ranks' rows belong to different logs (collectives were paired out of order)");
      return;
    }
    consecutive_failures_ = 0;
    // Batches a tensor path rejected on the device surface here, one log later, without a sync.
    // Only a finite count in range converts: anything else in that slot would be undefined behaviour to cast.
    const double device_rejected = row(rank_)[row_device_rejected];
    if (device_rejected > 0 && device_rejected < 9007199254740992.0) {  // 2^53
      health_.bad_microbatches += static_cast<std::uint64_t>(device_rejected);
    }
    const double emit_start = seconds_now();
    metrics_record record;
    if (!derive(log_wait_ms, record)) {
      ++health_.skipped_intervals;
      return;
    }
    if (emits_here()) {
      for (const auto& s : options_.sinks) {
        if (s) s->write(record);
      }
    }
    last_emit_ms_ = (seconds_now() - emit_start) * 1e3;
  }

  bool emits_here() const { return options_.emit == emit_ranks::all || rank_ == 0; }

  const double* row(std::int64_t r) const { return buffer_.data() + static_cast<std::size_t>(r) * kRowFields; }

  // True when every rank's row carries the sequence number of the log this collective was started at.
  bool rows_of_one_log() const {
    const double expected = row(rank_)[row_present];
    for (std::int64_t r = 0; r < world_; ++r) {
      if (row(r)[row_present] != expected) return false;
    }
    return true;
  }

  // Derives every metric from the gathered rows. Returns false (interval skipped) when a rank's row is
  // missing or its interval time is not positive: a rate over a zero or negative interval is not a number.
  bool derive(double log_wait_ms, metrics_record& record) {
    const double tp = static_cast<double>(layout_.tp());
    const double ranks_per_replica = static_cast<double>(layout_.tp() * layout_.cp() * layout_.pp());
    const double model_parallel_share = static_cast<double>(layout_.cp() * layout_.pp());
    const double world = static_cast<double>(world_);

    // Per-rank rows (each with its own interval, so rank skew shows in its row).
    per_rank_.resize(static_cast<std::size_t>(world_));
    for (std::int64_t r = 0; r < world_; ++r) {
      const double* x = row(r);
      const double t = x[row_interval_seconds];
      if (!(t > 0) || !std::isfinite(t)) {
        warn_rate_limited(last_interval_warning_,
                          "flopmeter: metrics of step {} skipped: rank {} reported an interval of {} s", in_flight_.event.step,
                          r, t);
        return false;
      }
      for (std::size_t f = 0; f < kRowCountFields; ++f) {
        if (!(x[f] >= 0 && x[f] < kExactCountLimit)) {
          warn_rate_limited(last_interval_warning_,
                            "flopmeter: metrics of step {} skipped: rank {} reported a count of {} in one interval, "
                            "beyond the 2^53 a row carries exactly",
                            in_flight_.event.step, r, x[f]);
          return false;
        }
      }
      rank_row& out = per_rank_[static_cast<std::size_t>(r)];
      const batch_counts counts = counts_from_row(x);
      // Each rank of a TP group holds the same micro-batch and does 1/tp of its matmul work: its share.
      out.real_tokens = static_cast<double>(counts.real_tokens);
      out.device_tokens = static_cast<double>(counts.device_tokens());
      out.flops = compute_flops(coefficients_, counts, options_.scope).total() / tp;
      out.rank = r;
      // A replica's tokens are seen by all tp*cp*pp ranks that share its micro-batches; attributing 1/(tp*cp*pp)
      // of them to each makes the rows sum to the job's tokens/s.
      out.tokens_per_second = out.real_tokens / ranks_per_replica / t;
      // flops is the rank's TP share; CP and PP split that share further between cp*pp ranks.
      out.tflops = out.flops / model_parallel_share / t / 1e12;
      out.step_time = x[row_microbatches] > 0 ? t / x[row_microbatches] : std::numeric_limits<double>::quiet_NaN();
      out.mem_gib = x[row_peak_memory_bytes] / kGiB;
    }

    // Additive figures: sums over this rank's DP group (TP/CP/PP ranks share micro-batches: not added).
    double real = 0, device = 0, samples = 0, loss = 0, labels = 0;
    for (const std::int64_t r : dp_group_) {
      const double* x = row(r);
      const rank_row& rr = per_rank_[static_cast<std::size_t>(r)];
      real += rr.real_tokens;
      device += rr.device_tokens;
      samples += x[row_samples];
      loss += x[row_loss_sum];
      labels += x[row_label_tokens];
    }
    double max_mem = 0, max_data = 0, max_fwd_bwd = 0, sum_tps = 0, sum_tflops = 0, sum_step = 0;
    bool step_time_known = true;
    for (const rank_row& r : per_rank_) {
      sum_tps += r.tokens_per_second;
      sum_tflops += r.tflops;
      sum_step += r.step_time;
      step_time_known = step_time_known && std::isfinite(r.step_time);
    }
    for (std::int64_t r = 0; r < world_; ++r) {
      max_mem = std::max(max_mem, row(r)[row_peak_memory_bytes]);
      max_data = std::max(max_data, row(r)[row_data_seconds]);
      max_fwd_bwd = std::max(max_fwd_bwd, row(r)[row_forward_backward_seconds]);
    }
    tokens_seen_ += real;
    samples_seen_ += samples;

    record.step = in_flight_.event.step;
    auto& v = record.values;
    v.clear();
    // Headline = sum of the per-rank rows; with equal intervals t this is dp_sum(tokens) / t.
    v.emplace_back("perf/tokens_per_second", sum_tps);
    v.emplace_back("perf/tokens_per_second_per_gpu", sum_tps / world);
    // Per GPU over every GPU of the job: with equal intervals, dp_sum(flops) * tp / t / world / 1e12.
    const double tflops_per_gpu = sum_tflops / world;
    v.emplace_back("perf/tflops_per_second", tflops_per_gpu);
    if (peak_) v.emplace_back("perf/mfu", tflops_per_gpu / *peak_ * 100.0);
    if (step_time_known) {
      const double step_time = sum_step / world;
      v.emplace_back("perf/step_time", step_time);
      v.emplace_back("perf/optimizer_step_time", step_time * options_.tpi_multiplier);
    }
    if (device > 0) v.emplace_back("train/batch_efficiency", real / device);
    v.emplace_back("perf/mem_gib", max_mem / kGiB);
    // A DP sum of finite loss sums can still overflow the double range: then there is no loss to report.
    if (labels > 0 && std::isfinite(loss)) v.emplace_back("train/loss", loss / labels);
    v.emplace_back("train/tokens_seen", tokens_seen_);
    v.emplace_back("train/num_samples", samples_seen_);
    if (in_flight_.event.learning_rate) v.emplace_back("train/lr", *in_flight_.event.learning_rate);
    if (in_flight_.event.grad_norm) v.emplace_back("train/grad_norm", *in_flight_.event.grad_norm);
    if (max_data > 0) v.emplace_back("perf/data_time", max_data);
    if (max_fwd_bwd > 0) v.emplace_back("perf/forward_backward_time", max_fwd_bwd);
    v.emplace_back("perf/log_wait_ms", log_wait_ms);
    v.emplace_back("perf/log_emit_ms", last_emit_ms_);
    if (options_.topk > 0) add_topk(record, step_time_known);
    return true;
  }

  struct rank_row {
    std::int64_t rank = 0;
    double real_tokens = 0;
    double device_tokens = 0;
    double flops = 0;  // this rank's share: its batches' FLOPs / tp
    double tokens_per_second = 0;
    double tflops = 0;
    double step_time = 0;
    double mem_gib = 0;
  };

  // perf_topk/<metric>_{slow,fast}_<i> and _rank: the k worst and k best ranks for each metric.
  // step_time only when every rank ran a micro-batch (as perf/step_time): a rank without one has no step
  // time, and its NaN would both be emitted as a "slowest" value and break the sort's ordering.
  void add_topk(metrics_record& record, bool step_time_known) {
    const std::size_t k = std::min<std::size_t>(static_cast<std::size_t>(options_.topk), per_rank_.size());
    order_.resize(per_rank_.size());
    const auto emit = [&](const char* name, auto value_of, bool higher_is_better) {
      std::iota(order_.begin(), order_.end(), std::size_t{0});
      // Ties broken by rank so the output is deterministic.
      std::stable_sort(order_.begin(), order_.end(), [&](std::size_t a, std::size_t b) {
        const double va = value_of(per_rank_[a]), vb = value_of(per_rank_[b]);
        return higher_is_better ? va < vb : va > vb;  // worst first
      });
      for (std::size_t i = 0; i < k; ++i) {
        const rank_row& slow = per_rank_[order_[i]];
        const rank_row& fast = per_rank_[order_[order_.size() - 1 - i]];
        const std::string index = std::to_string(i);
        record.values.emplace_back(std::string("perf_topk/") + name + "_slow_" + index, value_of(slow));
        record.values.emplace_back(std::string("perf_topk/") + name + "_slow_" + index + "_rank", static_cast<double>(slow.rank));
        record.values.emplace_back(std::string("perf_topk/") + name + "_fast_" + index, value_of(fast));
        record.values.emplace_back(std::string("perf_topk/") + name + "_fast_" + index + "_rank", static_cast<double>(fast.rank));
      }
    };
    emit("tps", [](const rank_row& r) { return r.tokens_per_second; }, true);
    if (step_time_known) emit("step_time", [](const rank_row& r) { return r.step_time; }, false);
    emit("tflops", [](const rank_row& r) { return r.tflops; }, true);
    if (peak_) {
      const double peak = *peak_;
      emit("mfu", [peak](const rank_row& r) { return r.tflops / peak * 100.0; }, true);
    }
    emit("mem_gib", [](const rank_row& r) { return r.mem_gib; }, false);
  }

  throughput_options options_;
  std::shared_ptr<communicator> comm_;
  parallel_layout layout_;
  std::shared_ptr<spdlog::logger> logger_;
  coefficients coefficients_;
  vision_geometry geometry_;
  std::optional<double> peak_;
  std::int64_t rank_ = 0;
  std::int64_t world_ = 1;
  std::vector<std::int64_t> dp_group_;

  mutable std::mutex mutex_;
  std::function<double()> clock_;
  double interval_start_ = 0;
  interval_counters current_;
  std::vector<double> buffer_;
  in_flight in_flight_;
  std::vector<rank_row> per_rank_;
  std::vector<std::size_t> order_;
  double tokens_seen_ = 0;
  double samples_seen_ = 0;
  double last_emit_ms_ = 0;
  int consecutive_failures_ = 0;
  std::int64_t log_sequence_ = 0;  // on_log calls so far; the same on every rank (the rows' tag)
  bool flushed_ = false;
  throughput_health health_;
  std::chrono::steady_clock::time_point last_batch_warning_{}, last_log_warning_{}, last_collective_warning_{},
      last_interval_warning_{};
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
const coefficients& throughput_plugin::flop_coefficients() const { return impl_->flop_coefficients(); }
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
