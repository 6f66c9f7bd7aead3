// Tests of the throughput plugin's accounting, aggregation and deferral, with N ranks simulated in one
// process over an in-memory group (support/fake_group.h). Real Gloo ranks: test_throughput_gloo.cpp.
#include "flopmeter/throughput.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <vector>

#include "flopmeter/error.h"
#include "accounting/throughput_calls.h"  // internal: compiled into this test (tests/CMakeLists.txt)
#include "support/capture_sink.h"
#include "support/fake_group.h"
#include "support/returns_within.h"
#include "support/small_models.h"

namespace flopmeter {
namespace {

using detail::microbatch_result;
using detail::throughput_calls;
using testing::capture_sink;
using testing::fake_group;

// The small text model (support/small_models.h): dense_per_token 7392, text_attn_pair 192.
using testing::small_doc_flops;
using testing::small_text_model;

// N plugins over one fake group, each with its own settable clock and a capture sink on every rank.
struct simulated_job {
  std::shared_ptr<fake_group> group;
  std::vector<std::shared_ptr<throughput_plugin>> ranks;
  std::vector<std::shared_ptr<capture_sink>> sinks;
  std::vector<double> clock;  // seconds, per rank

  simulated_job(int world, parallel_sizes parallel, double peak_tflops, std::int64_t topk = 3,
                double tpi_multiplier = 1.0, std::int64_t topk_interval_logs = 0)
      : group(std::make_shared<fake_group>(world)), clock(static_cast<std::size_t>(world), 0.0) {
    for (int r = 0; r < world; ++r) {
      throughput_options o;
      o.model = small_text_model();
      o.parallel = parallel;
      if (peak_tflops > 0) o.peak_tflops_per_gpu = peak_tflops;
      o.topk = topk;
      o.tpi_multiplier = tpi_multiplier;
      o.topk_interval_logs = topk_interval_logs;
      o.emit = emit_ranks::all;
      o.collective_timeout = std::chrono::milliseconds(50);
      auto sink = std::make_shared<capture_sink>();
      o.sinks = {sink};
      double* my_clock = &clock[static_cast<std::size_t>(r)];
      o.clock_seconds = [my_clock] { return *my_clock; };
      ranks.push_back(throughput_plugin::create(std::move(o), group->rank(r)));
      sinks.push_back(sink);
    }
  }

  void microbatch(int r, std::vector<std::int64_t> lengths, std::int64_t padding = 0, std::int64_t samples = 1,
                  std::optional<double> loss_sum = std::nullopt, std::optional<std::int64_t> labels = std::nullopt) {
    microbatch_event e;
    e.document_lengths = lengths;
    e.padding_tokens = padding;
    e.samples = samples;
    e.loss_sum = loss_sum;
    e.label_tokens = labels;
    ranks[static_cast<std::size_t>(r)]->on_microbatch(e);
  }

