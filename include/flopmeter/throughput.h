// flopmeter/throughput.h — the throughput plugin: tokens/s, TFLOP/s, MFU, step time, batch efficiency,
// memory and loss, aggregated honestly over the job, with a fixed number of fixed-size collectives per log
// and no stall.
//
// Life cycle: create it with options and a communicator, register it with `hooks` (or call its hooks
// directly), fire on_microbatch / on_log, flush at the end. on_microbatch only adds integer counts
// (no allocation, no collective, no device sync). on_log closes the interval, starts one asynchronous
// all-gather of this rank's row and emits the *previous* interval's metrics after waiting for its collective
// (perf/log_wait_ms is that wait). The first interval starts when the plugin is created: create it just
// before the training loop (or call on_log once before the first micro-batch) to keep set-up time out of the
// first record's rates. Such a warm-up interval, which ends before any rank of the world has recorded a
// micro-batch (every rank's running totals and interval counts are 0), is not written to the sinks and is not
// counted in health(): its on_log starts the next interval as any on_log does, and the first record the sinks
// see is the first interval with micro-batches. Later intervals without micro-batches are emitted as usual.
// flush() waits for and emits the last interval, then flushes the sinks (sink::flush) on the ranks that
// write to them. Destroying the plugin
// without flush() flushes it: the wait for the last collective is bounded by collective_timeout like any
// on_log's (and is a poll while reporting is paused), so destruction never blocks longer than that.
// Every rank must call on_log at the same steps with the same, increasing `step`: a rank whose step
// disagrees with its peers' (it skipped or added an on_log) costs one interval on every rank, which is
// counted (out_of_step_intervals), logged once, and the ranks get back in step by themselves. A single wrong
// step (10^12 once, one far behind, repeated, going backwards) costs at most 3 intervals on every rank, then
// reporting resumes; no record ever mixes the rows of two steps.
// Every rank must load the same settings: model, scope, [parallel] tp/cp/pp/order and tpi_multiplier. Each
// row carries a fingerprint of them; while the ranks differ no interval is emitted (config_mismatch_intervals),
// and every emitting rank logs once which ranks differ in which setting. The peak may differ (a mixed fleet:
// each rank's records use its own peak), and so may the sinks, emit, topk and the timeouts.
// The trainer's data_time, forward_backward_time and peak_memory_bytes (log_event): a reported 0 is
// emitted as 0; a field left unset on every rank is left out of the record; set on some ranks only, the
// record holds the maximum over those ranks and the per-rank top-k ranks only them.
//
// Ownership: the plugin shares the communicator and the sinks (shared_ptr); it owns its counters.
// Errors: `create` throws flopmeter::error for bad options; the hooks never throw: a bad batch, a failed or
// timed-out collective or a failing sink is logged (rate-limited), counted in `health()` and costs that
// interval's metrics, not the run. After 3 failed collectives in a row the plugin stops waiting and probes
// the group every 16 logs until a collective succeeds again; it logs when reporting pauses and when it
// resumes (METRICS.md, "When things go wrong"). Every emitted record ends with this rank's health counters
// (health/...).
// Thread-safety: any thread may call the hooks and health() at any time without external synchronization;
// an internal mutex serializes them (the expected use is one training thread per rank). flop_coefficients(),
// model(), scope() and peak_tflops_per_gpu() read what create() fixed, never lock, and are safe anywhere.
// Re-entry: the plugin holds that mutex while it calls code it does not own: its sinks (on_log and flush
// emit through them), its logger, the clock and the communicator. Such code may call health() on the same
// plugin (it returns the counters as they are at that moment: a sink's record is already counted in them), and
// the const accessors; on_microbatch, on_log and flush called from there, on the thread that is emitting, are
// refused instead of deadlocking: they do nothing, are counted in health().reentrant_calls and logged once a
// minute. Call them after the outer hook returns. Other threads are not affected: they wait for the lock as
// usual. Do not drop the last shared_ptr to the plugin from inside one of its call-outs.
// Two plugins: a call-out of plugin A may call plugin B, but not in both directions at once: if B's call-out
// (on another thread) calls A while A's calls B, each waits for the lock the other holds, forever. Keep such
// calls one-way (A's sinks may feed B; B's must not feed A), or make them after the outer hook returns.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "flopmeter/communicator.h"
#include "flopmeter/export.h"
#include "flopmeter/flop_model.h"
#include "flopmeter/hooks.h"
#include "flopmeter/layout.h"
#include "flopmeter/model_spec.h"
#include "flopmeter/peak_table.h"
#include "flopmeter/sinks.h"

namespace spdlog {
class logger;
}

