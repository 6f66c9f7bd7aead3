// Metric derivation on its own (plugin/accounting/derive.h): hand-built rows and a context in, one metrics
// record out. No plugin, no communicator, no clock. Expected values are derived by hand in each test.
#include "accounting/derive.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "flopmeter/error.h"
#include "flopmeter/megatron.h"
#include "flopmeter/metric_names.h"
#include "accounting/flops_seen.h"
#include "accounting/row_layout.h"
#include "count/count_fields.h"
#include "support/small_models.h"

namespace flopmeter::detail {
namespace {

namespace m = metric;
using testing::small_doc_flops;
using testing::small_text_model;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// One rank's row: `tokens` real tokens in one document (L(L+1)/2 causal pairs), `microbatches` micro-batches,
// an interval of `seconds`.
struct row_spec {
  std::int64_t tokens = 0;
  std::int64_t padding = 0;
  double seconds = 1;
  double microbatches = 1;
  double samples = 1;
  double loss_sum = 0;
  double label_tokens = 0;
  // The trainer's figures; unset: not reported (kNotReported in the row).
  std::optional<double> mem_bytes;
  std::optional<double> data_seconds;
  std::optional<double> forward_backward_seconds;
  double log_wait_ms = 0;
  std::optional<double> reserved_bytes;     // unset: not reported
  std::optional<double> label_tokens_seen;  // unset: this interval's label tokens (a first log)
  // The rank's running totals since it started; unset: this interval's tokens and samples (a first log).
  std::optional<double> tokens_seen, samples_seen;
  std::array<double, 3> flops_seen_limbs = {0, 0, 0};  // the running FLOPs' 32-bit limbs (flops_seen.h)
};

std::vector<double> rows_of(const std::vector<row_spec>& specs) {
  std::vector<double> rows(specs.size() * kRowFields, 0.0);
  for (std::size_t r = 0; r < specs.size(); ++r) {
    const row_spec& s = specs[r];
    double* x = rows.data() + r * kRowFields;
    batch_counts n;
    n.real_tokens = s.tokens;
    n.padding_tokens = s.padding;
    n.documents = s.tokens > 0 ? 1 : 0;
    n.causal_pairs = s.tokens * (s.tokens + 1) / 2;
    counts_to_row(n, x);
    x[row_loss_sum] = s.loss_sum;
    x[row_label_tokens] = s.label_tokens;
    x[row_microbatches] = s.microbatches;
    x[row_interval_seconds] = s.seconds;
    x[row_peak_memory_bytes] = s.mem_bytes.value_or(kNotReported);
    x[row_data_seconds] = s.data_seconds.value_or(kNotReported);
    x[row_forward_backward_seconds] = s.forward_backward_seconds.value_or(kNotReported);
    x[row_present] = 1;
    x[row_step] = 7;
    x[row_log_wait_ms] = s.log_wait_ms;
    x[row_tokens_seen] = s.tokens_seen.value_or(static_cast<double>(s.tokens));
    x[row_samples_seen] = s.samples_seen.value_or(s.samples);
    x[row_label_tokens_seen] = s.label_tokens_seen.value_or(s.label_tokens);
    x[row_peak_reserved_memory_bytes] = s.reserved_bytes.value_or(kNotReported);
    for (std::size_t i = 0; i < 3; ++i) x[row_flops_seen_0 + i] = s.flops_seen_limbs[i];
  }
  return rows;
}

derive_setup setup_for(std::int64_t world, std::int64_t tp = 1, std::optional<double> peak = std::nullopt,
                       std::int64_t topk = 3) {
  derive_setup s;
  s.flop_coefficients = compute_coefficients(small_text_model());
  s.tp = tp;
  // dp groups in tp-major order: rank = tp_rank + tp * dp_rank; this rank is rank 0, its group every tp-th.
  for (std::int64_t r = 0; r < world; r += tp) s.dp_group.push_back(r);
  s.peak_tflops_per_gpu = peak;
  s.topk = topk;
  return s;
}

// metrics_record::find without linking the sinks (which live in the library with spdlog).
const double* find(const metrics_record& record, const std::string& name) {
  for (const auto& entry : record.values) {
    if (entry.first == name) return &entry.second;
  }
  return nullptr;
}

double value(const metrics_record& record, const std::string& name) {
  const double* v = find(record, name);
  return v == nullptr ? std::numeric_limits<double>::quiet_NaN() : *v;
}

std::string topk(const char* base, m::topk_side side, std::size_t i, bool rank = false) {
  return m::topk_name(base, side, i, rank);
}
constexpr auto kSlow = m::topk_side::slow;
constexpr auto kFast = m::topk_side::fast;

TEST(derive, dp4_headline_is_the_sum_of_rows_and_totals_accumulate) {
  // Four DP ranks, rank r runs 100(r+1) tokens in 2 s: rows 50, 100, 150, 200 tokens/s; headline 500,
  // per GPU 125. FLOPs F(100)+F(200)+F(300)+F(400) over 2 s and 4 GPUs. Peak 1e-3 TFLOP/s.
  std::vector<row_spec> specs(4);
  for (int r = 0; r < 4; ++r) {
    specs[r].tokens = 100 * (r + 1);
    specs[r].seconds = 2;
    specs[r].samples = r + 1;
    specs[r].loss_sum = 10.0 * (r + 1);
    specs[r].label_tokens = 100.0 * (r + 1);
    specs[r].mem_bytes = (r + 1) * kGiB;
    // Running totals: each rank had seen as many tokens before this interval as in it (100(r+1) twice), and
    // rank 0 three samples more: DP sums 2 * (100+200+300+400) = 2000 tokens and (1+2+3+4) + 3 = 13 samples.
    specs[r].tokens_seen = 2.0 * static_cast<double>(specs[r].tokens);
    specs[r].samples_seen = specs[r].samples + (r == 0 ? 3 : 0);
  }
  const std::vector<double> rows = rows_of(specs);
  metrics_deriver deriver(setup_for(4, 1, 1e-3));
  derive_context context;
  context.step = 7;
  context.learning_rate = 0.5;
  context.log_wait_ms = 0.25;
  const derive_result result = deriver.derive(rows.data(), 4, context);
  ASSERT_TRUE(result.derived) << result.why;
  const metrics_record& rec = result.record;
  EXPECT_EQ(rec.step, 7);
  EXPECT_DOUBLE_EQ(value(rec, m::kTokensPerSecond), 500.0);
  EXPECT_DOUBLE_EQ(value(rec, m::kTokensPerSecondPerGpu), 125.0);
  const double flops = small_doc_flops(100) + small_doc_flops(200) + small_doc_flops(300) + small_doc_flops(400);
  EXPECT_NEAR(value(rec, m::kTflopsPerSecond) / (flops / 2 / 4 / 1e12), 1.0, 1e-12);
  EXPECT_NEAR(value(rec, m::kMfu) / (flops / 2 / 4 / 1e12 / 1e-3 * 100), 1.0, 1e-12);
  // Loss: (10+20+30+40) / (100+200+300+400) = 0.1. Memory: max 4 GiB. One micro-batch in 2 s each.
  EXPECT_DOUBLE_EQ(value(rec, m::kLoss), 0.1);
  EXPECT_DOUBLE_EQ(value(rec, m::kMemGib), 4.0);
  EXPECT_DOUBLE_EQ(value(rec, m::kStepTime), 2.0);
  EXPECT_DOUBLE_EQ(value(rec, m::kBatchEfficiency), 1.0);
  EXPECT_DOUBLE_EQ(value(rec, m::kLearningRate), 0.5);
  EXPECT_FALSE(find(rec, m::kGradNorm));
  EXPECT_DOUBLE_EQ(value(rec, m::kLogWaitMs), 0.25);
  // Totals: the DP sums of the rows' running totals (above), not this interval's counts.
  EXPECT_DOUBLE_EQ(value(rec, m::kTokensSeen), 2000.0);
  EXPECT_DOUBLE_EQ(value(rec, m::kNumSamples), 13.0);
  EXPECT_DOUBLE_EQ(result.tokens_seen, 2000.0);
  EXPECT_DOUBLE_EQ(result.samples_seen, 13.0);
  // Top-3: slow tps is rank 0 (50), then 1, 2; fast is rank 3 (200), then 2, 1.
  EXPECT_DOUBLE_EQ(value(rec, topk(m::kTopkTps, kSlow, 0)), 50.0);
  EXPECT_DOUBLE_EQ(value(rec, topk(m::kTopkTps, kSlow, 0, true)), 0.0);
  EXPECT_DOUBLE_EQ(value(rec, topk(m::kTopkTps, kSlow, 2, true)), 2.0);
  EXPECT_DOUBLE_EQ(value(rec, topk(m::kTopkTps, kFast, 0)), 200.0);
  EXPECT_DOUBLE_EQ(value(rec, topk(m::kTopkTps, kFast, 0, true)), 3.0);
  EXPECT_DOUBLE_EQ(value(rec, topk(m::kTopkTps, kFast, 2, true)), 1.0);
  // Memory: "slow" is the highest.
  EXPECT_DOUBLE_EQ(value(rec, topk(m::kTopkMemGib, kSlow, 0, true)), 3.0);
  EXPECT_FALSE(find(rec, topk(m::kTopkTps, kSlow, 3)));  // k = 3
  // No trainer-reported times and no waits: neither headline nor top-k for them.
  EXPECT_FALSE(find(rec, m::kForwardBackwardTime));
  EXPECT_FALSE(find(rec, topk(m::kTopkForwardBackwardTime, kSlow, 0)));
  EXPECT_FALSE(find(rec, topk(m::kTopkLogWaitMs, kSlow, 0)));
}

// No rank reported its peak memory (a CPU trainer, or one that never sets it): perf/mem_gib and its top-k
// are left out, as perf/data_time is, rather than a 0 GiB that reads like a measurement. One rank reporting
// 1 GiB brings both back (the max over the world, and that rank at the slow end).
TEST(derive, peak_memory_is_reported_only_when_some_rank_reported_it) {
  std::vector<row_spec> specs(2);
  for (row_spec& s : specs) s.tokens = 100;
  metrics_deriver deriver(setup_for(2));
  const derive_result none = deriver.derive(rows_of(specs).data(), 2, derive_context{});
  ASSERT_TRUE(none.derived) << none.why;
  EXPECT_FALSE(find(none.record, m::kMemGib));
  EXPECT_FALSE(find(none.record, topk(m::kTopkMemGib, kSlow, 0)));
  specs[1].mem_bytes = kGiB;
  const derive_result one = deriver.derive(rows_of(specs).data(), 2, derive_context{});
  ASSERT_TRUE(one.derived) << one.why;
  EXPECT_DOUBLE_EQ(value(one.record, m::kMemGib), 1.0);
  EXPECT_DOUBLE_EQ(value(one.record, topk(m::kTopkMemGib, kSlow, 0, true)), 1.0);
}

// A reported 0 is a measurement: every rank reporting 0 s of data time, 0 s forward-backward and 0 bytes of
// peak memory gives 0 in the record (before: the row carried 0 for "not reported" too, and all three were left
// out). A figure no rank reported stays out.
TEST(derive, a_reported_zero_is_emitted_as_zero_and_a_figure_nobody_reported_is_left_out) {
  std::vector<row_spec> specs(2);
  for (row_spec& s : specs) {
    s.tokens = 100;
    s.data_seconds = 0;
    s.forward_backward_seconds = 0;
    s.mem_bytes = 0;
  }
  metrics_deriver deriver(setup_for(2, 1, std::nullopt, 1));
  const derive_result zeros = deriver.derive(rows_of(specs).data(), 2, derive_context{});
  ASSERT_TRUE(zeros.derived) << zeros.why;
  EXPECT_EQ(value(zeros.record, m::kDataTime), 0.0);
  EXPECT_EQ(value(zeros.record, m::kForwardBackwardTime), 0.0);
  EXPECT_EQ(value(zeros.record, m::kMemGib), 0.0);
  EXPECT_EQ(value(zeros.record, topk(m::kTopkDataTime, kSlow, 0)), 0.0);
  for (row_spec& s : specs) s.data_seconds.reset();
  const derive_result absent = deriver.derive(rows_of(specs).data(), 2, derive_context{});
  ASSERT_TRUE(absent.derived) << absent.why;
  EXPECT_FALSE(find(absent.record, m::kDataTime));
  EXPECT_FALSE(find(absent.record, topk(m::kTopkDataTime, kSlow, 0)));
  EXPECT_EQ(value(absent.record, m::kForwardBackwardTime), 0.0);
}

// Some ranks report a figure, others do not: the headline is the maximum over the ranks that reported, and the
// top-k ranks only them. Ranks 0-3: data time 0.5 s, not reported, 0 s, not reported. Headline 0.5; with k = 3
// the slow side lists rank 0 (0.5), rank 2 (0) and no third row; the fast side rank 2, then rank 0.
TEST(derive, a_figure_some_ranks_reported_is_their_maximum_and_ranks_only_them) {
  std::vector<row_spec> specs(4);
  for (row_spec& s : specs) s.tokens = 100;
  specs[0].data_seconds = 0.5;
  specs[2].data_seconds = 0.0;
  metrics_deriver deriver(setup_for(4, 1, std::nullopt, 3));
  const derive_result result = deriver.derive(rows_of(specs).data(), 4, derive_context{});
  ASSERT_TRUE(result.derived) << result.why;
  const metrics_record& rec = result.record;
  EXPECT_EQ(value(rec, m::kDataTime), 0.5);
  EXPECT_EQ(value(rec, topk(m::kTopkDataTime, kSlow, 0)), 0.5);
  EXPECT_EQ(value(rec, topk(m::kTopkDataTime, kSlow, 0, true)), 0.0);
  EXPECT_EQ(value(rec, topk(m::kTopkDataTime, kSlow, 1)), 0.0);
  EXPECT_EQ(value(rec, topk(m::kTopkDataTime, kSlow, 1, true)), 2.0);
  EXPECT_FALSE(find(rec, topk(m::kTopkDataTime, kSlow, 2)));
  EXPECT_EQ(value(rec, topk(m::kTopkDataTime, kFast, 0, true)), 2.0);
  EXPECT_EQ(value(rec, topk(m::kTopkDataTime, kFast, 1, true)), 0.0);
  // tps still ranks every rank: k = 3 rows.
  EXPECT_TRUE(find(rec, topk(m::kTopkTps, kSlow, 2)));
}

// The reference trainer's figures (METRICS.md, "The reference trainer's names"). Four ranks, dp 2 x tp 2 (this
// rank's DP group: ranks 0 and 2), each interval 4 s:
//   train/max_loss: the mean losses of the DP group's ranks are 10/100 = 0.1 (rank 0) and 60/200 = 0.3 (rank 2):
//     0.3 (ranks 1 and 3, of the other DP group, have 0.9 and are not in it; train/loss is 70/300).
//   train/assistant_tokens_seen: the DP sum of the running label totals, 500 + 700 = 1200.
//   perf/data_time_pct: rank 3 waits 2 s of its 4 s for data, 50%, the most of any rank (rank 1: 1 s, 25%).
//   perf/mem_reserved_gib: the max over the world of the reserved peaks, rank 1's 6 GiB; rank 2 reported none.
TEST(derive, the_reference_trainers_figures_max_loss_label_tokens_data_share_and_reserved_peak) {
  std::vector<row_spec> specs(4);
  for (row_spec& s : specs) {
    s.tokens = 400;
    s.seconds = 4;
  }
  specs[0].loss_sum = 10, specs[0].label_tokens = 100, specs[0].label_tokens_seen = 500;
  specs[2].loss_sum = 60, specs[2].label_tokens = 200, specs[2].label_tokens_seen = 700;
  specs[1].loss_sum = 90, specs[1].label_tokens = 100;
  specs[3].loss_sum = 90, specs[3].label_tokens = 100;
  specs[1].data_seconds = 1.0;
  specs[3].data_seconds = 2.0;
  specs[0].reserved_bytes = 2 * kGiB;
  specs[1].reserved_bytes = 6 * kGiB;
  specs[3].reserved_bytes = 0;
  metrics_deriver deriver(setup_for(4, 2));
  const derive_result result = deriver.derive(rows_of(specs).data(), 4, derive_context{});
  ASSERT_TRUE(result.derived) << result.why;
  const metrics_record& rec = result.record;
  EXPECT_DOUBLE_EQ(value(rec, m::kLoss), 70.0 / 300.0);
  EXPECT_DOUBLE_EQ(value(rec, m::kMaxLoss), 0.3);
  EXPECT_EQ(value(rec, m::kAssistantTokensSeen), 1200.0);
  EXPECT_DOUBLE_EQ(value(rec, m::kDataTimePct), 50.0);
  EXPECT_EQ(value(rec, m::kMemReservedGib), 6.0);
  // No label tokens in this interval: no train/max_loss. Nobody reported a reserved peak: none either.
  for (row_spec& s : specs) {
    s.loss_sum = 0, s.label_tokens = 0, s.reserved_bytes.reset();
  }
  const derive_result none = deriver.derive(rows_of(specs).data(), 4, derive_context{});
  ASSERT_TRUE(none.derived) << none.why;
  EXPECT_FALSE(find(none.record, m::kMaxLoss));
  EXPECT_FALSE(find(none.record, m::kMemReservedGib));
  EXPECT_EQ(value(none.record, m::kAssistantTokensSeen), 1200.0);  // a running total: the earlier labels stay
}

// The loss fields of a micro-batch: train/loss = sum(loss_sum) / sum(label_tokens), so a loss_sum without
// label tokens, or a non-zero one over 0 label tokens, is refused; 0 over 0 (a batch whose labels are all
// masked) and label tokens without a loss are fine.
TEST(derive, a_loss_sum_needs_label_tokens_to_be_a_sum_over) {
  EXPECT_NO_THROW(check_loss_pair(std::nullopt, std::nullopt));
  EXPECT_NO_THROW(check_loss_pair(std::nullopt, 5));
  EXPECT_NO_THROW(check_loss_pair(0.0, 0));
  EXPECT_NO_THROW(check_loss_pair(4.0, 1));
  try {
    check_loss_pair(-4.0, 0);
    ADD_FAILURE() << "no error";
  } catch (const error& e) {
    EXPECT_STREQ(e.what(), "loss_sum -4 over 0 label tokens (a sum over no tokens is 0)");
  }
  try {
    check_loss_pair(2.5, std::nullopt);
    ADD_FAILURE() << "no error";
  } catch (const error& e) {
    EXPECT_STREQ(e.what(),
                 "loss_sum 2.5 without label_tokens: train/loss is the sum of loss_sum over the sum of label_tokens");
  }
}

// A running total of 2^53 or more is no longer exact in a row: that total is left out, with a warning, and
// the interval's rates stay (before: the whole interval was refused, and every later one with it, since a
// running total never shrinks). Rank 1 has seen 2^53 tokens; its samples are still exact.
TEST(derive, a_running_total_past_2_53_is_left_out_and_the_rates_stay) {
  std::vector<row_spec> specs(2);
  for (row_spec& s : specs) s.tokens = 100;
  specs[1].tokens_seen = 9007199254740992.0;  // 2^53
  metrics_deriver deriver(setup_for(2));
  const derive_result result = deriver.derive(rows_of(specs).data(), 2, derive_context{});
  ASSERT_TRUE(result.derived) << result.why;
  EXPECT_FALSE(find(result.record, m::kTokensSeen));
  EXPECT_DOUBLE_EQ(value(result.record, m::kNumSamples), 2.0);
  EXPECT_DOUBLE_EQ(value(result.record, m::kTokensPerSecond), 200.0);
  EXPECT_EQ(result.warning,
            "train/tokens_seen not reported: a rank's running total reached 2^53, beyond what a row carries exactly");
}

// train/flops_seen: the DP sums of the rows' three 32-bit limbs, recombined in 128 bits and rounded once.
// Rank 0 has seen 2^64 + 3 x 2^32 + 5 FLOPs (limbs 5, 3, 1), rank 1 2^64 - 1 (limbs 2^32 - 1, 2^32 - 1, 0).
// Their sum is 2^65 + 3 x 2^32 + 4 = 36,893,488,160,304,005,124, whose nearest double (spacing 2^13 above 2^65)
// is 2^65 + 3 x 2^32 = 36,893,488,160,304,005,120. Rank 2 is outside the DP group (tp 1, but the group below
// holds ranks 0 and 1 only): its limbs do not count.
TEST(derive, flops_seen_recombines_the_dp_sums_of_the_limbs) {
  std::vector<row_spec> specs(3);
  for (row_spec& s : specs) s.tokens = 10;
  specs[0].flops_seen_limbs = {5, 3, 1};
  specs[1].flops_seen_limbs = {4294967295.0, 4294967295.0, 0};
  specs[2].flops_seen_limbs = {1000, 1000, 1000};
  derive_setup setup = setup_for(3);
  setup.dp_group = {0, 1};
  metrics_deriver deriver(setup);
  const derive_result result = deriver.derive(rows_of(specs).data(), 3, derive_context{});
  ASSERT_TRUE(result.derived) << result.why;
  EXPECT_EQ(value(result.record, m::kFlopsSeen), 36893488160304005120.0);
  EXPECT_EQ(value(result.record, m::kFlopsSeen), std::ldexp(1.0, 65) + 3 * std::ldexp(1.0, 32));
  ASSERT_TRUE(result.flops_seen);
  EXPECT_EQ(*result.flops_seen, value(result.record, m::kFlopsSeen));
  EXPECT_EQ(result.warning, "");
}

// A row whose FLOPs cannot be carried leaves train/flops_seen out, with a warning that says why; the other
// figures stay. A total of 2^96 or more marks every limb kFlopsSeenBeyondRow (flops_seen_to_row).
TEST(derive, flops_seen_is_left_out_when_a_row_cannot_carry_it) {
  std::vector<row_spec> specs(2);
  for (row_spec& s : specs) s.tokens = 100;
  specs[1].flops_seen_limbs = {kFlopsSeenBeyondRow, kFlopsSeenBeyondRow, kFlopsSeenBeyondRow};
  metrics_deriver deriver(setup_for(2));
  derive_result result = deriver.derive(rows_of(specs).data(), 2, derive_context{});
  ASSERT_TRUE(result.derived) << result.why;
  EXPECT_FALSE(find(result.record, m::kFlopsSeen));
  EXPECT_DOUBLE_EQ(value(result.record, m::kTokensSeen), 200.0);
  EXPECT_EQ(result.warning,
            "train/flops_seen not reported: a rank's running total reached 2^96 FLOPs, beyond what a row carries "
            "exactly");

  std::vector<double> rows = rows_of({specs[0], specs[0]});
  const uint128 beyond = uint128{1} << 96;
  flops_seen_to_row(beyond, rows.data() + kRowFields);
  EXPECT_EQ(rows[kRowFields + row_flops_seen_2], kFlopsSeenBeyondRow);
  flops_seen_to_row(beyond - 1, rows.data());  // the largest total a row carries: limbs 2^32 - 1
  EXPECT_EQ(rows[row_flops_seen_0], 4294967295.0);
  EXPECT_EQ(rows[row_flops_seen_2], 4294967295.0);
  result = deriver.derive(rows.data(), 2, derive_context{});
  ASSERT_TRUE(result.derived) << result.why;
  EXPECT_FALSE(find(result.record, m::kFlopsSeen));
  EXPECT_EQ(result.warning,
            "train/flops_seen not reported: a rank's running total reached 2^96 FLOPs, beyond what a row carries "
            "exactly");
}

TEST(derive, tp2_sums_the_dp_group_and_splits_flops_between_tp_ranks) {
  // dp2 x tp2, rank = tp + 2*dp: replica 0 (ranks 0, 1) runs 400 tokens, replica 1 (ranks 2, 3) 600, in 1 s.
  // tokens/s = 400 + 600 (the DP group {0, 2}), not four rows' worth; each rank's row is T/(tp) / t:
  // 200, 200, 300, 300 -> sum 1000. TFLOP/s per GPU = (F(400) + F(600)) / 1 s / 4 GPUs.
  std::vector<row_spec> specs(4);
  for (int r = 0; r < 4; ++r) specs[r].tokens = r < 2 ? 400 : 600;
  const std::vector<double> rows = rows_of(specs);
  metrics_deriver deriver(setup_for(4, 2));
  const derive_result result = deriver.derive(rows.data(), 4, derive_context{});
  ASSERT_TRUE(result.derived) << result.why;
  EXPECT_DOUBLE_EQ(value(result.record, m::kTokensPerSecond), 1000.0);
  EXPECT_DOUBLE_EQ(result.tokens_seen, 1000.0);
  EXPECT_NEAR(value(result.record, m::kTflopsPerSecond) / ((small_doc_flops(400) + small_doc_flops(600)) / 4 / 1e12),
              1.0, 1e-12);
  EXPECT_FALSE(find(result.record, m::kMfu));  // no peak
  // Ties: the slow side takes the lower rank first, the fast side the higher (two ends of one order).
  EXPECT_DOUBLE_EQ(value(result.record, topk(m::kTopkTps, kSlow, 0, true)), 0.0);
  EXPECT_DOUBLE_EQ(value(result.record, topk(m::kTopkTps, kSlow, 1, true)), 1.0);
  EXPECT_DOUBLE_EQ(value(result.record, topk(m::kTopkTps, kFast, 0, true)), 3.0);
  EXPECT_DOUBLE_EQ(value(result.record, topk(m::kTopkTps, kFast, 1, true)), 2.0);
}

// MFU above 100% is impossible, so it is never reported. Two DP ranks over 1 s: rank 0 runs 100 tokens, rank 1
// 400, so rank r's TFLOP/s is F(tokens_r) / 1e12 and the job's per GPU is their mean. F grows faster than the
// token count, so F(100) < F(400) / 4 and the mean is below 0.9 F(400) (it is under 5/8 F(400)).
//   - peak 2 F(400): every MFU below 100%: reported, no warning;
//   - peak 0.9 F(400): the job's MFU is below 100% but rank 1's is above: neither the headline nor the per-rank
//     MFU is reported (a top-k that averaged to a plausible headline would hide the bad row), and the
//     warning names rank 1;
//   - tokens/s and TFLOP/s are reported in every case: they are what the trainer reported over the time.
TEST(derive, an_mfu_above_100_percent_is_not_reported_and_the_warning_says_why) {
  std::vector<row_spec> specs(2);
  specs[0].tokens = 100;
  specs[1].tokens = 400;
  const std::vector<double> rows = rows_of(specs);
  const double rank1_tflops = small_doc_flops(400) / 1e12;
  ASSERT_LT((small_doc_flops(100) + small_doc_flops(400)) / 2 / 1e12, 0.9 * rank1_tflops);

  metrics_deriver plausible(setup_for(2, 1, 2 * rank1_tflops));
  const derive_result ok = plausible.derive(rows.data(), 2, derive_context{});
  ASSERT_TRUE(ok.derived) << ok.why;
  EXPECT_EQ(ok.warning, "");
  EXPECT_NEAR(value(ok.record, m::kMfu),
              (small_doc_flops(100) + small_doc_flops(400)) / 2 / 1e12 / (2 * rank1_tflops) * 100, 1e-9);
  EXPECT_NEAR(value(ok.record, topk(m::kTopkMfu, kFast, 0)), 50.0, 1e-9);  // rank 1 at half its peak
  EXPECT_DOUBLE_EQ(value(ok.record, topk(m::kTopkMfu, kFast, 0, true)), 1.0);

  metrics_deriver too_low(setup_for(2, 1, 0.9 * rank1_tflops));
  const derive_result bad = too_low.derive(rows.data(), 2, derive_context{});
  ASSERT_TRUE(bad.derived) << bad.why;
  EXPECT_FALSE(find(bad.record, m::kMfu));
  EXPECT_FALSE(find(bad.record, topk(m::kTopkMfu, kFast, 0)));
  EXPECT_FALSE(find(bad.record, topk(m::kTopkMfu, kSlow, 0)));
  EXPECT_DOUBLE_EQ(value(bad.record, m::kTokensPerSecond), 500.0);
  EXPECT_NEAR(value(bad.record, m::kTflopsPerSecond) / ((small_doc_flops(100) + small_doc_flops(400)) / 2 / 1e12), 1.0,
              1e-12);
  EXPECT_EQ(bad.warning.rfind("MFU not reported: ", 0), 0u) << bad.warning;
  EXPECT_NE(bad.warning.find("TFLOP/s per GPU (rank 1: "), std::string::npos) << bad.warning;
  EXPECT_NE(bad.warning.find(") exceeds the peak of "), std::string::npos) << bad.warning;
}

// The trainer's optional log fields: each kept only when it passes its rule, and every one left out is named
// (numbers as "%g" prints them). Before, a grad norm of -1 and a time of 1e308 s were emitted as given, a data
// time of -5 s was dropped silently and a NaN learning rate became JSON null.
TEST(derive, log_fields_that_break_their_rules_are_left_out_and_named) {
  log_event good;
  good.step = 3;
  good.learning_rate = 0.0;  // a learning rate of 0 (warm-up start) is a value
  good.grad_norm = 2.5;
  good.data_time = std::chrono::duration<double>(0.25);
  good.forward_backward_time = std::chrono::duration<double>(kMaxLogSeconds);  // the bound itself passes
  good.peak_memory_bytes = std::int64_t{80} << 30;
  const checked_log kept = check_log_fields(good);
  EXPECT_EQ(kept.dropped, "");
  EXPECT_EQ(kept.event.learning_rate, 0.0);
  EXPECT_EQ(kept.event.grad_norm, 2.5);
  EXPECT_EQ(kept.event.forward_backward_time->count(), 1e6);
  EXPECT_EQ(kept.event.peak_memory_bytes, std::int64_t{80} << 30);

  log_event bad = good;
  bad.learning_rate = std::numeric_limits<double>::quiet_NaN();
  bad.grad_norm = -1.0;
  bad.data_time = std::chrono::duration<double>(-5.0);
  bad.forward_backward_time = std::chrono::duration<double>(1e308);
  bad.peak_memory_bytes = -3;
  const checked_log dropped = check_log_fields(bad);
  EXPECT_EQ(dropped.dropped,
            "learning_rate nan (must be finite and >= 0), grad_norm -1 (must be finite and >= 0), data_time -5 s "
            "(must be finite and in [0, 1e6] s), forward_backward_time 1e+308 s (must be finite and in [0, 1e6] "
            "s), peak_memory_bytes -3 (must be in [0, 2^53))");
  EXPECT_FALSE(dropped.event.learning_rate);
  EXPECT_FALSE(dropped.event.grad_norm);
  EXPECT_FALSE(dropped.event.data_time);
  EXPECT_FALSE(dropped.event.forward_backward_time);
  EXPECT_FALSE(dropped.event.peak_memory_bytes);
  EXPECT_EQ(dropped.event.step, 3);
}

TEST(derive, stragglers_show_in_the_trainer_reported_times_and_the_log_wait) {
  // A job synchronised every step: equal intervals, equal tokens, so tps cannot tell the ranks apart. Rank 2
  // spends 3 s in forward+backward where the others spend 1 s, and rank 1 waits 4 s for data. The others
  // then wait for rank 2 inside flopmeter's collective (40 ms); rank 2 itself waits 0.5 ms.
  std::vector<row_spec> specs(4);
  for (int r = 0; r < 4; ++r) {
    specs[r].tokens = 100;
    specs[r].seconds = 5;
    specs[r].forward_backward_seconds = r == 2 ? 3.0 : 1.0;
    specs[r].data_seconds = r == 1 ? 4.0 : 0.5;
    specs[r].log_wait_ms = r == 2 ? 0.5 : 40.0;
  }
  const std::vector<double> rows = rows_of(specs);
  metrics_deriver deriver(setup_for(4, 1, std::nullopt, 1));
  const derive_result result = deriver.derive(rows.data(), 4, derive_context{});
  ASSERT_TRUE(result.derived) << result.why;
  const metrics_record& rec = result.record;
  EXPECT_DOUBLE_EQ(value(rec, m::kForwardBackwardTime), 3.0);  // the world maximum
  EXPECT_DOUBLE_EQ(value(rec, topk(m::kTopkForwardBackwardTime, kSlow, 0)), 3.0);
  EXPECT_DOUBLE_EQ(value(rec, topk(m::kTopkForwardBackwardTime, kSlow, 0, true)), 2.0);
  EXPECT_DOUBLE_EQ(value(rec, topk(m::kTopkForwardBackwardTime, kFast, 0)), 1.0);
  EXPECT_DOUBLE_EQ(value(rec, topk(m::kTopkForwardBackwardTime, kFast, 0, true)), 3.0);  // ties: highest rank
  EXPECT_DOUBLE_EQ(value(rec, topk(m::kTopkDataTime, kSlow, 0, true)), 1.0);
  EXPECT_DOUBLE_EQ(value(rec, topk(m::kTopkDataTime, kSlow, 0)), 4.0);
  // The wait: the slow side is the rank that waited least — the one the others waited for.
  EXPECT_DOUBLE_EQ(value(rec, topk(m::kTopkLogWaitMs, kSlow, 0)), 0.5);
  EXPECT_DOUBLE_EQ(value(rec, topk(m::kTopkLogWaitMs, kSlow, 0, true)), 2.0);
  EXPECT_DOUBLE_EQ(value(rec, topk(m::kTopkLogWaitMs, kFast, 0)), 40.0);
  // tps: every row 100 / 5 = 20; ties go to rank 0 on the slow side, so tps does not name rank 2.
  EXPECT_DOUBLE_EQ(value(rec, topk(m::kTopkTps, kSlow, 0, true)), 0.0);
}

TEST(derive, topk_larger_than_the_world_lists_every_rank_on_each_side) {
  std::vector<row_spec> specs(2);
  specs[0].tokens = 10;
  specs[1].tokens = 30;
  const std::vector<double> rows = rows_of(specs);
  metrics_deriver deriver(setup_for(2, 1, std::nullopt, 5));
  const derive_result result = deriver.derive(rows.data(), 2, derive_context{});
  ASSERT_TRUE(result.derived);
  EXPECT_DOUBLE_EQ(value(result.record, topk(m::kTopkTps, kSlow, 1)), 30.0);
  EXPECT_DOUBLE_EQ(value(result.record, topk(m::kTopkTps, kFast, 1)), 10.0);
  EXPECT_FALSE(find(result.record, topk(m::kTopkTps, kSlow, 2)));
}

TEST(derive, topk_zero_emits_no_rows) {
  std::vector<row_spec> specs(2);
  const std::vector<double> rows = rows_of(specs);
  metrics_deriver deriver(setup_for(2, 1, std::nullopt, 0));
  const derive_result result = deriver.derive(rows.data(), 2, derive_context{});
  ASSERT_TRUE(result.derived);
  for (const auto& [name, v] : result.record.values) EXPECT_NE(name.rfind("perf_topk/", 0), 0u) << name;
}

TEST(derive, a_rank_without_microbatches_has_no_step_time) {
  // Rank 1 ran no micro-batch: no step time of its own, so neither perf/step_time nor its top-k.
  std::vector<row_spec> specs(2);
  specs[1].microbatches = 0;
  const std::vector<double> rows = rows_of(specs);
  metrics_deriver deriver(setup_for(2));
  const derive_result result = deriver.derive(rows.data(), 2, derive_context{});
  ASSERT_TRUE(result.derived);
  EXPECT_FALSE(find(result.record, m::kStepTime));
  EXPECT_FALSE(find(result.record, topk(m::kTopkStepTime, kSlow, 0)));
  EXPECT_TRUE(find(result.record, topk(m::kTopkTps, kSlow, 0)));
}

TEST(derive, intervals_and_counts_that_are_not_numbers_skip_the_interval) {
  metrics_deriver deriver(setup_for(2));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct bad_case {
    const char* what;
    std::size_t field;
    double value;
    const char* why;
  };
  const bad_case cases[] = {
      {"zero interval", row_interval_seconds, 0.0, "rank 1 reported an interval of 0 s"},
      {"negative interval", row_interval_seconds, -1.0, "rank 1 reported an interval of -1 s"},
      {"NaN interval", row_interval_seconds, nan, "rank 1 reported an interval of nan s"},
      {"count at 2^53", row_real_tokens, 9007199254740992.0, "rank 1 reported a count of 9.0072e+15"},
      // What is wrong with a count that is not one (a corrupt peer row) is said as such, not "beyond 2^53".
      {"negative count", row_causal_pairs, -1.0,
       "rank 1 reported a count of -1 in one interval, not a finite non-negative integer (a corrupt row)"},
      {"NaN count", row_patches, nan,
       "rank 1 reported a count of nan in one interval, not a finite non-negative integer (a corrupt row)"},
      {"fractional count", row_documents, 2.5,
       "rank 1 reported a count of 2.5 in one interval, not a finite non-negative integer (a corrupt row)"},
      {"count at 2^53, said as such", row_real_tokens, 9007199254740992.0,
       "rank 1 reported a count of 9.0072e+15 in one interval, beyond the 2^53 a row carries exactly"},
  };
  for (const bad_case& c : cases) {
    std::vector<double> rows = rows_of(std::vector<row_spec>(2));
    rows[kRowFields + c.field] = c.value;
    const derive_result result = deriver.derive(rows.data(), 2, derive_context{});
    EXPECT_FALSE(result.derived) << c.what;
    EXPECT_EQ(result.why.rfind(c.why, 0), 0u) << c.what << ": " << result.why;
    EXPECT_TRUE(result.record.values.empty()) << c.what;
  }
  // 2^53 - 1 is exact and derives.
  std::vector<double> rows = rows_of(std::vector<row_spec>(2));
  rows[kRowFields + row_padding_tokens] = 9007199254740991.0;
  EXPECT_TRUE(deriver.derive(rows.data(), 2, derive_context{}).derived);
}

// A positive finite interval can be too short for a rate to be a number: 10 tokens over the smallest
// subnormal, 5e-324 s, is 10 / 4.94e-324 ~ 2e324 tokens/s, beyond the largest double (1.8e308): inf, which JSONL
// would write as null. Skipped like a zero interval, with the reason, never emitted.
TEST(derive, an_interval_too_short_for_finite_rates_skips_the_interval) {
  metrics_deriver deriver(setup_for(2));
  std::vector<row_spec> specs(2);
  specs[0].tokens = specs[1].tokens = 10;
  specs[1].seconds = 5e-324;
  const derive_result result = deriver.derive(rows_of(specs).data(), 2, derive_context{});
  EXPECT_FALSE(result.derived);
  EXPECT_EQ(result.why, "rank 1 reported an interval of 4.94066e-324 s, too short for its rates to be finite numbers");
  EXPECT_TRUE(result.record.values.empty());
  // 1e-300 s is short but its rates are finite (10 / 1e-300 = 1e301 tokens/s): derived.
  specs[1].seconds = 1e-300;
  EXPECT_TRUE(deriver.derive(rows_of(specs).data(), 2, derive_context{}).derived);
}

// A loss over more label tokens than the batch holds real tokens is refused (the loss would read smaller):
// 10 tokens with 1000 label tokens and loss_sum 5 would give train/loss 5/1000 = 0.005 instead of 5/10 = 0.5.
TEST(derive, label_tokens_beyond_the_real_tokens_are_refused) {
  EXPECT_NO_THROW(check_label_tokens_within(5.0, 10, 10));             // every token a label: fine
  EXPECT_NO_THROW(check_label_tokens_within(std::nullopt, 1000, 10));  // no loss: nothing is divided by them
  try {
    check_label_tokens_within(5.0, 1000, 10);
    ADD_FAILURE() << "no error";
  } catch (const error& e) {
    EXPECT_STREQ(e.what(),
                 "label_tokens 1000 exceeds the micro-batch's 10 real tokens (a loss is averaged over at most every "
                 "token)");
  }
}

TEST(derive, the_same_rows_give_the_same_record) {
  // Pure: scratch buffers are reused, nothing carries over between calls.
  std::vector<row_spec> specs(3);
  for (int r = 0; r < 3; ++r) specs[r].tokens = 10 * (r + 1);
  const std::vector<double> rows = rows_of(specs);
  metrics_deriver deriver(setup_for(3, 1, 1.0));
  const derive_result first = deriver.derive(rows.data(), 3, derive_context{});
  const derive_result second = deriver.derive(rows.data(), 3, derive_context{});
  ASSERT_EQ(first.record.values.size(), second.record.values.size());
  for (std::size_t i = 0; i < first.record.values.size(); ++i) {
    EXPECT_EQ(first.record.values[i].first, second.record.values[i].first);
    EXPECT_DOUBLE_EQ(first.record.values[i].second, second.record.values[i].second);
  }
}

}  // namespace

// Every record carries the regime, and the Megatron constant's view of the same interval beside the exact one:
// two ranks (dp 2) of 1 s each with 3e12 and 1e12 Megatron FLOPs in their rows give (3 + 1) / 2 = 2 TFLOP/s per
// GPU, 20% of a 10 TFLOP/s peak.
TEST(derive, records_carry_the_regime_and_the_megatron_figures) {
  derive_setup setup = setup_for(2, 1, 10.0);
  setup.regime.vision_frozen = true;
  setup.regime.lora_rank = 8;
  metrics_deriver deriver(setup);
  std::vector<row_spec> specs(2);
  specs[0].tokens = specs[1].tokens = 100;
  std::vector<double> rows = rows_of(specs);
  rows[row_megatron_flops] = 3e12;
  rows[kRowFields + row_megatron_flops] = 1e12;
  const derive_result r = deriver.derive(rows.data(), 2, derive_context{});
  ASSERT_TRUE(r.derived) << r.why;
  EXPECT_EQ(value(r.record, m::kFrozenVision), 1.0);
  EXPECT_EQ(value(r.record, m::kFrozenMerger), 0.0);
  EXPECT_EQ(value(r.record, m::kFrozenText), 0.0);
  EXPECT_EQ(value(r.record, m::kLoraRank), 8.0);
  EXPECT_DOUBLE_EQ(value(r.record, m::kTflopsPerSecondMegatron), 2.0);
  EXPECT_DOUBLE_EQ(value(r.record, m::kMfuMegatron), 20.0);
}

// Hardware FLOPs beside model FLOPs. small_text_model under recompute "full" (tests/test_recompute.cpp):
// model 7392 per token + 192 per pair, recomputed 2304 + 64. Two ranks, 100 tokens (5050 pairs) in 1 s each:
//   model 7392*100 + 192*5050 = 1,708,800 FLOPs, recomputed 2304*100 + 64*5050 = 553,600: hardware 2,262,400
//   per GPU 1.7088e-6 and 2.2624e-6 TFLOP/s; at a peak of 1e-5: MFU 17.088%, HFU 22.624%.
// Without recomputation both hardware figures equal the model ones (always emitted: one dashboard layout).
// When only the hardware figure exceeds the peak (2e-6), HFU is left out with a warning and MFU stays.
TEST(derive, hardware_flops_and_hfu_add_the_recomputed_forward) {
  derive_setup setup = setup_for(2, 1, 1e-5);
  training_regime full;
  full.recompute.policy = recompute_policy::full;
  setup.flop_coefficients = compute_coefficients(small_text_model(), full);
  std::vector<row_spec> specs(2);
  specs[0].tokens = specs[1].tokens = 100;
  const std::vector<double> rows = rows_of(specs);
  const derive_result r = metrics_deriver(setup).derive(rows.data(), 2, derive_context{});
  ASSERT_TRUE(r.derived) << r.why;
  EXPECT_DOUBLE_EQ(value(r.record, m::kTflopsPerSecond), 1.7088e-6);
  EXPECT_DOUBLE_EQ(value(r.record, m::kTflopsPerSecondHardware), 2.2624e-6);
  EXPECT_DOUBLE_EQ(value(r.record, m::kMfu), 17.088);
  EXPECT_DOUBLE_EQ(value(r.record, m::kHfu), 22.624);

  const derive_result none = metrics_deriver(setup_for(2, 1, 1e-5)).derive(rows.data(), 2, derive_context{});
  ASSERT_TRUE(none.derived) << none.why;
  EXPECT_EQ(value(none.record, m::kTflopsPerSecondHardware), value(none.record, m::kTflopsPerSecond));
  EXPECT_EQ(value(none.record, m::kHfu), value(none.record, m::kMfu));

  setup.peak_tflops_per_gpu = 2e-6;
  const derive_result over = metrics_deriver(setup).derive(rows.data(), 2, derive_context{});
  ASSERT_TRUE(over.derived) << over.why;
  EXPECT_DOUBLE_EQ(value(over.record, m::kMfu), 85.44);
  EXPECT_EQ(find(over.record, m::kHfu), nullptr);
  EXPECT_NE(over.warning.find("HFU not reported: 2.2624e-06 hardware TFLOP/s per GPU"), std::string::npos)
      << over.warning;
}

// The Megatron billing of one micro-batch is the constant at its own row length: text_per_token(S) x S +
// vision_per_token(S) x patches, as `flopmeter estimate` reports it.
TEST(derive, megatron_billing_is_the_constant_at_the_row_length) {
  const model_spec spec = small_text_model();
  const megatron_billing b = megatron_billing::of(spec, flop_scope::complete);
  for (const std::int64_t s : {1, 100, 4096}) {
    const megatron_constant k = compute_megatron_constant(spec, s);
    EXPECT_DOUBLE_EQ(b.flops(static_cast<double>(s), 0), k.text_per_token() * static_cast<double>(s)) << s;
  }
}

}  // namespace flopmeter::detail