  void log_all(std::int64_t step, std::int64_t peak_memory_bytes = 0) {
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      log_event e;
      e.step = step;
      e.peak_memory_bytes = peak_memory_bytes * static_cast<std::int64_t>(r + 1);
      ranks[r]->on_log(e);
    }
  }
  void flush_all() {
    for (auto& p : ranks) p->flush();
  }
  void advance(double seconds) {
    for (double& c : clock) c += seconds;
  }
};

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// The reference's decomposition case: DP 4 x TP 2 (world 8, Megatron order: rank = tp_rank + 2*dp_rank),
// replicas see 700, 900, 1100 and 1300 real tokens in a 2 s interval.
TEST(throughput, dp4_tp2_sums_each_replica_once_and_its_rows_add_up_to_the_headline) {
  simulated_job job(8, parallel_sizes{2, 1, 1}, /*peak_tflops=*/1e-3, /*topk=*/4);
  const std::int64_t replica_tokens[] = {700, 900, 1100, 1300};
  for (int r = 0; r < 8; ++r) job.microbatch(r, {replica_tokens[r / 2]});
  job.advance(2.0);
  job.log_all(10, /*peak_memory_bytes=*/std::int64_t{1} << 30);  // rank r reports (r+1) GiB
  // Deferred: nothing is emitted at the log that closes the interval.
  for (auto& s : job.sinks) EXPECT_TRUE(s->records.empty());
  job.flush_all();

  for (int r = 0; r < 8; ++r) {
    const capture_sink& s = *job.sinks[static_cast<std::size_t>(r)];
    ASSERT_EQ(s.records.size(), 1u) << "rank " << r;
    EXPECT_EQ(s.records[0].step, 10);
    // tokens/s = dp_sum(real tokens) / t = (700 + 900 + 1100 + 1300) / 2 = 2000; per GPU over all 8 GPUs = 250.
    EXPECT_DOUBLE_EQ(s.value(0, "perf/tokens_per_second"), 2000.0);
    EXPECT_DOUBLE_EQ(s.value(0, "perf/tokens_per_second_per_gpu"), 250.0);
    // TFLOP/s per GPU = dp_sum(batch/tp) * tp / t / world / 1e12 = sum_j F(T_j) / 2 / 8 / 1e12.
    const double total_flops = small_doc_flops(700) + small_doc_flops(900) + small_doc_flops(1100) + small_doc_flops(1300);
    const double tflops = total_flops / 2.0 / 8.0 / 1e12;
    EXPECT_NEAR(s.value(0, "perf/tflops_per_second") / tflops, 1.0, 1e-12);
    EXPECT_NEAR(s.value(0, "perf/mfu") / (tflops / 1e-3 * 100.0), 1.0, 1e-12);
    // Memory is the max over the world: rank 7 reported 8 GiB.
    EXPECT_DOUBLE_EQ(s.value(0, "perf/mem_gib"), 8.0);
    // One micro-batch per rank in 2 s.
    EXPECT_DOUBLE_EQ(s.value(0, "perf/step_time"), 2.0);
    EXPECT_DOUBLE_EQ(s.value(0, "train/tokens_seen"), 4000.0);
    // Each DP group holds one rank of each replica: 4 samples.
    EXPECT_DOUBLE_EQ(s.value(0, "train/num_samples"), 4.0);
    // train/flops_seen: the DP sum of the replicas' model FLOPs, each replica once (not per TP rank):
    // F(T) = 7392 T + 192 T(T+1)/2; F(700) = 52,281,600, F(900) = 84,499,200, F(1100) = 124,396,800,
    // F(1300) = 171,974,400; sum 433,152,000.
    EXPECT_EQ(s.value(0, "train/flops_seen"), 433152000.0);
  }

  // The per-rank rows: replica j's two TP ranks each get T_j / (tp*cp*pp) / t tokens/s: 175, 175, 225, 225,
  // 275, 275, 325, 325. With k = 4 the slow and fast rows cover all 8 ranks; their sum is the headline and
  // their mean the per-GPU figure, exactly.
  const capture_sink& s = *job.sinks[0];
  double tps_sum = 0, tflops_sum = 0, mfu_sum = 0;
  for (int i = 0; i < 4; ++i) {
    for (const char* side : {"slow", "fast"}) {
      auto name = [&](const char* metric) { return std::string("perf_topk/") + metric + "_" + side + "_" + std::to_string(i); };
      tps_sum += s.value(0, name("tps"));
      tflops_sum += s.value(0, name("tflops"));
      mfu_sum += s.value(0, name("mfu"));
    }
  }
  EXPECT_DOUBLE_EQ(tps_sum, 2000.0);
  EXPECT_DOUBLE_EQ(tps_sum / 8, s.value(0, "perf/tokens_per_second_per_gpu"));
  EXPECT_NEAR(tflops_sum / 8 / s.value(0, "perf/tflops_per_second"), 1.0, 1e-14);
  EXPECT_NEAR(mfu_sum / 8 / s.value(0, "perf/mfu"), 1.0, 1e-14);
  // Slowest tps rows are replica 0's ranks (0 and 1, ties by rank), fastest replica 3's (7 then 6).
  EXPECT_DOUBLE_EQ(s.value(0, "perf_topk/tps_slow_0"), 175.0);
  EXPECT_DOUBLE_EQ(s.value(0, "perf_topk/tps_slow_0_rank"), 0.0);
  EXPECT_DOUBLE_EQ(s.value(0, "perf_topk/tps_slow_1_rank"), 1.0);
  EXPECT_DOUBLE_EQ(s.value(0, "perf_topk/tps_fast_0"), 325.0);
  // Memory: the "slow" side is the highest: rank 7 with 8 GiB.
  EXPECT_DOUBLE_EQ(s.value(0, "perf_topk/mem_gib_slow_0"), 8.0);
  EXPECT_DOUBLE_EQ(s.value(0, "perf_topk/mem_gib_slow_0_rank"), 7.0);
}

// train/flops_seen stays the exact integer past 2^53, where a double summed interval by interval rounds. Rank 0
// runs one document of L = 100,000,001 tokens per interval, rank 1 one of L + 2, three intervals (DP 2):
//   F(L)     = 7392 L + 96 L (L+1) = 739,200,007,392 + 960,000,028,800,000,192 = 960,000,768,000,007,584
//   F(L + 2) = 960,000,806,400,023,328 (likewise)
//   total    = 3 x (F(L) + F(L+2)) = 5,760,004,723,200,092,736,
// whose nearest double (spacing 1024 there) is 5,760,004,723,200,093,184. Adding the six interval figures as
// doubles instead gives 5,760,004,723,200,092,160: 1024 off. Both collectives (the per-rank table, and the
// fixed-size reduction of ordinary logs) give the exact figure.
TEST(throughput, flops_seen_is_the_exact_dp_total_past_two_to_the_53) {
  const std::int64_t length = 100000001;
  for (const std::int64_t topk_interval_logs : {std::int64_t{1}, std::int64_t{1000}}) {
    simulated_job job(2, parallel_sizes{}, 0, 3, 1.0, topk_interval_logs);
    for (int step = 1; step <= 3; ++step) {
      job.microbatch(0, {length});
      job.microbatch(1, {length + 2});
      job.advance(1.0);
      job.log_all(step);
    }
    job.flush_all();
    const capture_sink& s = *job.sinks[1];
    ASSERT_EQ(s.records.size(), 3u) << topk_interval_logs;
    EXPECT_EQ(s.value(0, "train/flops_seen"), 1920001574400030912.0) << topk_interval_logs;  // F(L) + F(L+2)
    EXPECT_EQ(s.value(2, "train/flops_seen"), 5760004723200093184.0) << topk_interval_logs;
    EXPECT_NE(s.value(2, "train/flops_seen"), 5760004723200092160.0);
    // Still one figure every record: a running total, whatever the interval's rates.
    EXPECT_EQ(s.value(2, "train/tokens_seen"), 3.0 * (2 * length + 2));
  }
}

TEST(throughput, exactly_one_collective_per_log_and_none_per_microbatch) {
  simulated_job job(4, parallel_sizes{}, 1.0);
  for (int mb = 0; mb < 50; ++mb) {
    for (int r = 0; r < 4; ++r) job.microbatch(r, {100, 28});
  }
  for (int r = 0; r < 4; ++r) EXPECT_EQ(job.group->started(r), 0);
  for (int step = 1; step <= 3; ++step) {
    job.advance(1.0);
    job.log_all(step);
    for (int r = 0; r < 4; ++r) EXPECT_EQ(job.group->started(r), step);
  }
  job.flush_all();
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(job.group->started(r), 3);  // flush waits, it starts nothing
    EXPECT_EQ(job.ranks[static_cast<std::size_t>(r)]->health().collectives_started, 3u);
  }
}