namespace flopmeter FLOPMETER_EXPORT {

// Which ranks hand their metrics to the sinks (every rank computes them; the collective is the same).
enum class emit_ranks { rank0, all };

// The documented range of each floating-point and time setting. Outside it is a configuration error: at
// create() for throughput_options, at file:line:col for a plugin TOML. A value beyond these bounds is a typo
// or a unit mix-up (TFLOP/s given as FLOP/s, seconds as milliseconds), never a real setting, and would give an
// absurd or missing MFU, or a hook that blocks for days.
struct setting_range {
  // Peak dense TFLOP/s per device: from a laptop CPU (0.001) to 100,000, about 20x the largest fp8 dense peak
  // in the peak table.
  static constexpr double min_peak_tflops_per_gpu = 1e-3;
  static constexpr double max_peak_tflops_per_gpu = 1e5;
  // Micro-batches per optimizer step: at least 1; a million is far beyond any gradient accumulation in use.
  static constexpr double min_tpi_multiplier = 1.0;
  static constexpr double max_tpi_multiplier = 1e6;
  // How long on_log may block on the previous log, and the Gloo rendezvous bound: at most one hour.
  static constexpr std::int64_t max_timeout_ms = 3'600'000;
};

// topk_interval_logs = 0 (by job size): the per-rank table every log in jobs of up to this many ranks (at 256
// ranks a table of 78 KiB per log), and every kTableIntervalLogsAtScale logs above (METRICS.md, "The per-log
// collective at scale").
inline constexpr std::int64_t kTableEveryLogMaxWorld = 256;
inline constexpr std::int64_t kTableIntervalLogsAtScale = 50;

struct throughput_options {
  model_spec model;                             // what the FLOP model is built from
  flop_scope scope = flop_scope::complete;      // what is counted (seed reproduces the reference)
  training_regime training;                     // what trains (frozen parts, LoRA); default: everything
  // Peak dense TFLOP/s per GPU: the number wins when set; otherwise `gpu` is looked up in the peak table.
  // Neither, or an unknown GPU: MFU is not reported and one warning is logged.
  std::optional<double> peak_tflops_per_gpu;
  std::string gpu;                              // e.g. "H100 SXM" or torch's device name
  peak_precision precision = peak_precision::bf16;
  parallel_sizes parallel;                      // tp, cp, pp; dp = world / (tp*cp*pp)
  std::string rank_order = "tp-cp-dp-pp";       // Megatron's default
  double tpi_multiplier = 1.0;                  // micro-batches per optimizer step (may be fractional)
  std::int64_t topk = 3;                        // rows per side in perf_topk/*; 0 disables
  // Every how many logs the per-rank table (every rank's row: perf_topk/*) is gathered; the other logs run a
  // SUM and a MAX all-reduce of a fixed size, whatever the job's size, and carry every figure but perf_topk/*.
  // 0 (the default): by the job's size, every log up to kTableEveryLogMaxWorld ranks, else every
  // kTableIntervalLogsAtScale logs. 1: every log. Every rank must use the same value (each log's collectives
  // must match). Counts a tensor path accumulates on a device need the table: it gathers it every log.
  std::int64_t topk_interval_logs = 0;
  emit_ranks emit = emit_ranks::rank0;
  bool sanity_check = false;                    // run the term-by-term check at create(); refuse on mismatch
  std::chrono::milliseconds collective_timeout{120000};  // how long on_log may block on the previous log
  std::vector<std::shared_ptr<sink>> sinks;     // where metrics go (built sinks; a plugin file's [sinks]
                                                // table is a sink_config, built by make_sinks)
  std::shared_ptr<spdlog::logger> logger;       // the trainer's logger; a private one when null
  // Seconds on a monotonic clock; steady_clock when empty. For tests and replayed runs.
  std::function<double()> clock_seconds;
};

// Counters of things that went wrong; all zero in a healthy run.
struct throughput_health {
  std::uint64_t bad_microbatches = 0;     // rejected batch descriptions (not counted in any metric)
  std::uint64_t failed_collectives = 0;   // intervals lost to a failed or timed-out collective, or to one
                                          // whose rows came from different logs (ranks out of step)
  std::uint64_t skipped_intervals = 0;    // intervals not emitted (zero, negative or NaN time, counts beyond
                                          // 2^53, failures, no collective while backing off)
  std::uint64_t events_after_flush = 0;   // events that arrived after flush()
  std::uint64_t collectives_started = 0;  // one per on_log on the default path (fewer while backing off)
  std::uint64_t out_of_step_intervals = 0;  // of failed_collectives: rows from different logs (a rank skipped
                                            // or added an on_log); the ranks get back in step by themselves
  std::uint64_t dropped_records = 0;      // records a sink could not write (summed over this plugin's sinks;
                                          // e.g. a JSONL file in a directory that does not exist)
  std::uint64_t reentrant_calls = 0;      // on_microbatch / on_log / flush refused because they were called
                                          // from inside this plugin's own sink, logger, clock or communicator
                                          // on the emitting thread (see "Re-entry" above)
  std::uint64_t config_mismatch_intervals = 0;  // of skipped_intervals: intervals not reported because the
                                                // ranks loaded different settings (model, scope, [parallel],
                                                // tpi_multiplier); one warning names the ranks and settings
};

namespace detail {
// Internal (accounting/throughput_calls.h): the hooks with their outcome, for the C ABI and the tensor path.
struct FLOPMETER_NO_EXPORT throughput_calls;
}  // namespace detail

class throughput_plugin : public plugin {
 public:
  // Throws flopmeter::error for invalid options (layout not dividing the world, sanity-check mismatch, ...).
  // A setting outside its range names the setting as the error's where().key (the member's name) and the
  // problem as its description(): what() is "key 'topk': must be >= 0 (got -1)".
  static std::shared_ptr<throughput_plugin> create(throughput_options options,
                                                   std::shared_ptr<communicator> comm);
  ~throughput_plugin() override;

