// The throughput plugin: per-rank interval counters, a fixed number of fixed-size collectives per log, deferred
// emission.
//
// The collectives. Every rank fills one row of kRowFields doubles. On an ordinary log it turns the row into
// its contribution to a SUM and a MAX all-reduce of fixed size (log_reduction.h: kSumFields + kMaxFields
// doubles, whatever the job's size), started together (communicator::start_allreduce_sum_max); the record is
// formed from the two reduced vectors, every figure but perf_topk/*. Every topk_interval_logs logs (every log
// in jobs of up to kTableEveryLogMaxWorld ranks), and at the log after a reduction that only the table can
// explain, it all-gathers the row instead: every rank then holds every rank's row (world_size x kRowFields)
// and derives DP-group sums, world maxima and the per-rank top-k locally (derive.h). A communicator without
// an all-gather runs it as a SUM all-reduce of that buffer with the other rows zeroed (communicator.h). At
// 16,384 ranks the table is 16,384 x kRowFields (50) x 8 B = 6.25 MiB; METRICS.md gives the bytes per log.
//
// The per-log protocol (which logs start a collective, backing off after failures, rows no rank sent, ranks
// out of step, the warm-up log) is accounting/log_protocol.h: a pure function of the gathered rows and its own
// state. This file asks it, acts on its verdicts (derive and emit, count, log) and owns the counters.
//
// Deferral. on_log(k) closes interval k and starts its collective; the metrics of interval k are derived and
// emitted at on_log(k+1) (or flush()), after waiting for that collective — which by then has had a whole log
// interval to finish, so perf/log_wait_ms is ~0 unless something stalls. That wait goes into the rank's
// next row, so that the per-rank top-k shows who waited for whom.
#include "flopmeter/throughput.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "flopmeter/error.h"
#include "flopmeter/metric_names.h"
#include "accounting/derive.h"
#include "accounting/interval_counters.h"
#include "accounting/log_protocol.h"
#include "accounting/log_reduction.h"
#include "accounting/owned_mutex.h"
#include "accounting/row_layout.h"
#include "accounting/sanitize_options.h"
#include "accounting/thread_annotations.h"
#include "accounting/throughput_calls.h"
#include "count/exact_flops.h"
#include "hardware/device_name.h"
#include "output/logging.h"

