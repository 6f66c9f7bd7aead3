// The throughput plugin over real Gloo process groups (ranks as threads over a HashStore, tests/gloo_harness.h):
// the layouts dp4, dp2 x tp2, tp2 x pp2, dp2 x cp2, uneven tokens per replica, padding, and a rank whose
// collective fails. Expected values are derived by hand in each test.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <string>
#include <thread>
#include <memory>
#include <vector>
#include <algorithm>

#include "flopmeter/c10d.h"
#include "flopmeter/throughput.h"
#include "gloo_harness.h"
#include "support/capture_sink.h"
#include "support/captured_log.h"
#include "support/small_models.h"
#include "support/thread_barrier.h"

namespace flopmeter {
namespace {

using flopmeter_test::gloo_run_options;
using flopmeter_test::run_gloo_ranks;
using testing::capture_sink;

// The small text model (support/small_models.h): dense_per_token 7392, text_attn_pair 192.
using testing::small_text_model;
const auto doc_flops = testing::small_doc_flops;

struct rank_result {
  std::vector<metrics_record> records;
  throughput_health health;
};

// Runs `world` Gloo ranks; each rank r feeds `docs(r)` (one micro-batch, plus `padding(r)`) in an interval of
// exactly 2 s (a fake clock), logs step 1 and flushes. Returns every rank's records.
std::vector<rank_result> run_job(int world, parallel_sizes parallel, const std::function<std::vector<std::int64_t>(int)>& docs,
                                 const std::function<std::int64_t(int)>& padding = [](int) { return 0; }) {
  std::vector<rank_result> results(static_cast<std::size_t>(world));
  run_gloo_ranks(world, [&](int rank, c10::intrusive_ptr<c10d::ProcessGroup> group) {
    auto sink = std::make_shared<capture_sink>();
    auto clock = std::make_shared<double>(0.0);
    throughput_options o;
    o.model = small_text_model();
    o.parallel = parallel;
    o.peak_tflops_per_gpu = 1e-3;
    o.emit = emit_ranks::all;
    o.topk = world;  // every rank appears on both sides
    o.sinks = {sink};
    o.clock_seconds = [clock] { return *clock; };
    auto plugin = throughput_plugin::create(std::move(o), make_c10d_communicator(group));
    const std::vector<std::int64_t> lengths = docs(rank);
    microbatch_event e;
    e.document_lengths = lengths;
    e.padding_tokens = padding(rank);
    e.samples = static_cast<std::int64_t>(lengths.size());
    plugin->on_microbatch(e);
    *clock = 2.0;
    log_event l;
    l.step = 1;
    l.peak_memory_bytes = (std::int64_t{rank} + 1) << 30;
    plugin->on_log(l);
    plugin->flush();
    results[static_cast<std::size_t>(rank)] = {sink->records, plugin->health()};
  });
  return results;
}

double value(const metrics_record& r, const std::string& name) {
  const double* v = r.find(name);
  return v == nullptr ? std::nan("") : *v;
}

// Sum of every rank's tps row (with topk = world the slow side lists all ranks).
double sum_of_tps_rows(const metrics_record& r, int world) {
  double sum = 0;
  for (int i = 0; i < world; ++i) sum += value(r, "perf_topk/tps_slow_" + std::to_string(i));
  return sum;
}

TEST(throughput_gloo, uneven_replicas_sum_to_the_job_rate_and_memory_is_the_worlds_max) {
  // Four replicas of 1000, 2000, 3000, 4000 real tokens in 2 s: 10000 / 2 = 5000 tok/s, 1250 per GPU.
  const auto results = run_job(4, parallel_sizes{}, [](int r) { return std::vector<std::int64_t>{1000 * (r + 1)}; });
  for (const rank_result& rr : results) {
    ASSERT_EQ(rr.records.size(), 1u);
    const metrics_record& m = rr.records[0];
    EXPECT_DOUBLE_EQ(value(m, "perf/tokens_per_second"), 5000.0);
    EXPECT_DOUBLE_EQ(value(m, "perf/tokens_per_second_per_gpu"), 1250.0);
    EXPECT_DOUBLE_EQ(sum_of_tps_rows(m, 4), 5000.0);
    const double flops = doc_flops(1000) + doc_flops(2000) + doc_flops(3000) + doc_flops(4000);
    EXPECT_NEAR(value(m, "perf/tflops_per_second") / (flops / 2 / 4 / 1e12), 1.0, 1e-12);
    EXPECT_DOUBLE_EQ(value(m, "perf/mem_gib"), 4.0);  // max over the world: rank 3 reported 4 GiB
    EXPECT_EQ(rr.health.collectives_started, 1u);
  }
}

TEST(throughput_gloo, tensor_parallel_ranks_share_their_replicas_tokens) {
  // rank = tp + 2*dp. Replica 0 (ranks 0, 1): 600 tokens; replica 1 (ranks 2, 3): 1000. TP ranks share the
  // micro-batch: tokens/s = (600 + 1000) / 2 = 800, not 1600.
  const auto results = run_job(4, parallel_sizes{2, 1, 1}, [](int r) { return std::vector<std::int64_t>{r < 2 ? 600 : 1000}; });
  for (const rank_result& rr : results) {
    const metrics_record& m = rr.records.at(0);
    EXPECT_DOUBLE_EQ(value(m, "perf/tokens_per_second"), 800.0);
    EXPECT_DOUBLE_EQ(value(m, "train/tokens_seen"), 1600.0);
    // Per GPU: (F(600) + F(1000)) / 2 s / 4 GPUs.
    EXPECT_NEAR(value(m, "perf/tflops_per_second") / ((doc_flops(600) + doc_flops(1000)) / 2 / 4 / 1e12), 1.0, 1e-12);
  }
}

TEST(throughput_gloo, one_replica_over_tensor_and_pipeline_ranks_counts_its_tokens_once) {
  // One replica over 4 GPUs: 2048 tokens in 2 s -> 1024 tok/s, 256 per GPU; F(2048) / 2 / 4 per GPU.
  const auto results = run_job(4, parallel_sizes{2, 1, 2}, [](int) { return std::vector<std::int64_t>{1024, 1024}; });
  for (const rank_result& rr : results) {
    const metrics_record& m = rr.records.at(0);
    EXPECT_DOUBLE_EQ(value(m, "perf/tokens_per_second"), 1024.0);
    EXPECT_DOUBLE_EQ(value(m, "perf/tokens_per_second_per_gpu"), 256.0);
    EXPECT_NEAR(value(m, "perf/tflops_per_second") / (2 * doc_flops(1024) / 2 / 4 / 1e12), 1.0, 1e-12);
    EXPECT_DOUBLE_EQ(value(m, "train/num_samples"), 2.0);
  }
}

TEST(throughput_gloo, context_parallel_padding_counts_as_work_but_not_as_tokens) {
  // rank = cp + 2*dp. Replica 0: 700 real + 300 padding; replica 1: 900 real + 100 padding.
  // tokens/s = (700 + 900) / 2 = 800; batch efficiency = 1600 / 2000 = 0.8.
  const auto results = run_job(
      4, parallel_sizes{1, 2, 1}, [](int r) { return std::vector<std::int64_t>{r < 2 ? 700 : 900}; },
      [](int r) { return std::int64_t{r < 2 ? 300 : 100}; });
  for (const rank_result& rr : results) {
    const metrics_record& m = rr.records.at(0);
    EXPECT_DOUBLE_EQ(value(m, "perf/tokens_per_second"), 800.0);
    EXPECT_DOUBLE_EQ(value(m, "train/batch_efficiency"), 0.8);
    // Padding is dense work: F = 7392*(700+300) + 192*700*701/2 for replica 0, likewise for replica 1.
    const double f0 = 7392.0 * 1000 + 192.0 * 700 * 701 / 2, f1 = 7392.0 * 1000 + 192.0 * 900 * 901 / 2;
    EXPECT_NEAR(value(m, "perf/tflops_per_second") / ((f0 + f1) / 2 / 4 / 1e12), 1.0, 1e-12);
  }
}

TEST(throughput_gloo, the_per_rank_topk_names_a_straggler_in_a_job_synchronised_every_step) {
  // Four ranks meet at a Gloo barrier every step (the gradient all-reduce of a real job), so every rank's
  // interval is the same and the tps and step-time top-k cannot tell them apart. Rank 2 does far more
  // work: its forward+backward takes at least 150 ms where the others' take about 10 ms (sleeps: a loaded
  // machine may stretch them, but not by 140 ms every step). Each rank reports its own
  // forward_backward_time, so perf_topk/fwd_bwd_time_slow_0_rank names rank 2 at every log, and
  // the headline perf/fwd_bwd_time (the world maximum) is rank 2's.
  constexpr int kWorld = 4;
  constexpr int kSteps = 5;
  std::vector<std::vector<metrics_record>> records(kWorld);
  run_gloo_ranks(kWorld, [&](int rank, c10::intrusive_ptr<c10d::ProcessGroup> group) {
    auto sink = std::make_shared<capture_sink>();
    throughput_options o;
    o.model = small_text_model();
    o.emit = emit_ranks::all;
    o.topk = 1;
    o.sinks = {sink};
    auto plugin = throughput_plugin::create(std::move(o), make_c10d_communicator(group));
    for (int step = 1; step <= kSteps; ++step) {
      const auto start = std::chrono::steady_clock::now();
      const std::vector<std::int64_t> lengths = {64};
      microbatch_event e;
      e.document_lengths = lengths;
      plugin->on_microbatch(e);
      std::this_thread::sleep_for(std::chrono::milliseconds(rank == 2 ? 150 : 10));  // "forward + backward"
      const std::chrono::duration<double> forward_backward = std::chrono::steady_clock::now() - start;
      group->barrier()->wait();  // the step's synchronisation
      log_event l;
      l.step = step;
      l.forward_backward_time = forward_backward;
      plugin->on_log(l);
    }
    plugin->flush();
    records[static_cast<std::size_t>(rank)] = sink->records;
  });
  for (int r = 0; r < kWorld; ++r) {
    const std::vector<metrics_record>& rs = records[static_cast<std::size_t>(r)];
    ASSERT_EQ(rs.size(), static_cast<std::size_t>(kSteps)) << "rank " << r;
    for (const metrics_record& m : rs) {
      EXPECT_EQ(value(m, "perf_topk/fwd_bwd_time_slow_0_rank"), 2.0) << "rank " << r << " step " << m.step;
      EXPECT_GE(value(m, "perf_topk/fwd_bwd_time_slow_0"), 0.150);
      EXPECT_NE(value(m, "perf_topk/fwd_bwd_time_fast_0_rank"), 2.0);
      EXPECT_LT(value(m, "perf_topk/fwd_bwd_time_fast_0"), value(m, "perf_topk/fwd_bwd_time_slow_0"));
      EXPECT_EQ(value(m, "perf/fwd_bwd_time"), value(m, "perf_topk/fwd_bwd_time_slow_0"));
    }
  }
}

TEST(throughput_gloo, destroying_the_plugin_on_a_hung_peer_takes_the_collective_timeout_not_gloos) {
  // Rank 1 stays alive but never joins a collective (as a peer stopped by SIGSTOP). Rank 0's plugin owns
  // the only reference to its Gloo group (as with make_gloo_communicator_from_env), starts the collective of
  // log 1 and is destroyed without flush(). Destruction flushes, waiting at most collective_timeout (300 ms)
  // for that collective, and must not then wait for Gloo's own timeout (10 s) in the group's destructor.
  gloo_run_options options;
  options.group_timeout = std::chrono::milliseconds(10000);
  options.keep_groups_until_all_done = false;
  std::atomic<bool> destroyed{false};
  std::chrono::duration<double> destroy_took{0};
  run_gloo_ranks(
      2,
      [&](int rank, c10::intrusive_ptr<c10d::ProcessGroup> group) {
        if (rank == 1) {
          while (!destroyed.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
          return;
        }
        throughput_options o;
        o.model = small_text_model();
        o.collective_timeout = std::chrono::milliseconds(300);
        auto plugin = throughput_plugin::create(std::move(o), make_c10d_communicator(std::move(group)));
        const std::vector<std::int64_t> lengths = {100};
        microbatch_event e;
        e.document_lengths = lengths;
        plugin->on_microbatch(e);
        log_event l;
        l.step = 1;
        plugin->on_log(l);
        const auto start = std::chrono::steady_clock::now();
        plugin.reset();
        destroy_took = std::chrono::steady_clock::now() - start;
        destroyed = true;
      },
      options);
  EXPECT_GE(destroy_took.count(), 0.3);  // the flush waited for the collective, bounded by its timeout
  EXPECT_LT(destroy_took.count(), 3.0) << "destroying blocked beyond the collective timeout";
}

TEST(throughput_gloo, a_failed_collective_costs_metrics_not_the_run) {
  // Rank 1 drops its group before the log (a dead peer); the others' collective fails within the Gloo
  // timeout. Nothing is thrown into the "training loop" (the body), the interval is skipped and counted.
  gloo_run_options options;
  options.group_timeout = std::chrono::milliseconds(1000);
  options.keep_groups_until_all_done = false;
  std::vector<rank_result> results(3);
  run_gloo_ranks(
      3,
      [&](int rank, c10::intrusive_ptr<c10d::ProcessGroup> group) {
        auto sink = std::make_shared<capture_sink>();
        throughput_options o;
        o.model = small_text_model();
        o.sinks = {sink};
        o.emit = emit_ranks::all;
        o.collective_timeout = std::chrono::milliseconds(3000);
        auto plugin = throughput_plugin::create(std::move(o), make_c10d_communicator(group));
        if (rank == 1) {
          plugin.reset();
          group.reset();  // the dead peer
          return;
        }
        const std::vector<std::int64_t> lengths = {100};
        microbatch_event e;
        e.document_lengths = lengths;
        plugin->on_microbatch(e);
        EXPECT_NO_THROW(plugin->on_log(log_event{}));
        EXPECT_NO_THROW(plugin->flush());
        results[static_cast<std::size_t>(rank)] = {sink->records, plugin->health()};
      },
      options);
  for (const int r : {0, 2}) {
    EXPECT_TRUE(results[static_cast<std::size_t>(r)].records.empty());
    EXPECT_EQ(results[static_cast<std::size_t>(r)].health.failed_collectives, 1u);
  }
}

// ---- ranks that loaded different settings, and steps that disagree ------------------------------------------

struct logged_rank {
  std::vector<metrics_record> records;
  throughput_health health;
  std::string log;  // what the plugin logged ("<level>|<message>" lines)
};

// `world` Gloo ranks, one thread each, meeting at a barrier before every log (the gradient all-reduce of a real
// job). Log i (1-based, `logs` of them) of rank r runs one micro-batch of 10 i tokens in 1 s (a fake clock)
// and passes step `step_of(r, i)`; `customize` changes rank r's options. Every rank emits; then flush.
std::vector<logged_rank> run_logged_job(
    int world, int logs, const std::function<void(int, throughput_options&)>& customize,
    const std::function<std::int64_t(int, int)>& step_of = [](int, int i) { return std::int64_t{i}; }) {
  std::vector<logged_rank> results(static_cast<std::size_t>(world));
  testing::thread_barrier barrier(world);
  run_gloo_ranks(world, [&](int rank, c10::intrusive_ptr<c10d::ProcessGroup> group) {
    auto sink = std::make_shared<capture_sink>();
    testing::captured_log log;
    auto clock = std::make_shared<double>(0.0);
    throughput_options o;
    o.model = small_text_model();
    o.peak_tflops_per_gpu = 1e-3;
    o.emit = emit_ranks::all;
    o.sinks = {sink};
    o.logger = log.logger;
    o.collective_timeout = std::chrono::milliseconds(5000);
    o.clock_seconds = [clock] { return *clock; };
    if (customize) customize(rank, o);
    auto plugin = throughput_plugin::create(std::move(o), make_c10d_communicator(group));
    for (int i = 1; i <= logs; ++i) {
      const std::vector<std::int64_t> lengths = {10 * std::int64_t{i}};
      microbatch_event e;
      e.document_lengths = lengths;
      e.samples = 1;
      plugin->on_microbatch(e);
      *clock += 1.0;
      barrier.arrive_and_wait();
      log_event l;
      l.step = step_of(rank, i);
      plugin->on_log(l);
    }
    plugin->flush();
    results[static_cast<std::size_t>(rank)] = {sink->records, plugin->health(), log.text()};
  });
  return results;
}

std::vector<std::int64_t> steps_of(const logged_rank& r) {
  std::vector<std::int64_t> out;
  for (const metrics_record& m : r.records) out.push_back(m.step);
  return out;
}

std::size_t count_of(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// Every rank's run of 4 logs (+ flush) reports nothing: 4 intervals, each counted in config_mismatch_intervals
// and skipped_intervals (not as failed collectives: the group works), each record-less. The ranks that emit write
// the warning once, naming `differences`.
void expect_refused_with(
    const std::vector<logged_rank>& results, const std::string& differences,
    const std::function<bool(int)>& emits = [](int) { return true; }) {
  const std::string warning =
      "warning|flopmeter: the ranks loaded different settings, so their rows cannot be summed; no interval is "
      "reported while they differ (every rank must load the same plugin file and model): " +
      differences + "\n";
  for (std::size_t r = 0; r < results.size(); ++r) {
    const logged_rank& x = results[r];
    EXPECT_TRUE(x.records.empty()) << "rank " << r;
    EXPECT_EQ(x.health.config_mismatch_intervals, 4u) << "rank " << r;
    EXPECT_EQ(x.health.skipped_intervals, 4u) << "rank " << r;
    EXPECT_EQ(x.health.failed_collectives, 0u) << "rank " << r;
    EXPECT_EQ(count_of(x.log, warning), emits(static_cast<int>(r)) ? 1u : 0u) << "rank " << r << ":\n" << x.log;
  }
}

TEST(throughput_gloo, a_rank_with_another_model_stops_every_record_and_each_emitting_rank_names_it) {
  // Rank 3 of 4 loads a model named "other" (hidden 16 where the others have 8): its rows count other FLOPs.
  const auto results = run_logged_job(4, 4, [](int rank, throughput_options& o) {
    if (rank == 3) {
      o.model.name = "other";
      o.model.text.hidden_size = 16;
    }
  });
  expect_refused_with(results, "rank 3: model other, the others small");
}

TEST(throughput_gloo, a_rank_with_another_scope_is_refused_and_only_rank_0_warns_by_default) {
  // emit = rank0: every rank refuses the rows, only rank 0 writes the warning. Two ranks, one value each: the
  // lowest rank's value is "the others'".
  const auto results = run_logged_job(2, 4, [](int rank, throughput_options& o) {
    o.emit = emit_ranks::rank0;
    if (rank == 1) o.scope = flop_scope::seed;
  });
  expect_refused_with(results, "rank 1: [model] scope seed, the others scope complete", [](int r) { return r == 0; });
}

TEST(throughput_gloo, ranks_with_another_parallel_layout_or_order_are_refused) {
  const auto tp = run_logged_job(4, 4, [](int rank, throughput_options& o) {
    if (rank == 2) o.parallel.tp = 2;
  });
  expect_refused_with(tp, "rank 2: [parallel] tp 2, the others tp 1");
  // Two ranks each way: the value rank 0 holds is "the others'".
  const auto order = run_logged_job(4, 4, [](int rank, throughput_options& o) {
    if (rank >= 2) o.rank_order = "dp-tp-cp-pp";
  });
  expect_refused_with(order, "ranks 2 and 3: [parallel] order dp-tp-cp-pp, the others order tp-cp-dp-pp");
  // Two settings at once: each is named.
  const auto both = run_logged_job(4, 4, [](int rank, throughput_options& o) {
    if (rank == 1) o.parallel.pp = 2;
    if (rank == 3) o.model.name = "other";
  });
  expect_refused_with(both, "rank 3: model other, the others small; rank 1: [parallel] pp 2, the others pp 1");
}

TEST(throughput_gloo, a_rank_with_another_tpi_multiplier_is_refused) {
  const auto results = run_logged_job(2, 4, [](int rank, throughput_options& o) {
    if (rank == 1) o.tpi_multiplier = 2.5;
  });
  expect_refused_with(results, "rank 1: [logging] tpi_multiplier 2.5, the others tpi_multiplier 1");
}

TEST(throughput_gloo, a_rank_that_recomputes_otherwise_is_refused) {
  // Same model FLOPs on every rank, but rank 1 recomputes every 2nd layer in full: its hardware FLOPs (HFU)
  // differ, so the rows cannot form one HFU. Before the recompute settings were in the fingerprint, this job
  // reported every interval with an HFU that meant nothing.
  const auto results = run_logged_job(2, 4, [](int rank, throughput_options& o) {
    if (rank == 1) {
      o.training.recompute.policy = recompute_policy::full;
      o.training.recompute.every = 2;
    }
  });
  expect_refused_with(results, "rank 1: [training] recompute full every 2, the others recompute none");
}

TEST(throughput_gloo, a_mixed_fleet_may_differ_in_its_peak_and_each_record_uses_the_emitting_ranks_peak) {
  // Rank 1's GPU has twice rank 0's peak: both report every interval, rank 1's MFU half of rank 0's (the same
  // TFLOP/s of the job over a peak twice as large).
  const auto results = run_logged_job(2, 4, [](int rank, throughput_options& o) {
    if (rank == 1) o.peak_tflops_per_gpu = 2e-3;
  });
  ASSERT_EQ(steps_of(results[0]), (std::vector<std::int64_t>{1, 2, 3, 4}));
  ASSERT_EQ(steps_of(results[1]), (std::vector<std::int64_t>{1, 2, 3, 4}));
  for (std::size_t i = 0; i < 4; ++i) {
    const double mfu0 = value(results[0].records[i], "perf/mfu"), mfu1 = value(results[1].records[i], "perf/mfu");
    EXPECT_GT(mfu0, 0) << i;
    EXPECT_DOUBLE_EQ(mfu1, mfu0 / 2) << i;
  }
  EXPECT_EQ(results[0].health.config_mismatch_intervals, 0u);
}

// A single wrong step on rank 2 of 4 at its log 5 (logs 1-12 pass steps 1-12 otherwise). Every record is exact:
// log i's interval runs 10 i tokens per rank in 1 s, 40 i tokens/s over the job.
void expect_wrong_step_costs(std::int64_t wrong_step, const std::vector<std::int64_t>& lost,
                             std::uint64_t out_of_step) {
  const auto results = run_logged_job(
      4, 12, nullptr, [wrong_step](int rank, int i) { return rank == 2 && i == 5 ? wrong_step : std::int64_t{i}; });
  std::vector<std::int64_t> expected;
  for (std::int64_t step = 1; step <= 12; ++step) {
    if (std::find(lost.begin(), lost.end(), step) == lost.end()) expected.push_back(step);
  }
  for (std::size_t r = 0; r < 4; ++r) {
    EXPECT_EQ(steps_of(results[r]), expected) << "rank " << r;
    EXPECT_EQ(results[r].health.out_of_step_intervals, out_of_step) << "rank " << r;
    EXPECT_EQ(results[r].health.skipped_intervals, lost.size()) << "rank " << r;
    for (const metrics_record& m : results[r].records) {
      EXPECT_DOUBLE_EQ(value(m, "perf/tokens_per_second"), 40.0 * static_cast<double>(m.step)) << "rank " << r;
    }
  }
}

TEST(throughput_gloo, a_step_far_ahead_once_costs_three_intervals_then_every_rank_reports_again) {
  // Log 5 of rank 2 says 10^12. Its rows cannot tell it from a rank that skipped logs, so the others, behind,
  // skip one log (6), no more; rank 2 is then one log behind them and skips its log 7; from log 8 on every rank
  // starts the same log's collective. Lost: 5 (discarded), 6 and 7 (discarded on one side, skipped on the
  // other): two out-of-step results on every rank. Before: the others waited for a step beyond 10^12, and
  // nothing was reported again.
  expect_wrong_step_costs(1'000'000'000'000, {5, 6, 7}, 2);
}

TEST(throughput_gloo, a_step_far_behind_repeated_or_going_backwards_costs_its_own_interval_only) {
  // Rank 2's log 5 says -10^12, 4 again, or 2: it is behind the latest log in the rows (step 5), which its next
  // log (step 6) is already beyond. Nobody skips: only interval 5 is discarded.
  expect_wrong_step_costs(-1'000'000'000'000, {5}, 1);
  expect_wrong_step_costs(4, {5}, 1);
  expect_wrong_step_costs(2, {5}, 1);
}

}  // namespace
}  // namespace flopmeter