  void on_microbatch(const microbatch_event& event) noexcept override;
  void on_log(const log_event& event) noexcept override;
  void flush() noexcept override;

  // Safe from inside the plugin's own sinks (see "Re-entry" above).
  throughput_health health() const;
  // The coefficients of a micro-batch with images or videos, in options.training's regime (with full
  // training, compute_coefficients(model)).
  const coefficients& flop_coefficients() const;
  // The model the plugin counts with (options.model), what trains (options.training), and what it counts
  // (options.scope).
  const model_spec& model() const;
  const training_regime& training() const;
  flop_scope scope() const;
  // The peak used for MFU, when known.
  std::optional<double> peak_tflops_per_gpu() const;

 private:
  friend struct detail::throughput_calls;
  class impl;
  explicit throughput_plugin(std::unique_ptr<impl> state);
  std::unique_ptr<impl> impl_;
};

// What a plugin TOML file holds: the plugin's options, and the sinks its [sinks] table names (which only
// make_sinks turns into sinks: throughput_plugin::create takes built sinks in options.sinks).
struct plugin_config {
  throughput_options options;  // options.sinks is empty
  sink_config sinks;
  // [logging] rendezvous_timeout_ms: only for the Gloo group flopmeter builds itself from a plugin file (C ABI
  // flopmeter_create_gloo_from_env): the bound on the rendezvous on every rank, and Gloo's collective timeout.
  std::chrono::milliseconds rendezvous_timeout{60000};
  // [logging] small_allreduce ("automatic", "backend" or "log_depth"): how that group runs the logs'
  // collectives (flopmeter/communicator.h). Default automatic: the log-depth collectives from
  // log_depth_min_ranks ranks on.
  flopmeter::small_allreduce small_allreduce = flopmeter::small_allreduce::automatic;
};

// Reads a plugin TOML file (see docs in plugin_configs/SCHEMA.md): the model config path (relative to the
// plugin file), peak, layout, sinks, top-k, scope, sanity check. Every error names file:line:col and key.
plugin_config load_plugin_config(const std::string& path);
// load_plugin_config(path).options: the file's options without its [sinks] table.
throughput_options load_throughput_options(const std::string& path);

// Loads a plugin TOML (load_plugin_config), builds its sinks (make_sinks for comm->rank() through
// `logger`), appends `extra_sinks` and creates the plugin. Throws flopmeter::error on any configuration
// problem, located at file:line:col and key, among them those only the world reveals: a [parallel] layout
// that does not fit comm->world_size(), and, with [logging] emit = "all" in a world of more than one rank, a
// [sinks] jsonl or tensorboard path without "{rank}" (every rank would write into the same file or run).
// The [sinks] table's sinks are made only on the ranks that emit (rank 0 with the default emit = "rank0"):
// the other ranks create no files. `extra_sinks` are added on every rank.
std::shared_ptr<throughput_plugin> create_throughput_plugin(const std::string& config_path,
                                                            std::shared_ptr<communicator> comm,
                                                            std::shared_ptr<spdlog::logger> logger = nullptr,
                                                            std::vector<std::shared_ptr<sink>> extra_sinks = {});

// The fractional gradient-accumulation schedule for multiplier m >= 1: entry i is
// floor((i+1)m) - floor(im), stopping at the first i where (i+1)m is whole. 1.5 -> [1, 2];
// 2.25 -> [2, 2, 2, 3]; 3 -> [3]. m is taken as the nearest fraction with denominator <= 10^6.
// Throws flopmeter::error for m < 1, non-finite m, or a schedule longer than 10^6 entries, with where().key
// "tpi_multiplier".
std::vector<std::int64_t> accumulation_schedule(double tpi_multiplier);

}  // namespace FLOPMETER_EXPORT
