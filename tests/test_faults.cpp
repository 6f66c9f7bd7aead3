// Faults around the throughput plugin: a peer that dies, a collective that times out or fails, a clock
// that stands still, goes backwards or throws, events after flush(), hooks fired from several threads,
// sinks that cannot write. In every case the training loop carries on, nothing is thrown into it, the
// affected interval is skipped and counted (METRICS.md, "When things go wrong"), and later intervals report
// the right numbers again. Ranks are simulated in one process over support/fake_group.h.
#include <gtest/gtest.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <iterator>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "flopmeter/error.h"
#include "flopmeter/hooks.h"
#include "flopmeter/throughput.h"
#include "support/capture_sink.h"
#include "support/captured_log.h"
#include "support/fake_group.h"
#include "support/json_reading.h"
#include "support/small_models.h"
#include "support/thread_barrier.h"

namespace flopmeter {
namespace {

using testing::capture_sink;
using testing::fake_group;
using testing::small_text_model;
using namespace std::chrono_literals;

namespace fs = std::filesystem;

log_event log_at(std::int64_t step) {
  log_event e;
  e.step = step;
  return e;
}


// N ranks over one fake group, each with its own clock and a capture sink; `communicators` may replace
// the group's communicator of a rank (e.g. one whose start fails).
struct job {
  std::shared_ptr<fake_group> group;
  std::vector<std::shared_ptr<throughput_plugin>> ranks;
  std::vector<std::shared_ptr<capture_sink>> sinks;
  std::vector<double> clock;

  explicit job(int world, std::chrono::milliseconds timeout = 20ms,
               const std::function<void(int, throughput_options&)>& customize = nullptr,
               const std::function<std::shared_ptr<communicator>(int, std::shared_ptr<communicator>)>& wrap = nullptr)
      : group(std::make_shared<fake_group>(world)), clock(static_cast<std::size_t>(world), 0.0) {
    for (int r = 0; r < world; ++r) {
      throughput_options o;
      o.model = small_text_model();
      o.emit = emit_ranks::all;
      o.collective_timeout = timeout;
      auto sink = std::make_shared<capture_sink>();
      o.sinks = {sink};
      double* my_clock = &clock[static_cast<std::size_t>(r)];
      o.clock_seconds = [my_clock] { return *my_clock; };
      if (customize) customize(r, o);
      std::shared_ptr<communicator> comm = group->rank(r);
      if (wrap) comm = wrap(r, comm);
      ranks.push_back(throughput_plugin::create(std::move(o), comm));
      sinks.push_back(sink);
    }
  }

  throughput_plugin& rank(int r) { return *ranks[static_cast<std::size_t>(r)]; }
  void microbatch(int r, std::int64_t tokens) {
    microbatch_event e;
    const std::vector<std::int64_t> lengths = {tokens};
    e.document_lengths = lengths;
    e.samples = 1;
    rank(r).on_microbatch(e);
  }
  // One interval on every rank: 1 s, one micro-batch of `tokens` per rank, then the log of `step`.
  void interval(std::int64_t step, std::int64_t tokens) {
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      clock[r] += 1.0;
      microbatch(static_cast<int>(r), tokens);
    }
    for (auto& p : ranks) {
      log_event e;
      e.step = step;
      p->on_log(e);
    }
  }
  void flush_all() {
    for (auto& p : ranks) p->flush();
  }
  std::vector<std::int64_t> steps(int r) const {
    std::vector<std::int64_t> out;
    for (const auto& record : sinks[static_cast<std::size_t>(r)]->records) out.push_back(record.step);
    return out;
  }
};

// Interval k runs 10k tokens on each rank in 1 s, so a record of step k from a world of W ranks must say
// exactly 10k*W tokens/s: a record that mixed two ranks' different intervals could not.
void expect_every_record_exact(const job& j, int world) {
  for (const auto& sink : j.sinks) {
    for (std::size_t i = 0; i < sink->records.size(); ++i) {
      const double step = static_cast<double>(sink->records[i].step);
      EXPECT_DOUBLE_EQ(sink->value(i, "perf/tokens_per_second"), 10.0 * step * world) << "step " << step;
    }
  }
}

// ---- collectives ---------------------------------------------------------------------------------------

TEST(faults, failed_collectives_back_off_then_a_probe_resumes_reporting) {
  // Log k starts collective k-1. Collectives 2, 3, 4 (logs 3, 4, 5) fail on every rank; their failures are
  // seen at logs 4, 5, 6, the third in a row, so from log 6 the plugin backs off: no collective until the
  // retry log 16 (a multiple of 16), whose probe (collective 5) succeeds and is emitted at log 17, which
  // starts collective 6 again: one per log from then on.
  job j(2);
  for (const std::int64_t index : {2, 3, 4}) j.group->fail_collective(index);
  for (std::int64_t step = 1; step <= 20; ++step) j.interval(step, 10 * step);
  j.flush_all();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(j.steps(r), (std::vector<std::int64_t>{1, 2, 16, 17, 18, 19, 20})) << "rank " << r;
    const throughput_health h = j.rank(r).health();
    EXPECT_EQ(h.failed_collectives, 3u);
    // Collectives 0-4, the probe (5), then logs 17-20 (6-9).
    EXPECT_EQ(h.collectives_started, 10u);
    EXPECT_EQ(j.group->started(r), 10);
    // 3 failed + logs 6..15 without a collective.
    EXPECT_EQ(h.skipped_intervals, 13u);
  }
  expect_every_record_exact(j, 2);
  // tokens_seen counts every interval that ran, emitted or not: 10k tokens on each of 2 ranks for k = 1..20,
  // 20 * (1 + ... + 20) = 20 * 210 = 4200 (before: 1860, the emitted steps 1, 2, 16..20 only).
  EXPECT_DOUBLE_EQ(j.sinks[0]->value(6, "train/tokens_seen"), 20.0 * 210);
}