TEST(throughput, metrics_of_each_interval_are_emitted_one_log_later) {
  simulated_job job(2, parallel_sizes{}, 0);
  // Interval 1: 100 tokens per rank in 1 s; interval 2: 300 tokens per rank in 1 s.
  for (int r = 0; r < 2; ++r) job.microbatch(r, {100});
  job.advance(1.0);
  job.log_all(1);
  EXPECT_TRUE(job.sinks[0]->records.empty());
  for (int r = 0; r < 2; ++r) job.microbatch(r, {300});
  job.advance(1.0);
  job.log_all(2);
  ASSERT_EQ(job.sinks[0]->records.size(), 1u);
  EXPECT_EQ(job.sinks[0]->records[0].step, 1);
  EXPECT_DOUBLE_EQ(job.sinks[0]->value(0, "perf/tokens_per_second"), 200.0);  // (100 + 100) / 1 s
  job.flush_all();
  ASSERT_EQ(job.sinks[0]->records.size(), 2u);
  EXPECT_EQ(job.sinks[0]->records[1].step, 2);
  EXPECT_DOUBLE_EQ(job.sinks[0]->value(1, "perf/tokens_per_second"), 600.0);
  EXPECT_DOUBLE_EQ(job.sinks[0]->value(1, "train/tokens_seen"), 800.0);  // cumulative
  // The wait happened after a whole interval: the collective was long complete.
  EXPECT_GE(job.sinks[0]->value(1, "perf/log_wait_ms"), 0.0);
  EXPECT_LT(job.sinks[0]->value(1, "perf/log_wait_ms"), 50.0);
  // No MFU without a peak.
  EXPECT_FALSE(job.sinks[0]->has(0, "perf/mfu"));
  EXPECT_FALSE(job.sinks[0]->has(0, "perf_topk/mfu_slow_0"));
}

TEST(throughput, padding_lowers_efficiency_and_loss_and_step_time_follow_the_counts) {
  simulated_job job(2, parallel_sizes{}, 0, 3, /*tpi_multiplier=*/2.5);
  // Rank 0: two micro-batches of 90 real + 10 padding tokens; rank 1: two of 60 real + 40 padding.
  // Loss: rank 0 sums 45.0 over 180 label tokens, rank 1 30.0 over 120 -> 75 / 300 = 0.25 per token.
  for (int mb = 0; mb < 2; ++mb) {
    job.microbatch(0, {50, 40}, 10, 2, 22.5, 90);
    job.microbatch(1, {60}, 40, 1, 15.0, 60);
  }
  job.advance(4.0);
  job.log_all(1);
  job.flush_all();
  const capture_sink& s = *job.sinks[1];
  ASSERT_EQ(s.records.size(), 1u);
  // Real 180 + 120 = 300 over device tokens 200 + 200 = 400 on all DP ranks.
  EXPECT_DOUBLE_EQ(s.value(0, "train/batch_efficiency"), 0.75);
  EXPECT_DOUBLE_EQ(s.value(0, "perf/tokens_per_second"), 75.0);  // 300 / 4 s
  EXPECT_DOUBLE_EQ(s.value(0, "train/loss"), 0.25);
  EXPECT_DOUBLE_EQ(s.value(0, "train/num_samples"), 6.0);  // 2*2 + 2*1
  // 4 s over 2 micro-batches = 2 s per micro-batch; an optimizer step is 2.5 micro-batches = 5 s.
  EXPECT_DOUBLE_EQ(s.value(0, "perf/step_time"), 2.0);
  EXPECT_DOUBLE_EQ(s.value(0, "perf/optimizer_step_time"), 5.0);
  // FLOPs count padding as dense work: rank 0 per micro-batch 7392*100 + 192*(50*51/2 + 40*41/2)
  // = 739,200 + 192*2,095 = 1,141,440; rank 1: 7392*100 + 192*1,830 = 1,090,560. Two micro-batches each:
  // (2,282,880 + 2,181,120) / 4 s / 2 GPUs / 1e12.
  EXPECT_NEAR(s.value(0, "perf/tflops_per_second") / ((2282880.0 + 2181120.0) / 4.0 / 2.0 / 1e12), 1.0, 1e-12);
}

