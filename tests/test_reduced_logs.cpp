// Ordinary logs run a SUM and a MAX all-reduce of a fixed size (accounting/log_reduction.h) and gather the
// per-rank table only every topk_interval_logs logs. The same job, run once with the table at every log
// (topk_interval_logs = 1: what every other test runs) and once with the table every third log, must emit
// the same records: every figure equal bit for bit, perf_topk/* only on the table logs. In-process ranks
// (support/fake_group.h) with a clock per rank, so every interval is exact.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "flopmeter/communicator.h"
#include "flopmeter/throughput.h"
#include "accounting/log_reduction.h"
#include "support/capture_sink.h"
#include "support/captured_log.h"
#include "support/fake_group.h"
#include "support/small_models.h"

namespace flopmeter {
namespace {

using namespace std::chrono_literals;
using testing::capture_sink;
using testing::fake_group;

// Records which collectives a rank starts, and their sizes.
class recording final : public communicator {
 public:
  explicit recording(std::shared_ptr<communicator> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  std::string backend_name() const override { return "recording"; }
  std::unique_ptr<pending_collective> start_allreduce_sum(double* values, std::size_t count) override {
    return inner_->start_allreduce_sum(values, count);
  }
  std::unique_ptr<pending_collective> start_allgather(const double* send, std::size_t count, double* recv) override {
    calls.push_back("gather " + std::to_string(count));
    return communicator::start_allgather(send, count, recv);
  }
  std::unique_ptr<pending_collective> start_allreduce_sum_max(double* values, std::size_t sums,
                                                              std::size_t maxima) override {
    calls.push_back("sum " + std::to_string(sums) + " max " + std::to_string(maxima));
    // The base class: the SUM through start_allreduce_sum, the MAX over a gather (the fake group only sums).
    const std::size_t before = calls.size();
    auto pending = communicator::start_allreduce_sum_max(values, sums, maxima);
    calls.resize(before);  // the MAX's own gather is part of this call, not a table
    return pending;
  }
  std::vector<std::string> calls;

 private:
  std::shared_ptr<communicator> inner_;
};

struct job {
  std::shared_ptr<fake_group> group;
  std::vector<std::shared_ptr<throughput_plugin>> ranks;
  std::vector<std::shared_ptr<capture_sink>> sinks;
  std::vector<std::shared_ptr<recording>> comms;
  std::vector<double> clock;

  job(int world, std::int64_t topk_interval_logs, const std::function<void(int, throughput_options&)>& customize = {})
      : group(std::make_shared<fake_group>(world)), clock(static_cast<std::size_t>(world), 0.0) {
    for (int r = 0; r < world; ++r) {
      throughput_options o;
      o.model = testing::small_vlm();
      o.parallel.tp = 2;
      o.emit = emit_ranks::all;
      o.topk = 2;
      o.topk_interval_logs = topk_interval_logs;
      o.peak_tflops_per_gpu = 1.0;
      o.collective_timeout = 2000ms;
      auto sink = std::make_shared<capture_sink>();
      o.sinks = {sink};
      double* my_clock = &clock[static_cast<std::size_t>(r)];
      o.clock_seconds = [my_clock] { return *my_clock; };
      if (customize) customize(r, o);
      comms.push_back(std::make_shared<recording>(group->rank(r)));
      ranks.push_back(throughput_plugin::create(std::move(o), comms.back()));
      sinks.push_back(sink);
    }
  }