TEST(faults, dead_peer_costs_metrics_but_never_blocks_the_loop_after_backing_off) {
  // Rank 1 stops joining from collective 3 (log 4) on and never comes back. Logs 5, 6, 7 each wait out
  // the timeout (the deferred collective of the previous log), then the plugin backs off: the probe of
  // log 16 is polled at every later log, never waited for.
  constexpr auto kTimeout = 200ms;
  job j(2, kTimeout);
  j.group->stall_rank_from(1, 3);
  // One interval calls on_log on both ranks: waiting out the timeout would take at least 2 x 200 ms, polling
  // takes microseconds. 300 ms tells them apart with a wide margin either way.
  constexpr auto kNoWait = kTimeout * 3 / 2;
  std::chrono::duration<double> slowest_after_backoff{0};
  for (std::int64_t step = 1; step <= 40; ++step) {
    const auto start = std::chrono::steady_clock::now();
    j.interval(step, 10 * step);
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    if (step > 7) slowest_after_backoff = std::max(slowest_after_backoff, took);
  }
  const auto start = std::chrono::steady_clock::now();
  j.flush_all();
  EXPECT_LT(std::chrono::steady_clock::now() - start, kNoWait);
  EXPECT_LT(slowest_after_backoff, kNoWait) << "an on_log blocked on the timeout after backing off";
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(j.steps(r), (std::vector<std::int64_t>{1, 2, 3})) << "rank " << r;
    const throughput_health h = j.rank(r).health();
    EXPECT_EQ(h.failed_collectives, 3u);
    EXPECT_EQ(h.collectives_started, 7u);  // logs 1-6, and the probe of log 16 (still out)
    // 3 failed, logs 7-15 without a collective, logs 17-40 while the probe is out.
    EXPECT_EQ(h.skipped_intervals, 3u + 9u + 24u);
  }
  expect_every_record_exact(j, 2);
}

TEST(faults, slow_peer_catches_up_and_later_intervals_report_correctly_again) {
  // As above, but rank 1 is only slow: after log 20 it joins everything it held back, in order. The probe
  // of log 16 then completes and is emitted at log 21, whose collective starts the normal cadence again.
  job j(2, 20ms);
  j.group->stall_rank_from(1, 3);
  for (std::int64_t step = 1; step <= 20; ++step) j.interval(step, 10 * step);
  j.group->resume_rank(1);
  for (std::int64_t step = 21; step <= 25; ++step) j.interval(step, 10 * step);
  j.flush_all();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(j.steps(r), (std::vector<std::int64_t>{1, 2, 3, 16, 21, 22, 23, 24, 25})) << "rank " << r;
    EXPECT_EQ(j.rank(r).health().failed_collectives, 3u);
  }
  expect_every_record_exact(j, 2);
}

// A communicator whose start_allreduce_sum throws once, at its `fail_at`-th call, without issuing anything.
class start_fails_once final : public communicator {
 public:
  start_fails_once(std::shared_ptr<communicator> inner, int fail_at) : inner_(std::move(inner)), fail_at_(fail_at) {}
  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  std::string backend_name() const override { return "start-fails-once"; }
  std::unique_ptr<pending_collective> start_allreduce_sum(double* values, std::size_t count) override {
    if (calls_++ == fail_at_) throw error("injected: the backend refused to start the collective");
    return inner_->start_allreduce_sum(values, count);
  }

 private:
  std::shared_ptr<communicator> inner_;
  int fail_at_;
  int calls_ = 0;
};

