// Numeric range through the throughput plugin: a 1M-token row, 100k documents in one micro-batch, a
// 100k-patch item, and 16,384 ranks in the aggregation, with the types of METRICS.md "Numeric types":
// counts are int64 and exact; they travel in the collective's row as doubles, exact up to 2^53 per rank
// and interval; DP sums of them stay exact below 2^53; FLOPs are coefficient x count rounded once per term.
//
// 16,384 plugin instances would be slow, so one rank runs over a communicator that fabricates the other
// 16,383 rows: each is a copy of this rank's row, so every expected value below is this rank's figure
// times a known factor.
#include <gtest/gtest.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/sinks/ostream_sink.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "flopmeter/model_config.h"
#include "flopmeter/throughput.h"
#include "support/capture_sink.h"
#include "support/clocked_plugin.h"
#include "support/fixed_rank.h"

namespace flopmeter {
namespace {

using testing::capture_sink;

__extension__ typedef __int128 int128;

class done_collective final : public pending_collective {
 public:
  collective_status wait(std::chrono::milliseconds) override { return collective_status::done; }
  std::string error_message() const override { return {}; }
};

// Rank `rank` of `world`: the all-reduce copies this rank's row into every other rank's row (the rows are
// world_size equal slices of the buffer), as if every rank had run exactly the same interval.
class fabricated_world final : public testing::fixed_rank_communicator {
 public:
  using fixed_rank_communicator::fixed_rank_communicator;
  std::string backend_name() const override { return "fabricated"; }
  std::unique_ptr<pending_collective> start_allreduce_sum(double* values, std::size_t count) override {
    ++collectives;
    const std::size_t fields = count / static_cast<std::size_t>(world_);
    const double* own = values + static_cast<std::size_t>(rank_) * fields;
    for (int r = 0; r < world_; ++r) {
      if (r != rank_) std::memcpy(values + static_cast<std::size_t>(r) * fields, own, fields * sizeof(double));
    }
    return std::make_unique<done_collective>();
  }
  int collectives = 0;
};

model_spec shipped(const std::string& name) {
  return load_model_spec(std::string(FLOPMETER_SOURCE_DIR) + "/model_configs/" + name + ".toml");
}

TEST(numeric_range, sixteen_thousand_ranks_with_million_token_rows_hundred_thousand_documents_and_patches) {
  // World 16,384 = tp 8 x cp 2 x pp 4 x dp 256, qwen3_vl_2b, one 2 s interval on rank 5000 (any rank: all
  // rows are equal) with three micro-batches:
  //   A: one document of 1,000,000 tokens + 48,576 padding (a 2^20-token row): 500,000,500,000 pairs;
  //   B: 100,000 documents of 10 tokens: 100,000 x 55 = 5,500,000 pairs;
  //   C: one 1 x 250 x 400 item (100,000 patches): 25,000 merged tokens, (250*400)^2 = 1e10 pairs.
  constexpr int kWorld = 16384;
  auto comm = std::make_shared<fabricated_world>(5000, kWorld);
  throughput_options o;
  o.model = shipped("qwen3_vl_2b");
  o.parallel = parallel_sizes{8, 2, 4};
  // Above the 2,878 TFLOP/s per GPU these rows give (derived below): an MFU above 100% is not reported.
  o.peak_tflops_per_gpu = 4000.0;
  o.topk = 3;
  // The table at this log (by default a job of 16,384 ranks reduces a fixed size at most logs): the
  // communicator above fabricates the other ranks' rows, which only the table carries.
  o.topk_interval_logs = 1;
  o.emit = emit_ranks::all;
  testing::clocked_plugin run(o, comm);
  auto& [sink, now, plugin] = run;

  const std::vector<std::int64_t> row = {1000000};
  const std::vector<std::int64_t> many(100000, 10);
  const std::vector<image_grid> item = {{1, 250, 400}};
  microbatch_event a, b, c;
  a.document_lengths = row;
  a.padding_tokens = 48576;
  a.samples = 1;
  b.document_lengths = many;
  b.samples = 100000;
  c.grid_thw = item;
  c.samples = 1;
  for (const microbatch_event* e : {&a, &b, &c}) plugin->on_microbatch(*e);
  now = 2.0;
  log_event l;
  l.step = 1;
  l.peak_memory_bytes = std::int64_t{80} << 30;
  plugin->on_log(l);
  plugin->flush();
  EXPECT_EQ(plugin->health().bad_microbatches, 0u);
  EXPECT_EQ(comm->collectives, 1);
  ASSERT_EQ(sink->records.size(), 1u);

  // The rank's exact counts (int64).
  const std::int64_t real = 2000000, device = 2048576, pairs = 500000500000 + 5500000;
  const std::int64_t patches = 100000, merged = 25000, vision_pairs = 10000000000;
  // Every DP sum is 256 x an integer below 2^53 / 256: exact in double.
  EXPECT_EQ(sink->value(0, "train/tokens_seen"), 256.0 * real);            // 512,000,000
  EXPECT_EQ(sink->value(0, "train/num_samples"), 256.0 * 100002);          // 25,600,512
  EXPECT_EQ(sink->value(0, "perf/tokens_per_second"), 256000000.0);        // 512,000,000 / 2 s
  EXPECT_EQ(sink->value(0, "perf/tokens_per_second_per_gpu"), 15625.0);    // / 16,384 GPUs
  EXPECT_DOUBLE_EQ(sink->value(0, "train/batch_efficiency"), static_cast<double>(real) / device);
  EXPECT_EQ(sink->value(0, "perf/mem_gib"), 80.0);
  // Per-GPU figures are means of 16,384 per-rank doubles summed in order: within 16,384 roundings (2e-12).
  EXPECT_NEAR(sink->value(0, "perf/step_time") / (2.0 / 3), 1.0, 2e-12);

  // FLOPs of the rank's batches, term by term in 128-bit integers (the coefficients are derived by hand in
  // test_flop_model.cpp): dense x device tokens + pair x pairs + ViT per patch + ViT pair x per-frame pairs
  // + patch embedding x patches + mergers x merged tokens = 368,361,019,992,440,832 (3.7e17): above 2^53, so
  // the plugin's figure (each term rounded once to double, then summed) is within a few roundings of it.
  const int128 flops = int128{10322706432} * device + int128{688128} * pairs + int128{1811939328} * patches +
                       int128{294912} * vision_pairs + int128{6291456} * patches + int128{603979776} * merged;
  EXPECT_TRUE(flops == int128{368361019992440832});
  // Per GPU: each rank does its TP share (1/8) split over cp*pp = 8, in 2 s; all ranks are equal.
  const double tflops = static_cast<double>(flops) / 8 / 8 / 2.0 / 1e12;
  EXPECT_NEAR(sink->value(0, "perf/tflops_per_second") / tflops, 1.0, 2e-12);
  EXPECT_NEAR(sink->value(0, "perf/mfu") / (tflops / 4000.0 * 100), 1.0, 2e-12);
  // The top-k rows: all equal, ties go to the lowest rank on the slow side and the highest on the fast.
  EXPECT_EQ(sink->value(0, "perf_topk/tps_slow_0_rank"), 0.0);
  EXPECT_EQ(sink->value(0, "perf_topk/tps_fast_0_rank"), 16383.0);
  EXPECT_EQ(sink->value(0, "perf_topk/tps_slow_0"), 15625.0);
  for (const auto& [name, value] : sink->records[0].values) EXPECT_TRUE(std::isfinite(value)) << name;
}

TEST(numeric_range, counts_beyond_two_to_the_53_in_one_interval_skip_it_rather_than_round) {
  // A document of 2^27 = 134,217,728 tokens has 2^27 (2^27 + 1) / 2 = 2^53 + 2^26 causal pairs: an exact
  // int64, but not a double. The interval holding it is skipped with a warning (the row cannot carry it
  // exactly); the next interval reports again.
  std::ostringstream warnings;
  throughput_options o;
  o.model = shipped("qwen3_vl_2b");
  o.logger = std::make_shared<spdlog::logger>("range", std::make_shared<spdlog::sinks::ostream_sink_mt>(warnings));
  testing::clocked_plugin run(o, make_local_communicator());
  auto& [sink, now, plugin] = run;
  const std::vector<std::int64_t> huge = {std::int64_t{1} << 27}, small = {1000};
  microbatch_event e;
  e.document_lengths = huge;
  plugin->on_microbatch(e);
  now = 1;
  log_event l;
  l.step = 1;
  plugin->on_log(l);
  e.document_lengths = small;
  plugin->on_microbatch(e);
  now = 2;
  l.step = 2;
  plugin->on_log(l);
  plugin->flush();
  ASSERT_EQ(sink->records.size(), 1u);
  EXPECT_EQ(sink->records[0].step, 2);
  EXPECT_EQ(sink->value(0, "perf/tokens_per_second"), 1000.0);
  EXPECT_EQ(plugin->health().skipped_intervals, 1u);
  EXPECT_EQ(plugin->health().bad_microbatches, 0u);  // the batch was valid; only its interval is not reportable
  EXPECT_NE(warnings.str().find("metrics of step 1 skipped: rank 0 reported a count of "), std::string::npos)
      << warnings.str();
  EXPECT_NE(warnings.str().find("beyond the 2^53 a row carries exactly"), std::string::npos)
      << warnings.str();
}

TEST(numeric_range, the_largest_exact_count_is_two_to_the_53_minus_one) {
  // Padding tokens are the easiest count to set exactly: 2^53 - 1 is reported to the token (the row holds
  // it exactly; batch efficiency 0 with no real tokens); 2^53 is not, since 2^53 + 1 would read the same.
  for (const std::int64_t padding : {(std::int64_t{1} << 53) - 1, std::int64_t{1} << 53}) {
    throughput_options o;
    o.model = shipped("qwen3_vl_2b");
    o.logger = std::make_shared<spdlog::logger>("range", std::make_shared<spdlog::sinks::null_sink_mt>());
    testing::clocked_plugin run(o, make_local_communicator());
    auto& [sink, now, plugin] = run;
    microbatch_event e;
    e.padding_tokens = padding;
    plugin->on_microbatch(e);
    now = 1;
    plugin->on_log(log_event{});
    plugin->flush();
    if (padding < (std::int64_t{1} << 53)) {
      ASSERT_EQ(sink->records.size(), 1u);
      EXPECT_EQ(sink->value(0, "train/batch_efficiency"), 0.0);
      // text dense FLOPs = 10,322,706,432 x (2^53 - 1), one rounding: within 2^-53 relative.
      EXPECT_NEAR(sink->value(0, "perf/tflops_per_second") / (10322706432.0 * 9007199254740991.0 / 1e12), 1.0, 2e-16);
    } else {
      EXPECT_TRUE(sink->records.empty());
      EXPECT_EQ(plugin->health().skipped_intervals, 1u);
    }
  }
}

}  // namespace
}  // namespace flopmeter