  // Interval `step`: rank r runs 1 + (r/2 + step) % 3 micro-batches of 100 (r/2 + 1) + 7 step tokens (each tp
  // pair the same replica's), 1 + r/10 s, with peak memory and loss; rank `skipping` skips this on_log.
  void interval(std::int64_t step, int skipping = -1) {
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      clock[r] += 1.0 + static_cast<double>(r) / 10.0;
      const std::int64_t tokens = 100 * (static_cast<std::int64_t>(r) / 2 + 1) + 7 * step;
      for (std::int64_t b = 0; b < 1 + (static_cast<std::int64_t>(r) / 2 + step) % 3; ++b) {
        microbatch_event e;
        const std::vector<std::int64_t> lengths = {tokens, 3};
        e.document_lengths = lengths;
        e.samples = 2;
        e.loss_sum = 0.5 * static_cast<double>(tokens);
        e.label_tokens = tokens;
        ranks[r]->on_microbatch(e);
      }
      if (static_cast<int>(r) == skipping) continue;
      log_event l;
      l.step = step;
      l.peak_memory_bytes = std::int64_t{1} << (20 + r);
      l.data_time = std::chrono::duration<double>(0.01 * static_cast<double>(r));
      ranks[r]->on_log(l);
    }
  }
  void flush_all() {
    for (auto& p : ranks) p->flush();
  }
};

bool local(const std::string& name) {
  // Each rank's own wait and emission times, and the ranks' waits in the table: measured, not derived.
  return name == "perf/log_wait_ms" || name == "perf/log_emit_ms" || name.rfind("perf_topk/log_wait_ms", 0) == 0;
}

TEST(reduced_logs, ordinary_logs_carry_every_figure_of_the_table_but_perf_topk) {
  constexpr int kWorld = 6;  // tp 2, dp 3
  job table(kWorld, 1), reduced(kWorld, 3);
  for (std::int64_t step = 1; step <= 8; ++step) {
    table.interval(step);
    reduced.interval(step);
  }
  table.flush_all();
  reduced.flush_all();
  for (int r = 0; r < kWorld; ++r) {
    const auto& a = table.sinks[static_cast<std::size_t>(r)]->records;
    const auto& b = reduced.sinks[static_cast<std::size_t>(r)]->records;
    ASSERT_EQ(a.size(), 8u) << "rank " << r;
    ASSERT_EQ(b.size(), a.size()) << "rank " << r;
    for (std::size_t i = 0; i < a.size(); ++i) {
      // Log i + 1 gathers the table when its sequence number is a multiple of 3.
      const bool table_log = (i + 1) % 3 == 0;
      std::vector<std::pair<std::string, double>> expected;
      for (const auto& [name, value] : a[i].values) {
        if (!local(name) && (table_log || name.rfind("perf_topk/", 0) != 0)) expected.emplace_back(name, value);
      }
      std::vector<std::pair<std::string, double>> got;
      for (const auto& [name, value] : b[i].values) {
        if (!local(name)) got.emplace_back(name, value);
      }
      EXPECT_EQ(got, expected) << "rank " << r << ", log " << i + 1;
      EXPECT_EQ(a[i].step, b[i].step);
    }
  }
  // What each rank started: the table at logs 3 and 6, the fixed-size pair at the others (and the flush
  // waits for log 8's). Sizes do not depend on the world.
  const std::string pair = "sum " + std::to_string(detail::kSumFields) + " max " + std::to_string(detail::kMaxFields);
  const std::string gather = "gather " + std::to_string(detail::kRowFields);
  const std::vector<std::string> expected_calls = {pair, pair, gather, pair, pair, gather, pair, pair};
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(reduced.comms[static_cast<std::size_t>(r)]->calls, expected_calls);
  std::vector<std::string> every_log(8, gather);
  EXPECT_EQ(table.comms[0]->calls, every_log);
}

TEST(reduced_logs, a_rank_that_skips_an_on_log_costs_what_it_costs_with_the_table) {
  // Rank 1 skips the on_log of step 4. Both jobs lose the same intervals and count the same health figures
  // (the reduction's step and sequence ranges stand in for the rows).
  constexpr int kWorld = 4;
  // One thread drives every rank: a collective a rank has not joined yet times out (20 ms) instead of waiting.
  const auto short_timeout = [](int, throughput_options& o) { o.collective_timeout = 20ms; };
  job table(kWorld, 1, short_timeout), reduced(kWorld, 1000, short_timeout);
  for (std::int64_t step = 1; step <= 9; ++step) {
    table.interval(step, step == 4 ? 1 : -1);
    reduced.interval(step, step == 4 ? 1 : -1);
  }
  table.flush_all();
  reduced.flush_all();
  for (int r = 0; r < kWorld; ++r) {
    std::vector<std::int64_t> a, b;
    for (const auto& rec : table.sinks[static_cast<std::size_t>(r)]->records) a.push_back(rec.step);
    for (const auto& rec : reduced.sinks[static_cast<std::size_t>(r)]->records) b.push_back(rec.step);
    EXPECT_EQ(a, b) << "rank " << r;
    EXPECT_LT(a.size(), 9u);  // something was lost
    const throughput_health ha = table.ranks[static_cast<std::size_t>(r)]->health();
    const throughput_health hb = reduced.ranks[static_cast<std::size_t>(r)]->health();
    EXPECT_EQ(ha.failed_collectives, hb.failed_collectives) << "rank " << r;
    EXPECT_EQ(ha.out_of_step_intervals, hb.out_of_step_intervals) << "rank " << r;
    EXPECT_EQ(ha.skipped_intervals, hb.skipped_intervals) << "rank " << r;
  }
}

TEST(reduced_logs, ranks_with_different_settings_are_named_by_the_table_the_next_log_gathers) {
  // Rank 2 loads another tpi_multiplier. The first log's reduction shows the fingerprint's range; that
  // interval is skipped and the next log gathers the table, whose rows name rank 2 as the table job does.
  testing::captured_log log;
  const auto customize = [&](int r, throughput_options& o) {
    if (r == 2) o.tpi_multiplier = 4;
    o.logger = log.logger;
  };
  job reduced(4, 1000, customize);
  for (std::int64_t step = 1; step <= 4; ++step) reduced.interval(step);
  reduced.flush_all();
  EXPECT_NE(log.text().find("rank 2: [logging] tpi_multiplier 4, the others tpi_multiplier 1"), std::string::npos)
      << log.text();
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(reduced.sinks[static_cast<std::size_t>(r)]->records.empty());
    EXPECT_EQ(reduced.ranks[static_cast<std::size_t>(r)]->health().config_mismatch_intervals, 4u);
    const std::string pair = "sum " + std::to_string(detail::kSumFields) + " max " + std::to_string(detail::kMaxFields);
    const std::vector<std::string> calls = {pair, "gather " + std::to_string(detail::kRowFields), pair, pair};
    EXPECT_EQ(reduced.comms[static_cast<std::size_t>(r)]->calls, calls);
  }
}

}  // namespace
}  // namespace flopmeter