// perf/tflops_per_second_megatron: each micro-batch billed by the constant at its own row length S. For the
// small model the constant's token-linear part is 7392 per token (= dense_per_token: test_megatron.cpp) and its
// attention part 6 * 2*nh*hd * S/2 per layer = 96 S per token (2 layers: nh*hd = 8): one micro-batch costs
// 7392 S + 96 S^2. Rank 0 runs rows of 100 and 300 tokens: 7392*400 + 96*(100^2 + 300^2) = 2,956,800 + 9,600,000
// = 12,556,800 (one row of 400 would be 18,316,800: the sum of S^2 matters); rank 1 one row of 200:
// 1,478,400 + 3,840,000 = 5,318,400. Over 2 s and 2 GPUs: (12,556,800 + 5,318,400) / 2 / 2 / 1e12 TFLOP/s.
// The records also carry the regime (full training: 0s).
TEST(throughput, the_megatron_figure_bills_each_micro_batch_at_its_own_row_length) {
  simulated_job job(2, parallel_sizes{}, 1e-3);
  job.microbatch(0, {100});
  job.microbatch(0, {200}, 100);
  job.microbatch(1, {150}, 50);
  job.advance(2.0);
  job.log_all(1);
  job.flush_all();
  const capture_sink& s = *job.sinks[0];
  ASSERT_EQ(s.records.size(), 1u);
  const double expected = (12556800.0 + 5318400.0) / 2.0 / 2.0 / 1e12;
  EXPECT_NEAR(s.value(0, "perf/tflops_per_second_megatron") / expected, 1.0, 1e-12);
  EXPECT_NEAR(s.value(0, "perf/mfu_megatron") / (expected / 1e-3 * 100), 1.0, 1e-12);
  EXPECT_EQ(s.value(0, "train/frozen_text"), 0.0);
  EXPECT_EQ(s.value(0, "train/lora_rank"), 0.0);
}

TEST(throughput, rank_skew_rows_use_own_interval_and_still_average_to_headline) {
  simulated_job job(4, parallel_sizes{}, 1e-3, /*topk=*/2);
  for (int r = 0; r < 4; ++r) job.microbatch(r, {1000});
  // Ranks close their interval at 1.0, 1.25, 1.5 and 2.0 s.
  const double intervals[] = {1.0, 1.25, 1.5, 2.0};
  for (int r = 0; r < 4; ++r) job.clock[static_cast<std::size_t>(r)] = intervals[r];
  job.log_all(1);
  job.flush_all();
  const capture_sink& s = *job.sinks[0];
  // Rows: 1000/1 = 1000, 800, 666.67, 500. Headline = their sum 2966.67; per GPU their mean.
  const double expected = 1000.0 + 800.0 + 1000.0 / 1.5 + 500.0;
  EXPECT_DOUBLE_EQ(s.value(0, "perf/tokens_per_second"), expected);
  const double rows = s.value(0, "perf_topk/tps_slow_0") + s.value(0, "perf_topk/tps_slow_1") +
                      s.value(0, "perf_topk/tps_fast_0") + s.value(0, "perf_topk/tps_fast_1");
  EXPECT_DOUBLE_EQ(rows / 4, s.value(0, "perf/tokens_per_second_per_gpu"));
  EXPECT_DOUBLE_EQ(s.value(0, "perf_topk/tps_slow_0"), 500.0);
  EXPECT_DOUBLE_EQ(s.value(0, "perf_topk/tps_slow_0_rank"), 3.0);
  EXPECT_DOUBLE_EQ(s.value(0, "perf_topk/step_time_slow_0"), 2.0);
}

