// The throughput plugin over real Gloo process groups (ranks as threads over a HashStore, tests/gloo_harness.h):
// the layouts dp4, dp2 x tp2, tp2 x pp2, dp2 x cp2, uneven tokens per replica, padding, and a rank whose
// collective fails. Expected values are derived by hand in each test.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <memory>
#include <vector>

#include "flopmeter/c10d.h"
#include "flopmeter/throughput.h"
#include "gloo_harness.h"
#include "support/capture_sink.h"
#include "support/small_models.h"

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

TEST(throughput_gloo, dp4_uneven_tokens) {
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

TEST(throughput_gloo, dp2_tp2) {
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

TEST(throughput_gloo, tp2_pp2) {
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

TEST(throughput_gloo, dp2_cp2_with_padding) {
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
  // forward_backward_time, so perf_topk/forward_backward_time_slow_0_rank names rank 2 at every log, and
  // the headline perf/forward_backward_time (the world maximum) is rank 2's.
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
      EXPECT_EQ(value(m, "perf_topk/forward_backward_time_slow_0_rank"), 2.0) << "rank " << r << " step " << m.step;
      EXPECT_GE(value(m, "perf_topk/forward_backward_time_slow_0"), 0.150);
      EXPECT_NE(value(m, "perf_topk/forward_backward_time_fast_0_rank"), 2.0);
      EXPECT_LT(value(m, "perf_topk/forward_backward_time_fast_0"), value(m, "perf_topk/forward_backward_time_slow_0"));
      EXPECT_EQ(value(m, "perf/forward_backward_time"), value(m, "perf_topk/forward_backward_time_slow_0"));
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

}  // namespace
}  // namespace flopmeter