namespace flopmeter {
namespace {

using namespace detail;  // row_layout.h, interval_counters.h, throughput_calls.h

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

// Locking: every member below mutex_ that changes after construction is GUARDED_BY it (Clang checks this
// with -Wthread-safety); the others are fixed by the constructor. A hook that finds mutex_ held by its own
// thread is inside one of the plugin's call-outs and is refused without locking (owned_mutex.h).
class throughput_plugin::impl {
 public:
  impl(throughput_options options, std::shared_ptr<communicator> comm)
      : options_(std::move(options)),
        comm_(std::move(comm)),
        layout_(options_.parallel, comm_ ? comm_->world_size() : 1, options_.rank_order) {
    if (!comm_) throw error("a communicator is required (make_local_communicator() for one process)");
    logger_ = detail::logger_or_private(options_.logger);
    detail::sanitize_options(options_);
    options_.training.recompute.pipeline_stages = options_.parallel.pp;  // recompute_layers counts per stage
    regime_coefficients_ = compute_coefficients(options_.model, options_.training);
    coefficients_ = regime_coefficients_.with_items;
    megatron_ = megatron_billing::of(options_.model, options_.scope);
    geometry_ = geometry_of(options_.model);
    count_plan_ = detail::count_plan_of(geometry_);  // the windows checked once, the loop for their kinds chosen
    rank_ = comm_->rank();
    world_ = comm_->world_size();

    if (options_.sanity_check) detail::refuse_failed_sanity_check(options_.model);
    if (options_.peak_tflops_per_gpu) {
      peak_ = options_.peak_tflops_per_gpu;  // in range: sanitize_options
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
    reduced_.assign(static_cast<std::size_t>(kSumFields) + static_cast<std::size_t>(kMaxFields), 0.0);
    table_every_ = options_.topk_interval_logs > 0    ? options_.topk_interval_logs
                   : world_ <= kTableEveryLogMaxWorld ? 1
                                                      : kTableIntervalLogsAtScale;
    reduction_.flop_coefficients = regime_coefficients_;
    reduction_.scope = options_.scope;
    reduction_.tp = layout_.tp();
    reduction_.cp = layout_.cp();
    reduction_.pp = layout_.pp();
    const std::vector<std::int64_t> first_replicas = layout_.dp_group(0);  // one rank of each replica
    reduction_.in_dp_sums = std::find(first_replicas.begin(), first_replicas.end(), rank_) != first_replicas.end();
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
    detail::config_settings settings;
    settings.model_name = options_.model.name;
    settings.model = compute_coefficients(options_.model);  // the model alone: the regime is its own field
    settings.regime = options_.training;
    settings.scope = options_.scope;
    settings.parallel = options_.parallel;
    settings.rank_order = options_.rank_order;
    settings.tpi_multiplier = options_.tpi_multiplier;
    protocol_.emplace(rank_, world_, options_.collective_timeout, settings);
    clock_ = options_.clock_seconds ? options_.clock_seconds : std::function<double()>(seconds_now);
    interval_start_ = clock_();
  }

  // `keep_reason(const char*)` is called with the reason of a rejection (the counting's own message, as
  // logged). A template, so that the hooks' path (no reason kept) passes and keeps nothing more than before.
  template <class KeepReason>
  microbatch_result on_microbatch(const microbatch_event& event, const KeepReason& keep_reason) noexcept {
    if (refused_as_reentrant("on_microbatch")) return microbatch_result::reentrant;
    const owned_lock lock(mutex_);
    if (flushed_) {
      ++health_.events_after_flush;
      return microbatch_result::after_flush;
    }
    current_.microbatches += 1;
    try {
      add_microbatch(current_, event, geometry_, count_plan_);
    } catch (const std::exception& e) {
      ++health_.bad_microbatches;
      warn_rate_limited(last_batch_warning_, "flopmeter: micro-batch not counted: {}", e.what());
      keep_reason(e.what());
      return microbatch_result::rejected;
    }
    return microbatch_result::counted;
  }

  // A micro-batch that ran but that a layer above refused before it could be counted (the tensor path): counted
  // and warned about like an invalid description, with the layer's reason.
  microbatch_result on_refused_microbatch(const char* why) noexcept {
    if (refused_as_reentrant("on_microbatch")) return microbatch_result::reentrant;
    const owned_lock lock(mutex_);
    if (flushed_) {
      ++health_.events_after_flush;
      return microbatch_result::after_flush;
    }
    current_.microbatches += 1;
    ++health_.bad_microbatches;
    warn_rate_limited(last_batch_warning_, "flopmeter: tensor micro-batch not counted: {}", why);
    return microbatch_result::rejected;
  }

  // Destroyed without flush(): the last interval is flushed here, bounded like any on_log by the collective
  // timeout (not at all while backing off), so that it does not vanish (throughput.h).
  // Destroying the plugin from inside its own call-out (its last shared_ptr dropped in a sink) is outside the
  // contract (throughput.h); flush() then refuses instead of deadlocking.
  ~impl() {
    bool had_interval = false;
    if (mutex_.held_by_this_thread()) return;
    {
      const owned_lock lock(mutex_);
      had_interval = !flushed_ && in_flight_.pending != nullptr;
    }
    if (had_interval) flush("flush");
  }

  hook_result on_log(const log_event& event) noexcept {
    if (refused_as_reentrant("on_log")) return hook_result::reentrant;
    const owned_lock lock(mutex_);
    if (flushed_) {
      ++health_.events_after_flush;
      return hook_result::after_flush;
    }
    // Each stage is guarded on its own: whatever fails, this rank still takes part in the log's collective
    // (the other ranks are issuing theirs) and the next interval starts here.
    protocol_->begin_log();
    // The interval ends here whatever becomes of its collective: its tokens and samples join the running
    // totals now, so a skipped or failed interval still counts in train/tokens_seen and train/flops_seen at the
    // next record.
    totals_.add(current_);
    totals_.add_flops(exact_model_flops(regime_coefficients_, current_.counts, options_.scope));
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
    return hook_result::done;
  }

  // `caller` names the call in the warning when it is refused (throughput_calls::record_flush).
  hook_result flush(const char* caller) noexcept {
    if (refused_as_reentrant(caller)) return hook_result::reentrant;
    const owned_lock lock(mutex_);
    if (flushed_) return hook_result::done;
    flushed_ = true;
    try {
      emit_in_flight();
    } catch (const std::exception& e) {
      warn_rate_limited(last_log_warning_, "flopmeter: flush failed: {}", e.what());
    }
    // Then each sink pushes out what it holds (sink::flush never throws), where records are written.
    if (emits_here()) {
      for (const auto& s : options_.sinks) {
        if (s) s->flush();
      }
    }
    return hook_result::done;
  }

  // Called from inside a call-out of this plugin (a sink reading health in its callback): this thread holds
  // the lock, so nobody else changes the counters; read them directly.
  throughput_health health() const {
    if (mutex_.held_by_this_thread()) {
      mutex_.assume_held();
      return health_with_sinks();
    }
    const owned_lock lock(mutex_);
    return health_with_sinks();
  }
  bool in_callout() const noexcept { return mutex_.held_by_this_thread(); }
  const coefficients& flop_coefficients() const { return coefficients_; }
  const model_spec& model() const { return options_.model; }
  const training_regime& training() const { return options_.training; }
  flop_scope scope() const { return options_.scope; }
  std::optional<double> peak() const { return peak_; }

 private:
  struct in_flight {
    std::unique_ptr<pending_collective> pending;
    log_event event;
    bool reduced = false;  // the fixed-size reduction (reduced_), not the table (buffer_)
  };

  // health_ plus the protocol's counters and the records the sinks dropped (each sink counts its own).
  throughput_health health_with_sinks() const FLOPMETER_REQUIRES(mutex_) {
    throughput_health h = health_;
    const detail::protocol_counters& p = protocol_->counters();
    h.failed_collectives += p.failed_collectives;
    h.skipped_intervals += p.skipped_intervals;
    h.out_of_step_intervals += p.out_of_step_intervals;
    h.config_mismatch_intervals += p.config_mismatch_intervals;
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

  // Whether `hook` is called from inside one of this plugin's call-outs (this thread already holds the lock):
  // then it is refused, counted and logged once a minute, and the caller returns at once.
  bool refused_as_reentrant(const char* hook) noexcept {
    if (!mutex_.held_by_this_thread()) return false;
    mutex_.assume_held();
    refuse_reentrant(hook);
    return true;
  }

  // The refusal itself. Written without locking: this thread holds the lock (owned_mutex.h).
  void refuse_reentrant(const char* hook) noexcept FLOPMETER_REQUIRES(mutex_) {
    ++health_.reentrant_calls;
    warn_rate_limited(reentrant_warning_,
                      "flopmeter: {} refused: called from inside this plugin's own sink, logger, clock or "
                      "communicator on the thread that is emitting (it would deadlock); call it after the hook "
                      "that emitted returns",
                      hook);
  }

  // One warning a minute per kind (`limit`), printable, never throwing (output/logging.h).
  template <class... Args>
  void warn_rate_limited(rate_limited_log& limit, const char* format, const Args&... args) noexcept {
    limit.warn(*logger_, format, args...);
  }

  // Fills this rank's row and starts the interval's collective (every rank, every log: never gated on
  // local data).
  // `was_in_flight`: a collective was still out when this log began.
  void start_collective(const log_event& event, double interval_seconds, bool was_in_flight)
      FLOPMETER_REQUIRES(mutex_) {
    if (!protocol_->may_start(event.step, was_in_flight)) return;  // skipped and counted there
    fill_row(row_.data(), current_, megatron_, event, interval_seconds, totals_, last_wait_ms_);
    protocol_->write_identity(row_.data(), event.step);
    in_flight_.event = event;
    // The same choice on every rank in step: by the shared sequence number, or asked for by a reduction every
    // rank resolved alike.
    in_flight_.reduced = table_every_ > 1 && !protocol_->table_wanted() && protocol_->sequence() % table_every_ != 0;
    ++health_.collectives_started;
    try {
      if (in_flight_.reduced) {
        contribute(reduction_, row_.data(), rank_, reduced_.data(), reduced_.data() + kSumFields);
        in_flight_.pending = comm_->start_allreduce_sum_max(reduced_.data(), kSumFields, kMaxFields);
      } else {
        protocol_->table_started();
        in_flight_.pending = comm_->start_allgather(row_.data(), kRowFields, buffer_.data());
      }
    } catch (const std::exception& e) {
      in_flight_.pending.reset();
      report(protocol_->could_not_start(event.step, e.what()));
    }
  }

  // Logs what a verdict of the protocol says, each message with its own rate limit.
  void report(const detail::log_verdict& verdict) noexcept FLOPMETER_REQUIRES(mutex_) {
    if (!verdict.resumed.empty()) log_noexcept(*logger_, spdlog::level::info, "{}", verdict.resumed);
    if (!verdict.skipped_because.empty()) {
      warn_rate_limited(last_collective_warning_, "flopmeter: metrics of step {} skipped: {}", in_flight_.event.step,
                        verdict.skipped_because);
    }
    if (!verdict.paused.empty()) log_noexcept(*logger_, spdlog::level::warn, "{}", verdict.paused);
    if (!verdict.out_of_step.empty()) log_noexcept(*logger_, spdlog::level::warn, "{}", verdict.out_of_step);
    if (!verdict.config_mismatch.empty() && emits_here())
      log_noexcept(*logger_, spdlog::level::warn, "{}", verdict.config_mismatch);
  }

  // Waits for the previous log's collective and emits its metrics.
  void emit_in_flight() FLOPMETER_REQUIRES(mutex_) {
    if (!in_flight_.pending) return;
    const double wait_start = seconds_now();
    const collective_status status = in_flight_.pending->wait(protocol_->wait_timeout());
    const double log_wait_ms = (seconds_now() - wait_start) * 1e3;
    last_wait_ms_ = log_wait_ms;
    const std::string failure = status == collective_status::failed ? in_flight_.pending->error_message() : "";
    const double* sums = reduced_.data();
    const double* maxima = reduced_.data() + kSumFields;
    const detail::log_verdict verdict =
        in_flight_.reduced
            ? protocol_->resolve_reduced(in_flight_.event.step, status, failure, row_.data(), sums, maxima)
            : protocol_->resolve(in_flight_.event.step, status, failure, row_.data(), buffer_.data());
    if (verdict.what == detail::log_verdict::kind::probe_pending) return;  // the probe stays out
    in_flight_.pending.reset();
    report(verdict);
    health_.bad_microbatches += verdict.device_rejected;
    if (verdict.what != detail::log_verdict::kind::derive) return;  // lost, out of step, or the warm-up log
    const double emit_start = seconds_now();
    derive_context context;
    context.step = in_flight_.event.step;
    context.learning_rate = in_flight_.event.learning_rate;
    context.grad_norm = in_flight_.event.grad_norm;
    context.log_wait_ms = log_wait_ms;
    context.log_emit_ms = last_emit_ms_;
    derive_result result = in_flight_.reduced ? reduced_record(deriver_->setup(), sums, maxima, world_, context)
                                              : deriver_->derive(buffer_.data(), world_, context);
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
  void append_health(metrics_record& record) const FLOPMETER_REQUIRES(mutex_) {
    const throughput_health h = health_with_sinks();
    auto& v = record.values;
    v.emplace_back(metric::kHealthBadMicrobatches, static_cast<double>(h.bad_microbatches));
    v.emplace_back(metric::kHealthFailedCollectives, static_cast<double>(h.failed_collectives));
    v.emplace_back(metric::kHealthSkippedIntervals, static_cast<double>(h.skipped_intervals));
    v.emplace_back(metric::kHealthOutOfStepIntervals, static_cast<double>(h.out_of_step_intervals));
    v.emplace_back(metric::kHealthDroppedRecords, static_cast<double>(h.dropped_records));
    v.emplace_back(metric::kHealthReentrantCalls, static_cast<double>(h.reentrant_calls));
    v.emplace_back(metric::kHealthConfigMismatchIntervals, static_cast<double>(h.config_mismatch_intervals));
  }

  bool emits_here() const { return options_.emit == emit_ranks::all || rank_ == 0; }

  // Fixed by the constructor.
  throughput_options options_;
  std::shared_ptr<communicator> comm_;
  parallel_layout layout_;
  std::shared_ptr<spdlog::logger> logger_;
  coefficients coefficients_;  // of a micro-batch with images (the regime's)
  vision_geometry geometry_;
  detail::count_plan count_plan_;
  std::optional<double> peak_;
  std::int64_t rank_ = 0;
  std::int64_t world_ = 1;
  std::optional<metrics_deriver> deriver_;
  detail::reduction_setup reduction_;
  std::int64_t table_every_ = 1;  // the per-rank table every this many logs (topk_interval_logs, resolved)
  std::function<double()> clock_;

  mutable owned_mutex mutex_;  // held_by_this_thread(): inside one of our own call-outs
  // which logs start a collective, what their rows are worth
  std::optional<detail::log_protocol> protocol_ FLOPMETER_GUARDED_BY(mutex_);
  double interval_start_ FLOPMETER_GUARDED_BY(mutex_) = 0;
  interval_counters current_ FLOPMETER_GUARDED_BY(mutex_);
  std::vector<double> row_ FLOPMETER_GUARDED_BY(mutex_);     // this rank's row of the collective in flight
  std::vector<double> buffer_ FLOPMETER_GUARDED_BY(mutex_);  // every rank's row once it completes
  std::vector<double> reduced_ FLOPMETER_GUARDED_BY(mutex_);  // an ordinary log's sums, then maxima
  in_flight in_flight_ FLOPMETER_GUARDED_BY(mutex_);
  running_totals totals_ FLOPMETER_GUARDED_BY(mutex_);
  double last_emit_ms_ FLOPMETER_GUARDED_BY(mutex_) = 0;
  double last_wait_ms_ FLOPMETER_GUARDED_BY(mutex_) = 0;  // this rank's latest perf/log_wait_ms, in its next row
  bool flushed_ FLOPMETER_GUARDED_BY(mutex_) = false;
  throughput_health health_ FLOPMETER_GUARDED_BY(mutex_);
  // One rate limit per kind of warning (each locks its own limiter; the names are those of the time points
  // they replaced).
  rate_limited_log last_batch_warning_, last_log_warning_, last_collective_warning_, last_interval_warning_;
  rate_limited_log last_derive_warning_;     // what an emitted record leaves out (derive_result::warning)
  rate_limited_log last_log_field_warning_;  // log fields left out (detail::check_log_fields)
  rate_limited_log reentrant_warning_;       // hooks refused from inside our own call-outs (refuse_reentrant)
  // Last: on_microbatch reads only megatron_ of these, and the members it uses most keep their places.
  megatron_billing megatron_;
  regime_coefficients regime_coefficients_;
};

std::shared_ptr<throughput_plugin> throughput_plugin::create(throughput_options options,
                                                             std::shared_ptr<communicator> comm) {
  return std::shared_ptr<throughput_plugin>(
      new throughput_plugin(std::make_unique<impl>(std::move(options), std::move(comm))));
}

throughput_plugin::throughput_plugin(std::unique_ptr<impl> state) : impl_(std::move(state)) {}
throughput_plugin::~throughput_plugin() = default;

void throughput_plugin::on_microbatch(const microbatch_event& event) noexcept {
  (void)impl_->on_microbatch(event, [](const char*) noexcept {});
}
void throughput_plugin::on_log(const log_event& event) noexcept { (void)impl_->on_log(event); }
void throughput_plugin::flush() noexcept { (void)impl_->flush("flush"); }
throughput_health throughput_plugin::health() const { return impl_->health(); }
const coefficients& throughput_plugin::flop_coefficients() const { return impl_->flop_coefficients(); }
const model_spec& throughput_plugin::model() const { return impl_->model(); }
const training_regime& throughput_plugin::training() const { return impl_->training(); }
flop_scope throughput_plugin::scope() const { return impl_->scope(); }
std::optional<double> throughput_plugin::peak_tflops_per_gpu() const { return impl_->peak(); }

microbatch_result throughput_calls::record_microbatch(throughput_plugin& plugin, const microbatch_event& event,
                                                      std::string* why) noexcept {
  return plugin.impl_->on_microbatch(event, [why](const char* reason) noexcept {
    if (why == nullptr) return;
    try {
      *why = reason;
    } catch (...) {  // out of memory: the caller gets the code without its reason
    }
  });
}
microbatch_result throughput_calls::record_refused_microbatch(throughput_plugin& plugin, const char* why) noexcept {
  return plugin.impl_->on_refused_microbatch(why);
}
hook_result throughput_calls::record_log(throughput_plugin& plugin, const log_event& event) noexcept {
  return plugin.impl_->on_log(event);
}
hook_result throughput_calls::record_flush(throughput_plugin& plugin, const char* caller) noexcept {
  return plugin.impl_->flush(caller);
}
bool throughput_calls::in_callout(const throughput_plugin& plugin) noexcept { return plugin.impl_->in_callout(); }

}  // namespace flopmeter