TEST(throughput, layouts_sum_over_the_dp_group_only) {
  // tp2 x pp2 x dp2 (world 8, order tp-cp-dp-pp: rank = tp + 2*(dp + 2*pp)). Every rank of replica d sees the
  // replica's micro-batch; replica 0 has 400 tokens, replica 1 has 600. Interval 1 s.
  simulated_job job(8, parallel_sizes{2, 1, 2}, 0);
  for (int r = 0; r < 8; ++r) job.microbatch(r, {(r / 2) % 2 == 0 ? 400 : 600});
  job.advance(1.0);
  job.log_all(1);
  job.flush_all();
  for (int r = 0; r < 8; ++r) {
    const capture_sink& s = *job.sinks[static_cast<std::size_t>(r)];
    // tokens/s = 400 + 600 = 1000 (not 4x that: TP and PP ranks share micro-batches).
    EXPECT_DOUBLE_EQ(s.value(0, "perf/tokens_per_second"), 1000.0) << "rank " << r;
    EXPECT_DOUBLE_EQ(s.value(0, "perf/tokens_per_second_per_gpu"), 125.0);
    // TFLOP/s per GPU = (F(400) + F(600)) / 1 s / 8 GPUs.
    EXPECT_NEAR(s.value(0, "perf/tflops_per_second") / ((small_doc_flops(400) + small_doc_flops(600)) / 8 / 1e12), 1.0,
                1e-12);
    EXPECT_DOUBLE_EQ(s.value(0, "train/tokens_seen"), 1000.0);
  }
}

TEST(throughput, context_parallel_ranks_share_their_replicas_micro_batch) {
  // cp2 x dp2 (rank = cp + 2*dp): both CP ranks of replica d pass the whole micro-batch.
  simulated_job job(4, parallel_sizes{1, 2, 1}, 0);
  for (int r = 0; r < 4; ++r) job.microbatch(r, {r < 2 ? 300 : 500});
  job.advance(2.0);
  job.log_all(1);
  job.flush_all();
  const capture_sink& s = *job.sinks[3];
  EXPECT_DOUBLE_EQ(s.value(0, "perf/tokens_per_second"), 400.0);  // (300 + 500) / 2 s
  EXPECT_NEAR(s.value(0, "perf/tflops_per_second") / ((small_doc_flops(300) + small_doc_flops(500)) / 2 / 4 / 1e12), 1.0,
              1e-12);
}

TEST(throughput, bad_microbatch_is_counted_not_thrown_and_not_counted_in_metrics) {
  simulated_job job(1, parallel_sizes{}, 0);
  job.microbatch(0, {100});
  job.microbatch(0, {50, -3});  // negative length: rejected whole
  microbatch_event both;
  const std::vector<std::int64_t> lengths = {4}, cu = {0, 4};
  both.document_lengths = lengths;
  both.cu_seqlens = cu;
  job.ranks[0]->on_microbatch(both);  // two descriptions at once
  job.advance(1.0);
  job.log_all(1);
  job.flush_all();
  EXPECT_EQ(job.ranks[0]->health().bad_microbatches, 2u);
  EXPECT_DOUBLE_EQ(job.sinks[0]->value(0, "perf/tokens_per_second"), 100.0);
  // All three micro-batches ran, so step time is 1 s / 3.
  EXPECT_DOUBLE_EQ(job.sinks[0]->value(0, "perf/step_time"), 1.0 / 3);
}

TEST(throughput, failed_collective_costs_one_interval_then_reporting_resumes) {
  simulated_job job(2, parallel_sizes{}, 0);
  job.group->fail_collective(1);  // the second log's collective
  for (int step = 1; step <= 3; ++step) {
    for (int r = 0; r < 2; ++r) job.microbatch(r, {100 * step});
    job.advance(1.0);
    job.log_all(step);
  }
  job.flush_all();
  const capture_sink& s = *job.sinks[0];
  ASSERT_EQ(s.records.size(), 2u);
  EXPECT_EQ(s.records[0].step, 1);
  EXPECT_EQ(s.records[1].step, 3);
  EXPECT_DOUBLE_EQ(s.value(1, "perf/tokens_per_second"), 600.0);
  EXPECT_EQ(job.ranks[0]->health().failed_collectives, 1u);
}

TEST(throughput, stalled_peer_times_out_and_the_loop_carries_on) {
  simulated_job job(2, parallel_sizes{}, 0);
  job.group->stall_rank_from(1, 0);  // rank 1 never joins
  for (int step = 1; step <= 5; ++step) {
    job.microbatch(0, {100});
    job.advance(1.0);
    job.log_all(step);
  }
  job.flush_all();
  EXPECT_TRUE(job.sinks[0]->records.empty());
  const throughput_health h = job.ranks[0]->health();
  // Three timeouts, then the plugin stops issuing collectives instead of blocking every log.
  EXPECT_EQ(h.failed_collectives, 3u);
  EXPECT_EQ(h.collectives_started, 3u);
}

