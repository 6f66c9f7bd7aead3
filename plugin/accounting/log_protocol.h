// plugin/accounting/log_protocol.h — internal: the per-log protocol of the throughput plugin, apart from its
// counters and its sinks.
//
// Every log, each rank fills one row (row_layout.h) and either gathers every rank's row (the table) or reduces
// it with every other rank's into a SUM and a MAX of fixed size (log_reduction.h; resolve_reduced). Whether a
// log starts its collective, how long on_log waits for it, and what becomes of the gathered rows are decided
// here, from the rows and this object's own state alone: no communicator, no clock, no logging. The plugin
// (throughput.cpp) asks, acts and logs the messages a verdict carries; the tests build rows by hand
// (tests/test_log_protocol.cpp), as test_derive does for the metrics.
//
// What it decides, in the order a log meets it:
//   - Identity. Every row carries the log's step (row_step) and its sequence number (row_present: every rank
//     counts its on_log calls), so that rows of different logs are never mixed into one number.
//   - Backing off. A failed or timed-out collective, or one that returned rows no rank sent, costs its
//     interval. After kMaxConsecutiveFailures in a row, on_log no longer waits: one probe collective is issued
//     at each log whose sequence number is a multiple of kRetryEveryLogs (the same logs on every rank), and
//     polled without waiting while it is out. When a probe completes, reporting resumes.
//   - Rows no rank sent: this rank's own row changed, or a row that no rank fills that way.
//   - Step agreement: rows whose (step, sequence number) differ are discarded on every rank. The ranks behind
//     the latest log in the rows start no collective until they pass it, but for at most kMaxResyncLogs log,
//     and then adopt its sequence number; the others carry on. A step in one row is not trusted further than
//     that: a rank that really skipped an on_log is one log ahead, which this closes at once, while a single
//     wrong step (10^12 once, a step far behind, repeated or going backwards) costs at most 3 intervals on
//     every rank (the one it closes, then one log each side skips to meet again), never the rest of the run.
//   - Configuration: every row carries a fingerprint of the settings that give it its meaning
//     (config_fingerprint.h). Rows of one log whose fingerprints differ are not derived, at any log (the
//     settings do not change): the first such log names which ranks differ and in which setting.
//   - Warm-up: an interval that ends before any rank recorded a micro-batch is not reported.
//
// Thread-safety: none; the plugin calls it under its lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "flopmeter/communicator.h"
#include "accounting/config_fingerprint.h"

namespace flopmeter::detail {

inline constexpr int kMaxConsecutiveFailures = 3;
inline constexpr std::int64_t kRetryEveryLogs = 16;
// The most logs a rank behind the latest log in out-of-step rows skips before it starts collectives again.
inline constexpr std::int64_t kMaxResyncLogs = 1;

// What to do with the outcome of one log's collective, and what to log about it.
struct log_verdict {
  enum class kind {
    probe_pending,    // backing off and the probe is still out: keep it, nothing else changes
    lost,             // the collective failed, timed out, could not start or returned rows no rank sent
    out_of_step,      // the rows come from different logs: discarded
    config_mismatch,  // the rows are of one log, but the ranks loaded different settings: not derived
    warm_up,          // the interval ended before any rank recorded a micro-batch: nothing to report
    derive,           // every row is of the same log: derive the record and emit it
  };
  kind what = kind::lost;
  // Messages for the plugin's logger; "" when there is none.
  std::string skipped_because;  // why the interval is lost: "flopmeter: metrics of step N skipped: <this>",
                                // rate-limited with the other collective failures
  std::string paused;           // reporting paused: logged once per pause at warning level, never rate-limited
  std::string resumed;          // reporting resumed: logged at info level
  std::string out_of_step;      // the first discarded result of an episode out of step, at warning level
  std::string config_mismatch;  // the first log whose ranks differ in their settings: which ranks and settings,
                                // at warning level, on the ranks that emit
  // Micro-batches a tensor path rejected on the device (row_device_rejected of this rank's row), for
  // health().bad_microbatches; only when the rows are in step (derive or warm_up).
  std::uint64_t device_rejected = 0;
};

// The protocol's part of throughput_health.
struct protocol_counters {
  std::uint64_t failed_collectives = 0;         // lost collectives, out-of-step results included
  std::uint64_t skipped_intervals = 0;          // intervals the protocol did not let through
  std::uint64_t out_of_step_intervals = 0;      // of failed_collectives: rows from different logs
  std::uint64_t config_mismatch_intervals = 0;  // of skipped_intervals: ranks that loaded different settings
};

class log_protocol {
 public:
  // `collective_timeout`: how long on_log waits for a collective while not backing off; `settings`: this
  // rank's, carried in its rows.
  log_protocol(std::int64_t rank, std::int64_t world, std::chrono::milliseconds collective_timeout,
               const config_settings& settings = {});