// A broken all-reduce: it completes, but with NaN in every slot (values no rank sent). One rank: its own row
// comes back changed, with a step that is not a number, which no rank can have sent. The interval is
// discarded, never turned into a number, counted as a failed collective (not as ranks out of step: no rank's
// on_log was at fault), and the warning says the collective is broken (before: "ranks out of step: ... met
// rank 0's of step -nan", which blamed the trainer's on_log calls).
class returns_nan final : public communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string backend_name() const override { return "returns-nan"; }
  std::unique_ptr<pending_collective> start_allreduce_sum(double* values, std::size_t count) override {
    auto pending = inner_->start_allreduce_sum(values, count);  // the local sum completes at once
    std::fill(values, values + count, std::numeric_limits<double>::quiet_NaN());
    return pending;
  }

 private:
  std::shared_ptr<communicator> inner_ = make_local_communicator();
};

TEST(faults, a_collective_that_returns_values_nobody_sent_is_named_as_broken) {
  testing::captured_log log;
  throughput_options o;
  o.model = testing::small_vlm();
  o.logger = log.logger;
  o.peak_tflops_per_gpu = 1.0;
  auto sink = std::make_shared<capture_sink>();
  o.sinks = {sink};
  auto plugin = throughput_plugin::create(o, std::make_shared<returns_nan>());
  for (std::int64_t step = 1; step <= 2; ++step) {
    log_event l;
    l.step = step;
    plugin->on_log(l);
  }
  plugin->flush();
  EXPECT_TRUE(sink->records.empty());
  EXPECT_EQ(plugin->health().failed_collectives, 2u);  // logs 1 and 2, each discarded
  EXPECT_EQ(plugin->health().out_of_step_intervals, 0u);
  EXPECT_NE(log.text().find("warning|flopmeter: metrics of step 1 skipped: the collective returned this rank's own "
                            "row (rank 0) changed: step not a number and log not a number where step 1 and log 1 "
                            "were sent (values no rank sent: the all-reduce or all-gather is broken, or world_size "
                            "1 and rank 0 do not describe its group"),
            std::string::npos)
      << log.text();
  EXPECT_EQ(log.text().find("-nan"), std::string::npos) << log.text();
}

// A trainer's communicator that tells flopmeter a world of `world` with this rank at `rank`, whatever the
// group its all-reduce really spans (a C ABI flopmeter_comm filled in wrong).
class claims_layout final : public communicator {
 public:
  claims_layout(std::shared_ptr<communicator> inner, int rank, int world)
      : inner_(std::move(inner)), rank_(rank), world_(world) {}
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string backend_name() const override { return "claims-layout"; }
  std::unique_ptr<pending_collective> start_allreduce_sum(double* values, std::size_t count) override {
    return inner_->start_allreduce_sum(values, count);
  }

 private:
  std::shared_ptr<communicator> inner_;
  int rank_, world_;
};

// Two ranks whose all-reduce spans both, each told world_size 1 and rank 0: both write row 0, the sum reads
// twice what each sent (step 2 and log 2 where step 1 and log 1 were sent; an interval of 2 s where 1 s was).
// Reported, that would be tokens/s of one GPU's worth over a doubled interval: the job's rate halved, with no
// sign of it. Each rank sees its own row changed: the interval is discarded and counted as a failed
// collective, three in a row back off (logs 1-3 fail, seen at logs 2-4; logs 4 and 5 start none), and the
// warning names world_size and rank.
TEST(faults, a_world_size_smaller_than_the_collectives_group_is_refused_not_reported_at_one_nth) {
  testing::captured_log log;
  job j(
      2, 20ms, [&](int, throughput_options& o) { o.logger = log.logger; },
      [](int, std::shared_ptr<communicator> comm) -> std::shared_ptr<communicator> {
        return std::make_shared<claims_layout>(std::move(comm), 0, 1);
      });
  for (std::int64_t step = 1; step <= 5; ++step) j.interval(step, 10 * step);
  j.flush_all();
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(j.sinks[static_cast<std::size_t>(r)]->records.empty()) << "rank " << r;
    EXPECT_EQ(j.rank(r).health().failed_collectives, 3u) << "rank " << r;
    EXPECT_EQ(j.rank(r).health().out_of_step_intervals, 0u) << "rank " << r;
  }
  EXPECT_NE(log.text().find("the collective returned this rank's own row (rank 0) changed: step 2 and log 2 where "
                            "step 1 and log 1 were sent (values no rank sent: the all-reduce or all-gather is broken, "
                            "or world_size 1 and rank 0 do not describe its group"),
            std::string::npos)
      << log.text();
}