// The warm-up on_log that throughput.h recommends (once before the first micro-batch) closes an interval
// that no rank recorded anything in: its record would be all zeros (0 tok/s, 0% MFU), so no sink gets it and
// no health counter moves. Hand derivation, 2 ranks, peak 1e-3 TFLOP/s (MFU is reported):
//   step 0: warm-up, 5 s of set-up, no micro-batch anywhere -> no record;
//   step 1: 100 tokens per rank in 1 s -> the first record, step 1, (100 + 100) / 1 s = 200 tok/s;
//   step 2: no micro-batch anywhere in 1 s, but 200 tokens were seen before -> emitted as before: 0 tok/s,
//           train/tokens_seen 200.
TEST(throughput, a_warm_up_log_before_any_microbatch_writes_no_record) {
  simulated_job job(2, parallel_sizes{}, /*peak_tflops=*/1e-3);
  job.advance(5.0);
  job.log_all(0);  // warm-up
  for (int r = 0; r < 2; ++r) job.microbatch(r, {100});
  job.advance(1.0);
  job.log_all(1);  // would emit the warm-up's record (step 0) here
  for (const auto& s : job.sinks) EXPECT_TRUE(s->records.empty());
  job.advance(1.0);
  job.log_all(2);   // emits step 1
  job.flush_all();  // emits step 2
  for (int r = 0; r < 2; ++r) {
    const capture_sink& s = *job.sinks[static_cast<std::size_t>(r)];
    ASSERT_EQ(s.records.size(), 2u) << "rank " << r;
    EXPECT_EQ(s.records[0].step, 1);
    EXPECT_DOUBLE_EQ(s.value(0, "perf/tokens_per_second"), 200.0);
    EXPECT_EQ(s.records[1].step, 2);
    EXPECT_DOUBLE_EQ(s.value(1, "perf/tokens_per_second"), 0.0);
    EXPECT_DOUBLE_EQ(s.value(1, "train/tokens_seen"), 200.0);
    const throughput_health h = job.ranks[static_cast<std::size_t>(r)]->health();
    EXPECT_EQ(h.skipped_intervals, 0u);
    EXPECT_EQ(h.failed_collectives, 0u);
    EXPECT_EQ(h.collectives_started, 3u);  // one per log, the warm-up's included
  }
}

// Only when no rank of the world recorded anything: a warm-up log on rank 1 while rank 0 already ran a
// micro-batch (50 tokens in 1 s) is an ordinary interval: (50 + 0) / 1 s = 50 tok/s at step 0.
TEST(throughput, an_interval_with_a_microbatch_on_any_rank_is_no_warm_up) {
  simulated_job job(2, parallel_sizes{}, 0);
  job.microbatch(0, {50});
  job.advance(1.0);
  job.log_all(0);
  job.flush_all();
  for (const auto& s : job.sinks) {
    ASSERT_EQ(s->records.size(), 1u);
    EXPECT_EQ(s->records[0].step, 0);
    EXPECT_DOUBLE_EQ(s->value(0, "perf/tokens_per_second"), 50.0);
  }
}

TEST(throughput, an_interval_of_zero_seconds_is_skipped) {
  simulated_job job(1, parallel_sizes{}, 0);
  job.microbatch(0, {100});
  job.log_all(1);  // the clock did not move: 0 s
  job.microbatch(0, {100});
  job.advance(1.0);
  job.log_all(2);
  job.flush_all();
  ASSERT_EQ(job.sinks[0]->records.size(), 1u);
  EXPECT_EQ(job.sinks[0]->records[0].step, 2);
  EXPECT_EQ(job.ranks[0]->health().skipped_intervals, 1u);
}

TEST(throughput, events_after_flush_are_ignored_and_counted) {
  simulated_job job(1, parallel_sizes{}, 0);
  job.flush_all();
  job.microbatch(0, {100});
  job.log_all(1);
  EXPECT_EQ(job.ranks[0]->health().events_after_flush, 2u);
  EXPECT_TRUE(job.sinks[0]->records.empty());
}

// flush() emits the last interval, then flushes every sink once, after that record; a second flush() does
// nothing. Records that on_log emits are not followed by a flush.
TEST(throughput, flush_flushes_each_sink_once_after_the_last_record) {
  simulated_job job(2, parallel_sizes{}, 0);
  for (int r = 0; r < 2; ++r) job.microbatch(r, {100});
  job.advance(1.0);
  job.log_all(1);
  for (int r = 0; r < 2; ++r) job.microbatch(r, {100});
  job.advance(1.0);
  job.log_all(2);  // emits step 1
  for (const auto& s : job.sinks) {
    EXPECT_EQ(s->records.size(), 1u);
    EXPECT_TRUE(s->flushed_after.empty());
  }
  job.flush_all();  // emits step 2, then flushes
  job.flush_all();
  for (const auto& s : job.sinks) {
    EXPECT_EQ(s->records.size(), 2u);
    EXPECT_EQ(s->flushed_after, std::vector<std::size_t>{2});
  }
}

// Two plugins over one fake group with the default options (emit = rank0), a capture sink each.
struct default_pair {
  std::shared_ptr<fake_group> group = std::make_shared<fake_group>(2);
  std::vector<std::shared_ptr<capture_sink>> sinks;
  std::vector<std::shared_ptr<throughput_plugin>> plugins;

  default_pair() {
    for (int r = 0; r < 2; ++r) {
      throughput_options o;
      o.model = small_text_model();
      auto sink = std::make_shared<capture_sink>();
      o.sinks = {sink};
      sinks.push_back(sink);
      plugins.push_back(throughput_plugin::create(std::move(o), group->rank(r)));
    }
  }
};