  // A log begins: one more on_log call (the sequence number its row will carry).
  void begin_log() { ++sequence_; }
  std::int64_t sequence() const { return sequence_; }

  // Whether the log of `step` starts its collective. false: the interval is skipped (and counted), because
  // this rank is getting back in step, or because it is backing off and this log is no probe log (or a
  // collective was still out when the log began: `was_in_flight`).
  bool may_start(std::int64_t step, bool was_in_flight);

  // Writes the log's identity (step and sequence number) and this rank's settings into its row.
  void write_identity(double* row, std::int64_t step) const;

  // How long to wait for the collective in flight: 0 while backing off (a probe is only polled).
  std::chrono::milliseconds wait_timeout() const;
  bool backing_off() const { return consecutive_failures_ >= kMaxConsecutiveFailures; }

  // The collective of the log of `step` could not be started.
  log_verdict could_not_start(std::int64_t step, const std::string& why);

  // The collective of the log of `step` came back with `status` (`error`: its message when failed). `sent`
  // is this rank's row as sent, `rows` the world x kRowFields gathered rows (read only when done).
  log_verdict resolve(std::int64_t step, collective_status status, const std::string& error, const double* sent,
                      const double* rows);

  // The same for an ordinary log's fixed-size reduction (log_reduction.h): `sums` and `maxima` the reduced
  // vectors. The agreement figures stand in for the rows: the number of ranks and the sum of their ids, the
  // steps' and sequence numbers' minimum and maximum (this rank's own within them), each fingerprint field's
  // minimum and maximum. Settings that differ skip the interval like rows that differ, and ask for the table
  // at the next log (table_wanted), which names the ranks.
  log_verdict resolve_reduced(std::int64_t step, collective_status status, const std::string& error, const double* sent,
                              const double* sums, const double* maxima);

  // Whether the next log gathers the per-rank table whatever its sequence number: a reduction found
  // something only the table can name. Every rank in step resolved the same sums, so every rank agrees.
  bool table_wanted() const { return table_wanted_; }
  void table_started() { table_wanted_ = false; }

  const protocol_counters& counters() const { return counters_; }

 private:
  // Where a rank that found the rows out of step resumes.
  struct resume_point {
    bool by_step = true;  // resume at the first log whose step is beyond `step`; otherwise at the first
                          // log whose sequence number is beyond `sequence`
    double step = 0;
    std::int64_t sequence = 0;  // the sequence number of that latest log; adopted when resuming by step
    std::int64_t skipped = 0;   // logs skipped so far (at most kMaxResyncLogs)
  };
  // The outcome of comparing the gathered rows' log identities.
  struct step_check {
    bool match = true;
    std::int64_t other_rank = 0;  // the first rank whose log differs from this rank's
    double other_step = 0;
  };

  log_verdict lost(std::int64_t step, const std::string& why);
  // What resolve and resolve_reduced share once the collective is done and not broken: reporting resumes.
  void completed(std::int64_t step, log_verdict& verdict);
  // Out of step: counts the interval and says so once per episode.
  log_verdict out_of_step(std::int64_t step, std::int64_t other_rank, double other_step);
  // The latest log seen in a result out of step: where this rank resumes (resume_), if it is behind.
  void resume_after(double my_step, double my_sequence, double latest_step, double latest_sequence);
  std::string rows_no_rank_sent(const double* sent, const double* rows) const;
  bool is_warm_up_interval(const double* rows) const;
  step_check check_rows_in_step(const double* rows);
  bool waiting_to_resync(std::int64_t step);
  const double* row(const double* rows, std::int64_t r) const;

  std::int64_t rank_ = 0;
  std::int64_t world_ = 1;
  std::chrono::milliseconds collective_timeout_;
  std::vector<double> fingerprint_;  // this rank's row_config_* fields, written into every row
  std::int64_t sequence_ = 0;        // on_log calls so far; the same on every rank (the rows' tag)
  int consecutive_failures_ = 0;
  std::optional<resume_point> resume_;
  bool out_of_step_reported_ = false;
  bool config_mismatch_reported_ = false;
  bool table_wanted_ = false;
  protocol_counters counters_;
};

}  // namespace flopmeter::detail