// One rank told world_size 2 while its all-reduce spans itself alone: row 1 stays empty (log 0, which no rank
// sends: a rank's first row carries log 1). Refused as values no rank sent, not as ranks out of step (which
// would wait for a rank 1 that does not exist).
TEST(faults, a_world_size_larger_than_the_collectives_group_is_refused) {
  testing::captured_log log;
  throughput_options o;
  o.model = small_text_model();
  o.logger = log.logger;
  auto sink = std::make_shared<capture_sink>();
  o.sinks = {sink};
  auto plugin = throughput_plugin::create(o, std::make_shared<claims_layout>(make_local_communicator(), 0, 2));
  plugin->on_log(log_at(1));
  plugin->flush();
  EXPECT_TRUE(sink->records.empty());
  EXPECT_EQ(plugin->health().failed_collectives, 1u);
  EXPECT_EQ(plugin->health().out_of_step_intervals, 0u);
  EXPECT_NE(log.text().find("the collective returned a row for rank 1 that no rank fills that way (step 0, log 0) "
                            "(values no rank sent: the all-reduce or all-gather is broken, or world_size 2 and rank 0"),
            std::string::npos)
      << log.text();
}

// train/tokens_seen and train/num_samples are running totals since the start: an interval whose collective
// could not start (log 2 here) loses its rates, not its tokens. One rank, interval k runs 10k tokens and one
// sample: records at steps 1, 3, 4, 5 say 10, 10+20+30 = 60, 100 and 150 tokens, and 1, 3, 4, 5 samples
// (before: 40, 80, 130 and 2, 3, 4, every later total short of log 2's 20 tokens and 1 sample).
TEST(faults, a_skipped_interval_still_counts_in_the_running_totals) {
  job j(1, 20ms, nullptr, [](int, std::shared_ptr<communicator> comm) -> std::shared_ptr<communicator> {
    return std::make_shared<start_fails_once>(std::move(comm), 1);
  });
  for (std::int64_t step = 1; step <= 5; ++step) j.interval(step, 10 * step);
  j.flush_all();
  ASSERT_EQ(j.steps(0), (std::vector<std::int64_t>{1, 3, 4, 5}));
  const capture_sink& sink = *j.sinks[0];
  const double tokens[] = {10, 60, 100, 150}, samples[] = {1, 3, 4, 5};
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_DOUBLE_EQ(sink.value(i, "train/tokens_seen"), tokens[i]) << "record " << i;
    EXPECT_DOUBLE_EQ(sink.value(i, "train/num_samples"), samples[i]) << "record " << i;
  }
  EXPECT_DOUBLE_EQ(sink.value(1, "perf/tokens_per_second"), 30.0);  // the rates are log 3's interval alone
}

TEST(faults, ranks_out_of_step_never_mix_intervals_and_fall_back_into_step) {
  // Rank 0 cannot start the collective of log 3, so its collective of log 4 is paired with rank 1's of log
  // 3. The rows say so (steps 4 and 3): both ranks discard that result, never mixing two intervals (each
  // record below is exact). Rank 1, behind, starts no collective at log 4 (the latest log in the rows);
  // rank 0 carries on; both start log 5's together and report again from then on:
  //   rank 0: log 3 lost to the start failure, log 4 discarded (out of step);
  //   rank 1: log 3 discarded (out of step), log 4 skipped while getting back in step.
  job j(2, 20ms, nullptr, [](int r, std::shared_ptr<communicator> comm) -> std::shared_ptr<communicator> {
    if (r == 0) return std::make_shared<start_fails_once>(std::move(comm), 2);
    return comm;
  });
  for (std::int64_t step = 1; step <= 60; ++step) j.interval(step, 10 * step);
  j.flush_all();
  std::vector<std::int64_t> expected = {1, 2};
  for (std::int64_t step = 5; step <= 60; ++step) expected.push_back(step);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(j.steps(r), expected) << "rank " << r;
    const throughput_health h = j.rank(r).health();
    EXPECT_EQ(h.out_of_step_intervals, 1u) << "rank " << r;
    EXPECT_EQ(h.failed_collectives, r == 0 ? 2u : 1u) << "rank " << r;  // rank 0: the start failure too
    EXPECT_EQ(h.skipped_intervals, 2u) << "rank " << r;
  }
  expect_every_record_exact(j, 2);
}