// A rank that writes no record (emit = rank0, the default) flushes no sink either.
TEST(throughput, flush_reaches_the_sinks_only_where_records_are_written) {
  default_pair pair;
  auto& sinks = pair.sinks;
  auto& plugins = pair.plugins;
  for (auto& p : plugins) p->flush();
  EXPECT_EQ(sinks[0]->flushed_after, std::vector<std::size_t>{0});
  EXPECT_TRUE(sinks[1]->flushed_after.empty());
}

TEST(throughput, emits_on_rank0_only_by_default) {
  default_pair pair;
  auto& sinks = pair.sinks;
  auto& plugins = pair.plugins;
  // A micro-batch on each rank: an interval without any would be a warm-up, written by no rank.
  const std::vector<std::int64_t> lengths = {10};
  microbatch_event batch;
  batch.document_lengths = lengths;
  for (auto& p : plugins) p->on_microbatch(batch);
  for (auto& p : plugins) p->on_log(log_event{});
  for (auto& p : plugins) p->flush();
  EXPECT_EQ(sinks[0]->records.size(), 1u);
  EXPECT_TRUE(sinks[1]->records.empty());
}

TEST(throughput, create_refuses_bad_options) {
  auto group = std::make_shared<fake_group>(6);
  throughput_options o;
  o.model = small_text_model();
  o.parallel = parallel_sizes{4, 1, 1};  // 4 does not divide 6
  EXPECT_THROW(throughput_plugin::create(o, group->rank(0)), error);
  o.parallel = parallel_sizes{};
  o.peak_tflops_per_gpu = -5;
  EXPECT_THROW(throughput_plugin::create(o, group->rank(0)), error);
  o.peak_tflops_per_gpu = std::nullopt;
  o.tpi_multiplier = 0.5;
  EXPECT_THROW(throughput_plugin::create(o, group->rank(0)), error);
  o.tpi_multiplier = 1;
  EXPECT_THROW(throughput_plugin::create(o, nullptr), error);
}

TEST(throughput, sanity_check_flag_refuses_a_mismatching_model) {
  // dk != dv makes Megatron's delta-rule approximation disagree with the exact model (see test_megatron).
  model_spec hybrid;
  hybrid.name = "hybrid";
  hybrid.model_type = "qwen3_5";
  hybrid.text = small_text_model().text;
  hybrid.text.full_attention_interval = 2;
  hybrid.text.linear_key_head_dim = 4;
  hybrid.text.linear_value_head_dim = 8;
  hybrid.text.linear_num_key_heads = 2;
  hybrid.text.linear_num_value_heads = 2;
  hybrid.text.linear_conv_kernel_dim = 4;
  hybrid.text.attn_output_gate = true;  // every Qwen3.5 has it (validate_model_spec refuses a qwen3_5 without)
  throughput_options o;
  o.model = hybrid;
  o.sanity_check = true;
  EXPECT_THROW(throughput_plugin::create(o, make_local_communicator()), error);
  o.model.text.linear_key_head_dim = 8;  // dk == dv: the derivations agree
  EXPECT_NO_THROW(throughput_plugin::create(o, make_local_communicator()));
}

// Re-entry: a sink runs inside on_log (or flush) while the plugin holds its lock. A sink calling back into the
// same plugin on that thread deadlocked; now health() answers and the hooks are refused and counted.

// A sink that runs `on_write` for each record (after keeping it), on the emitting thread.
class calling_back_sink : public testing::capture_sink {
 public:
  std::function<void()> on_write;

 protected:
  void write_(const metrics_record& record) override {
    capture_sink::write_(record);
    if (on_write) on_write();
  }
};

// One rank (local communicator) whose records go to `sink` and whose clock reads `now`.
std::shared_ptr<throughput_plugin> one_rank_plugin(std::shared_ptr<sink> sink, double* now) {
  throughput_options o;
  o.model = small_text_model();
  o.peak_tflops_per_gpu = 100.0;
  o.sinks = {std::move(sink)};
  o.clock_seconds = [now] { return *now; };
  return throughput_plugin::create(std::move(o), make_local_communicator());
}

log_event step_log(std::int64_t step) {
  log_event e;
  e.step = step;
  return e;
}

microbatch_event documents(const std::vector<std::int64_t>& lengths) {
  microbatch_event e;
  e.document_lengths = lengths;
  e.samples = 1;
  return e;
}

TEST(throughput, a_sink_calling_back_into_its_plugin_is_answered_not_deadlocked) {
  auto sink = std::make_shared<calling_back_sink>();
  double now = 0;
  std::shared_ptr<throughput_plugin> plugin = one_rank_plugin(sink, &now);
  throughput_health seen_first, seen_after;
  microbatch_result recorded = microbatch_result::counted;
  const std::vector<std::int64_t> hundred = {100}, five = {5};
  sink->on_write = [&] {
    if (sink->records.size() != 1) return;  // the first record only
    seen_first = plugin->health();
    EXPECT_TRUE(throughput_calls::in_callout(*plugin));
    plugin->on_microbatch(documents(five));
    recorded = throughput_calls::record_microbatch(*plugin, documents(five));
    log_event again;
    again.step = 102;
    plugin->on_log(again);
    plugin->flush();
    seen_after = plugin->health();
  };
  EXPECT_FALSE(throughput_calls::in_callout(*plugin));
  testing::returns_within(std::chrono::seconds(10), "a sink calling back into its plugin", [&] {
    plugin->on_microbatch(documents(hundred));
    now = 1;
    plugin->on_log(step_log(1));
    plugin->on_microbatch(documents(hundred));
    now = 2;
    plugin->on_log(step_log(2));  // emits step 1: the sink calls back from inside this call
  });
  // Inside on_log(2), after step 1 was derived, before log 2's collective: one collective (log 1's).
  EXPECT_EQ(seen_first.collectives_started, 1u);
  EXPECT_EQ(seen_first.reentrant_calls, 0u);
  // Then four refused hooks: on_microbatch, record_microbatch, on_log, flush.
  EXPECT_EQ(recorded, microbatch_result::reentrant);
  EXPECT_EQ(seen_after.reentrant_calls, 4u);
  EXPECT_EQ(seen_after.collectives_started, 1u);  // the refused on_log started none
  EXPECT_EQ(seen_after.bad_microbatches, 0u);     // refused, not bad
  // The refused flush did not flush: a micro-batch now is counted, and the real flush emits step 2.
  EXPECT_EQ(throughput_calls::record_microbatch(*plugin, documents(five)), microbatch_result::counted);
  plugin->flush();
  ASSERT_EQ(sink->records.size(), 2u);
  EXPECT_EQ(sink->records[1].step, 2);
  // Step 2's interval holds one 100-token batch (the refused 5-token ones are in no interval; the counted one
  // after log 2 is in interval 3, never emitted): tokens seen 100 + 100.
  EXPECT_DOUBLE_EQ(sink->value(0, "train/tokens_seen"), 100.0);
  EXPECT_DOUBLE_EQ(sink->value(1, "train/tokens_seen"), 200.0);
  EXPECT_DOUBLE_EQ(sink->value(0, "health/reentrant_calls"), 0.0);  // appended before the sink ran
  EXPECT_DOUBLE_EQ(sink->value(1, "health/reentrant_calls"), 4.0);
  EXPECT_EQ(plugin->health().reentrant_calls, 4u);
}

// The same through the clock, another of the plugin's call-outs (read inside on_log under its lock): a clock
// that calls the plugin is refused the same way. Calls from another thread still wait for the lock as usual.
TEST(throughput, a_clock_calling_back_into_its_plugin_is_refused) {
  auto sink = std::make_shared<testing::capture_sink>();
  std::shared_ptr<throughput_plugin> plugin;
  double now = 0;
  int reads = 0;
  throughput_options o;
  o.model = small_text_model();
  o.sinks = {sink};
  o.clock_seconds = [&] {
    if (plugin && ++reads == 1) plugin->on_log(step_log(99));  // inside on_log(1)
    return now;
  };
  plugin = throughput_plugin::create(std::move(o), make_local_communicator());
  testing::returns_within(std::chrono::seconds(10), "a clock calling back into its plugin", [&] {
    plugin->on_microbatch(documents({100}));
    now = 1;
    plugin->on_log(step_log(1));
    now = 2;
    plugin->on_log(step_log(2));
  });
  EXPECT_EQ(plugin->health().reentrant_calls, 1u);
  EXPECT_EQ(plugin->health().collectives_started, 2u);  // logs 1 and 2, not the refused 99
  plugin->flush();
  ASSERT_EQ(sink->records.size(), 2u);
  EXPECT_EQ(sink->records[0].step, 1);
  EXPECT_EQ(sink->records[1].step, 2);
}

TEST(accumulation_schedule, a_fractional_multiplier_spreads_its_micro_batches_over_whole_steps) {
  EXPECT_EQ(accumulation_schedule(1.5), (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(accumulation_schedule(2.25), (std::vector<std::int64_t>{2, 2, 2, 3}));
  EXPECT_EQ(accumulation_schedule(3.0), (std::vector<std::int64_t>{3}));
  EXPECT_EQ(accumulation_schedule(1.0), (std::vector<std::int64_t>{1}));
  // 1.1 = 11/10: ten entries summing to 11; floor(i*1.1) steps by 2 once, at i = 9 -> 10.
  const std::vector<std::int64_t> s = accumulation_schedule(1.1);
  ASSERT_EQ(s.size(), 10u);
  EXPECT_EQ(std::accumulate(s.begin(), s.end(), std::int64_t{0}), 11);
  EXPECT_EQ(s.back(), 2);
  EXPECT_THROW(accumulation_schedule(0.99), error);
  EXPECT_THROW(accumulation_schedule(std::nan("")), error);
  EXPECT_THROW(accumulation_schedule(std::numeric_limits<double>::infinity()), error);
}

}  // namespace
}  // namespace flopmeter