TEST(faults, a_rank_that_skips_one_on_log_costs_one_interval_and_everyone_gets_back_in_step) {
  // Rank 3 of 4 skips its on_log at step 9 (its micro-batches of steps 9 and 10 both land in its interval
  // of step 10). Counting on_log calls alone cannot see it: each rank's 9th collective carries sequence
  // number 9, but rank 3's closes step 10 and the others' step 9. The rows carry the step, so the result is
  // discarded on every rank; ranks 0-2, behind, issue nothing at their log 10; from log 11 on all four
  // start the same log's collective again. Each record is exact (10 * step * 4 tokens/s): one that paired
  // rank 3's interval with its peers' next one would not be.
  // One thread per rank, meeting at a barrier every step (the gradient all-reduce of a real job), so that
  // each rank's collective waits for its peers' as it would across processes.
  job j(4, 5000ms);
  testing::thread_barrier step_barrier(4);
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&j, &step_barrier, r] {
      for (std::int64_t step = 1; step <= 20; ++step) {
        j.clock[static_cast<std::size_t>(r)] += 1.0;
        j.microbatch(r, 10 * step);
        step_barrier.arrive_and_wait();
        if (r == 3 && step == 9) continue;
        j.rank(r).on_log(log_at(step));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  j.flush_all();
  std::vector<std::int64_t> expected;
  for (std::int64_t step = 1; step <= 20; ++step) {
    if (step != 9 && step != 10) expected.push_back(step);
  }
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(j.steps(r), expected) << "rank " << r;
    const throughput_health h = j.rank(r).health();
    EXPECT_EQ(h.out_of_step_intervals, 1u) << "rank " << r;
    EXPECT_EQ(h.failed_collectives, 1u) << "rank " << r;
    // Ranks 0-2: the discarded log 9 and log 10 without a collective; rank 3: its discarded log 10.
    EXPECT_EQ(h.skipped_intervals, r < 3 ? 2u : 1u) << "rank " << r;
    // Every record carries the emitting rank's counters: the last one says what was lost.
    const capture_sink& s = *j.sinks[static_cast<std::size_t>(r)];
    EXPECT_DOUBLE_EQ(s.value(s.records.size() - 1, "health/out_of_step_intervals"), 1.0);
    EXPECT_DOUBLE_EQ(s.value(0, "health/out_of_step_intervals"), 0.0);
  }
  expect_every_record_exact(j, 4);
}

// ---- the clock -----------------------------------------------------------------------------------------

TEST(faults, clock_going_backwards_skips_that_interval_only) {
  job j(1);
  j.interval(1, 10);   // clock 1
  j.clock[0] = 0.25;   // backwards: interval 2 is 0.25 - 1 = -0.75 s
  j.microbatch(0, 20);
  j.rank(0).on_log(log_at(2));
  j.interval(3, 30);   // 0.25 -> 1.25: 1 s again
  j.flush_all();
  EXPECT_EQ(j.steps(0), (std::vector<std::int64_t>{1, 3}));
  EXPECT_EQ(j.rank(0).health().skipped_intervals, 1u);
  expect_every_record_exact(j, 1);
}

TEST(faults, zero_interval_on_one_rank_skips_the_interval_on_every_rank) {
  // Rank 1's clock stands still for interval 2: a rate over 0 s is not a number, so no rank emits step 2
  // (every rank derives from the same rows, so they agree), and step 3 is exact again.
  job j(2);
  j.interval(1, 10);
  j.clock[0] += 1.0;
  for (int r = 0; r < 2; ++r) j.microbatch(r, 20);
  for (int r = 0; r < 2; ++r) j.rank(r).on_log(log_at(2));
  j.interval(3, 30);
  j.flush_all();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(j.steps(r), (std::vector<std::int64_t>{1, 3})) << "rank " << r;
    EXPECT_EQ(j.rank(r).health().skipped_intervals, 1u);
    EXPECT_EQ(j.rank(r).health().failed_collectives, 0u);
  }
  expect_every_record_exact(j, 2);
}

TEST(faults, clock_returning_nan_or_throwing_costs_the_intervals_around_it) {
  // A NaN reading makes the interval ending there and the one starting there NaN seconds long; a clock that
  // throws reads as NaN. Both are skipped, and the next interval is measured again.
  double now = 0;
  bool throw_next = false;
  throughput_options o;
  o.model = small_text_model();
  auto sink = std::make_shared<capture_sink>();
  o.sinks = {sink};
  o.clock_seconds = [&] {
    if (throw_next) {
      throw_next = false;
      throw std::runtime_error("clock unavailable");
    }
    return now;
  };
  auto plugin = throughput_plugin::create(o, make_local_communicator());
  const std::vector<std::int64_t> doc = {100};
  microbatch_event e;
  e.document_lengths = doc;
  const auto step = [&](std::int64_t s, double clock) {
    now = clock;
    plugin->on_microbatch(e);
    EXPECT_NO_THROW(plugin->on_log(log_at(s)));
  };
  step(1, 1.0);                                          // 1 s: emitted
  step(2, std::numeric_limits<double>::quiet_NaN());     // NaN: skipped
  step(3, 3.0);                                          // 3 - NaN: skipped
  step(4, 4.0);                                          // 1 s: emitted
  throw_next = true;
  step(5, 5.0);                                          // the clock throws: NaN, skipped
  step(6, 6.0);                                          // skipped
  step(7, 7.0);                                          // 1 s: emitted
  plugin->flush();
  ASSERT_EQ(sink->records.size(), 3u);
  EXPECT_EQ(sink->records[0].step, 1);
  EXPECT_EQ(sink->records[1].step, 4);
  EXPECT_EQ(sink->records[2].step, 7);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_DOUBLE_EQ(sink->value(i, "perf/tokens_per_second"), 100.0);
  EXPECT_EQ(plugin->health().skipped_intervals, 4u);
  // The group is healthy: a NaN interval comes back from the collective as the NaN it was sent as, and is the
  // clock's fault, not a failed collective (found by fuzz_microbatch's invariant).
  EXPECT_EQ(plugin->health().failed_collectives, 0u);
}

// ---- events after flush, non-finite trainer figures ----------------------------------------------------

TEST(faults, microbatch_and_log_after_flush_are_counted_and_ignored) {
  job j(1);
  j.interval(1, 10);
  j.flush_all();
  ASSERT_EQ(j.sinks[0]->records.size(), 1u);
  j.microbatch(0, 1000);
  j.interval(2, 10);  // one more micro-batch and a log
  j.flush_all();      // a second flush does nothing
  EXPECT_EQ(j.sinks[0]->records.size(), 1u);
  EXPECT_EQ(j.rank(0).health().events_after_flush, 3u);
  EXPECT_EQ(j.rank(0).health().collectives_started, 1u);
}

TEST(faults, non_finite_or_negative_trainer_times_and_memory_are_not_reported) {
  // A NaN data time on rank 0 would otherwise decide the world maximum by argument order, an infinite one
  // is not a duration, and negative memory is not memory: they read as "not reported" (0), so the other
  // rank's figures stand.
  job j(2);
  for (int r = 0; r < 2; ++r) j.microbatch(r, 10);
  for (int r = 0; r < 2; ++r) {
    j.clock[static_cast<std::size_t>(r)] += 1.0;
    log_event e;
    e.step = 1;
    e.data_time = std::chrono::duration<double>(r == 0 ? std::numeric_limits<double>::quiet_NaN() : 0.5);
    e.forward_backward_time =
        std::chrono::duration<double>(r == 0 ? std::numeric_limits<double>::infinity() : 0.25);
    e.peak_memory_bytes = r == 0 ? -5 : std::int64_t{1} << 30;
    j.rank(r).on_log(e);
  }
  j.flush_all();
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(j.sinks[static_cast<std::size_t>(r)]->records.size(), 1u);
    EXPECT_DOUBLE_EQ(j.sinks[static_cast<std::size_t>(r)]->value(0, "perf/data_time"), 0.5);
    EXPECT_DOUBLE_EQ(j.sinks[static_cast<std::size_t>(r)]->value(0, "perf/fwd_bwd_time"), 0.25);
    EXPECT_DOUBLE_EQ(j.sinks[static_cast<std::size_t>(r)]->value(0, "perf/mem_gib"), 1.0);
  }
}

TEST(faults, rank_without_microbatches_has_no_step_time_row) {
  // Rank 1 ran no micro-batch in the interval: it has no step time, so neither perf/step_time nor its
  // top-k rows are reported (a NaN "slowest step" would be noise), while the rest is.
  job j(2, 20ms, [](int, throughput_options& o) { o.topk = 1; });
  j.microbatch(0, 10);
  for (int r = 0; r < 2; ++r) j.clock[static_cast<std::size_t>(r)] += 1.0;
  for (int r = 0; r < 2; ++r) j.rank(r).on_log(log_at(1));
  j.flush_all();
  const capture_sink& s = *j.sinks[0];
  ASSERT_EQ(s.records.size(), 1u);
  EXPECT_FALSE(s.has(0, "perf/step_time"));
  EXPECT_FALSE(s.has(0, "perf_topk/step_time_slow_0"));
  EXPECT_DOUBLE_EQ(s.value(0, "perf/tokens_per_second"), 10.0);
  EXPECT_DOUBLE_EQ(s.value(0, "perf_topk/tps_fast_0"), 10.0);
  for (const auto& [name, value] : s.records[0].values) EXPECT_TRUE(std::isfinite(value)) << name;
}

// ---- threads -------------------------------------------------------------------------------------------

TEST(faults, hooks_from_two_threads_at_once_count_every_microbatch) {
  // Two threads fire micro-batches through `hooks` and straight into the plugin while a third logs; the
  // plugin's mutex serialises them (this test runs under ThreadSanitizer in scripts/test_sanitizers.sh).
  // Every micro-batch lands in exactly one interval, so the emitted tokens add up to all of them.
  std::atomic<int> clock_ticks{0};
  throughput_options o;
  o.model = small_text_model();
  o.topk = 0;
  auto sink = std::make_shared<capture_sink>();
  o.sinks = {sink};
  o.clock_seconds = [&clock_ticks] { return static_cast<double>(++clock_ticks); };  // every interval 1+ s
  auto plugin = throughput_plugin::create(o, make_local_communicator());
  hooks h;
  const registration reg = h.add(plugin);
  constexpr int kPerThread = 3000;
  const std::vector<std::int64_t> doc = {7};
  const auto fire = [&](bool through_hooks) {
    microbatch_event e;
    e.document_lengths = doc;
    e.samples = 1;
    for (int i = 0; i < kPerThread; ++i) {
      if (through_hooks) {
        h.on_microbatch(e);
      } else {
        plugin->on_microbatch(e);
      }
    }
  };
  std::atomic<bool> stop{false};
  std::thread logger([&] {
    std::int64_t step = 0;
    while (!stop) {
      h.on_log(log_at(++step));
      (void)plugin->health();
      std::this_thread::yield();
    }
    h.on_log(log_at(++step));  // closes the last interval
  });
  std::thread first(fire, true);
  std::thread second(fire, false);
  first.join();
  second.join();
  stop = true;
  logger.join();
  h.flush();
  ASSERT_FALSE(sink->records.empty());
  EXPECT_DOUBLE_EQ(sink->records.back().find("train/tokens_seen") ? *sink->records.back().find("train/tokens_seen") : -1,
                   7.0 * 2 * kPerThread);
  EXPECT_DOUBLE_EQ(*sink->records.back().find("train/num_samples"), 2.0 * kPerThread);
  EXPECT_EQ(plugin->health().bad_microbatches, 0u);
  EXPECT_EQ(plugin->health().skipped_intervals, 0u);
  EXPECT_EQ(h.swallowed_exceptions(), 0u);
}

// ---- sinks ---------------------------------------------------------------------------------------------

using testing::captured_log;

TEST(faults, jsonl_sink_on_a_full_disk_costs_its_records_not_the_run) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full on this system";
  captured_log log;
  auto jsonl = make_jsonl_sink("/dev/full", log.logger);
  job j(1, 20ms, [&](int, throughput_options& o) { o.sinks.push_back(jsonl); });
  for (std::int64_t step = 1; step <= 5; ++step) j.interval(step, 10 * step);
  j.flush_all();
  // Every record reached the other sink; each write to the full disk failed, counted; one error logged.
  EXPECT_EQ(j.steps(0), (std::vector<std::int64_t>{1, 2, 3, 4, 5}));
  expect_every_record_exact(j, 1);
  EXPECT_EQ(jsonl->failures(), 5u);
  EXPECT_NE(log.stream.str().find("No space left on device"), std::string::npos) << log.stream.str();
}

TEST(faults, jsonl_file_removed_mid_run_is_recreated_and_later_records_land_in_it) {
  const fs::path dir = fs::temp_directory_path() / ("flopmeter_faults_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path path = dir / "metrics.jsonl";
  captured_log log;
  auto jsonl = make_jsonl_sink(path.string(), log.logger);
  job j(1, 20ms, [&](int, throughput_options& o) { o.sinks.push_back(jsonl); });
  j.interval(1, 10);
  j.interval(2, 20);  // emits step 1
  ASSERT_TRUE(fs::remove(path));
  j.interval(3, 30);  // emits step 2 into a new file
  fs::remove_all(dir);
  j.interval(4, 40);  // emits step 3: the directory is gone, the record is lost and counted
  fs::create_directories(dir);
  j.interval(5, 50);  // emits step 4: the file is back
  j.flush_all();      // emits step 5
  // The file's records by step, read with nlohmann-json; -1 where a step has no record.
  std::map<std::int64_t, double> tokens_per_second;
  std::string text;
  for (const nlohmann::json& record : testing::read_jsonl(path.string())) {
    text += record.dump() + "\n";
    tokens_per_second[static_cast<std::int64_t>(testing::number_field(record, "step"))] =
        testing::number_field(record, "perf/tokens_per_second");
  }
  const auto at_step = [&](std::int64_t step) {
    const auto it = tokens_per_second.find(step);
    return it == tokens_per_second.end() ? -1.0 : it->second;
  };
  EXPECT_EQ(tokens_per_second.count(1), 0u) << text;
  EXPECT_EQ(tokens_per_second.count(2), 0u) << text;  // it went to the file removed with the directory
  EXPECT_EQ(at_step(4), 40) << text;
  EXPECT_EQ(at_step(5), 50) << text;
  EXPECT_EQ(jsonl->failures(), 1u);
  EXPECT_EQ(j.steps(0), (std::vector<std::int64_t>{1, 2, 3, 4, 5}));
  fs::remove_all(dir);
}

TEST(faults, throwing_callback_sink_is_counted_and_the_other_sinks_still_get_the_record) {
  int calls = 0;
  auto throwing = make_callback_sink([&calls](const metrics_record&) {
    ++calls;
    throw std::runtime_error("the trainer's callback failed");
  });
  job j(1, 20ms, [&](int, throughput_options& o) { o.sinks.insert(o.sinks.begin(), throwing); });
  for (std::int64_t step = 1; step <= 3; ++step) j.interval(step, 10 * step);
  j.flush_all();
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(throwing->failures(), 3u);
  EXPECT_EQ(j.steps(0), (std::vector<std::int64_t>{1, 2, 3}));
}

TEST(faults, every_dropped_record_is_counted_in_health_and_in_the_next_records) {
  // A JSONL file in a directory that does not exist (made with make_jsonl_sink, which opens lazily): each
  // of the 3 records is dropped by that sink. health().dropped_records says 3, and the records the capture
  // sink got carry the count as of their emission: 0 before the first drop (the JSONL sink comes after the
  // capture sink), then 1, then 2.
  captured_log log;
  auto jsonl = make_jsonl_sink("/nonexistent-flopmeter-dir/metrics.jsonl", log.logger);
  job j(1, 20ms, [&](int, throughput_options& o) { o.sinks.push_back(jsonl); });
  for (std::int64_t step = 1; step <= 3; ++step) j.interval(step, 10 * step);
  j.flush_all();
  EXPECT_EQ(j.rank(0).health().dropped_records, 3u);
  const capture_sink& s = *j.sinks[0];
  ASSERT_EQ(s.records.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_DOUBLE_EQ(s.value(i, "health/dropped_records"), static_cast<double>(i));
  EXPECT_NE(log.stream.str().find("cannot open for append"), std::string::npos) << log.stream.str();
}

TEST(faults, a_jsonl_path_that_cannot_be_opened_fails_at_create_naming_the_path) {
  sink_config config;
  config.console = false;
  config.jsonl_path = "/nonexistent-flopmeter-dir/metrics_{rank}.jsonl";
  try {
    (void)make_sinks(config, 3);
    FAIL() << "make_sinks accepted a JSONL path in a missing directory";
  } catch (const error& e) {
    EXPECT_EQ(std::string(e.what()),
              "key 'sinks.jsonl': cannot open \"/nonexistent-flopmeter-dir/metrics_3.jsonl\" for append: No such file "
              "or directory (the directory \"/nonexistent-flopmeter-dir\" does not exist: create it first, or change "
              "[sinks] jsonl)");
  }
}

TEST(faults, destroying_without_flush_emits_the_last_interval) {
  // Logs 1 and 2 on both ranks; the interval of log 2 is still in flight when the plugins are destroyed
  // without flush(). Destruction flushes it: both ranks get steps 1 and 2, exactly.
  job j(2);
  j.interval(1, 10);
  j.interval(2, 20);
  for (auto& sink : j.sinks) EXPECT_EQ(sink->records.size(), 1u);
  j.ranks.clear();  // destroys both plugins
  for (int r = 0; r < 2; ++r) EXPECT_EQ(j.steps(r), (std::vector<std::int64_t>{1, 2})) << "rank " << r;
  expect_every_record_exact(j, 2);
}

TEST(faults, reporting_pause_and_resume_are_logged_once_each) {
  // As failed_collectives_back_off_then_a_probe_resumes_reporting: collectives 2, 3, 4 fail, reporting
  // pauses at log 6 and resumes when the probe of log 16 completes (seen at log 17). Each rank says so
  // once: two "paused" and two "resumed" lines for the two ranks, naming the steps.
  captured_log log;
  job j(2, 20ms, [&](int, throughput_options& o) { o.logger = log.logger; });
  for (const std::int64_t index : {2, 3, 4}) j.group->fail_collective(index);
  for (std::int64_t step = 1; step <= 20; ++step) j.interval(step, 10 * step);
  j.flush_all();
  const std::string text = log.stream.str();
  const auto count = [&text](const std::string& what) {
    std::size_t n = 0;
    for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("reporting paused at step 5 after 3 failed collectives in a row"), 2u) << text;
  EXPECT_EQ(count("reporting resumed: the collective of step 16 completed"), 2u) << text;
  EXPECT_EQ(count("reporting paused"), 2u);
  EXPECT_EQ(count("reporting resumed"), 2u);
}

}  // namespace
}  // namespace flopmeter
