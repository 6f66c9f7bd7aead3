// The fixed-size per-log reduction (plugin/accounting/log_reduction.h) against derivation from the gathered
// rows (derive.h, whose own tests derive every figure by hand): the same rows, contributed rank by rank and
// reduced in rank order in one process, must give every figure of the record but perf_topk/* bit for bit, in
// the same order, and skip the same intervals.
#include "accounting/log_reduction.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "flopmeter/metric_names.h"
#include "accounting/row_layout.h"
#include "support/small_models.h"

namespace flopmeter::detail {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

derive_setup setup_for(std::int64_t world, std::int64_t tp, std::optional<double> peak) {
  derive_setup s;
  s.flop_coefficients = compute_coefficients(testing::small_vlm());
  s.tp = tp;
  for (std::int64_t r = 0; r < world; r += tp) s.dp_group.push_back(r);  // rank 0's DP group, tp-major order
  s.peak_tflops_per_gpu = peak;
  s.tpi_multiplier = 4;
  return s;
}

// A record's value, NaN when absent (metrics_record::find lives with the sinks, not linked here).
double value(const metrics_record& record, const std::string& name) {
  for (const auto& entry : record.values) {
    if (entry.first == name) return entry.second;
  }
  return std::numeric_limits<double>::quiet_NaN();
}

// Every rank's contribution, reduced in rank order (what the simulator's group does).
struct reduced {
  std::vector<double> sums = std::vector<double>(kSumFields), maxima = std::vector<double>(kMaxFields);
};
reduced reduce_rows(const derive_setup& d, const std::vector<double>& rows, std::int64_t world) {
  reduction_setup setup;
  setup.flop_coefficients = d.flop_coefficients;
  setup.scope = d.scope;
  setup.tp = d.tp;
  reduced out;
  reduction_identity(out.sums.data(), out.maxima.data());
  std::vector<double> sums(kSumFields), maxima(kMaxFields);
  for (std::int64_t r = 0; r < world; ++r) {
    setup.in_dp_sums = r % d.tp == 0;
    contribute(setup, rows.data() + r * kRowFields, r, sums.data(), maxima.data());
    reduce_into(sums.data(), maxima.data(), out.sums.data(), out.maxima.data());
  }
  return out;
}

// A random but plausible row: counts of a few documents, some figures reported and some not.
void fill_random_row(std::mt19937_64& rng, double* x) {
  std::uniform_int_distribution<std::int64_t> tokens(0, 5000), small(0, 40);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  batch_counts n;
  n.real_tokens = tokens(rng);
  n.padding_tokens = small(rng);
  n.documents = n.real_tokens > 0 ? 1 + small(rng) % 4 : 0;
  n.causal_pairs = n.real_tokens * (n.real_tokens + 1) / 2 / std::max<std::int64_t>(1, n.documents);
  n.items = small(rng) % 3;
  n.patches = 16 * n.items;
  n.merged_tokens = 4 * n.items;
  n.vision_pairs_per_frame = 256 * n.items;
  n.vision_pairs_whole = 256 * n.items;
  counts_to_row(n, x);
  const auto maybe = [&](double value) { return unit(rng) < 0.7 ? value : kNotReported; };
  x[row_interval_seconds] = 0.5 + unit(rng);
  x[row_microbatches] = unit(rng) < 0.9 ? 1 + static_cast<double>(small(rng) % 5) : 0;
  x[row_label_tokens] = std::floor(static_cast<double>(n.real_tokens) * unit(rng));
  x[row_loss_sum] = x[row_label_tokens] * (1 + unit(rng));
  x[row_peak_memory_bytes] = maybe(std::floor(unit(rng) * 80) * kGiB);
  x[row_peak_reserved_memory_bytes] = maybe(std::floor(unit(rng) * 90) * kGiB);
  x[row_data_seconds] = maybe(unit(rng) * 0.1);
  x[row_forward_backward_seconds] = maybe(unit(rng) * 0.4);
  x[row_log_wait_ms] = unit(rng) < 0.5 ? 0 : unit(rng) * 3;
  x[row_megatron_flops] = unit(rng) < 0.8 ? 1e9 * unit(rng) : 0;
  x[row_tokens_seen] = static_cast<double>(n.real_tokens) + std::floor(unit(rng) * 1e6);
  x[row_samples_seen] = std::floor(unit(rng) * 1e3);
  x[row_label_tokens_seen] = x[row_label_tokens] + std::floor(unit(rng) * 1e5);
  // A running FLOPs total of up to 96 bits in its three 32-bit limbs (flops_seen.h); now and then a rank whose
  // total reached 2^96 (its marker leaves train/flops_seen out, by either collective).
  std::uniform_int_distribution<std::uint64_t> limb(0, 0xFFFFFFFFu);
  x[row_flops_seen_0] = unit(rng) < 0.05 ? kFlopsSeenBeyondRow : static_cast<double>(limb(rng));
  x[row_flops_seen_1] = static_cast<double>(limb(rng));
  x[row_flops_seen_2] = static_cast<double>(limb(rng) >> 8);
  x[row_step] = 7;
  x[row_present] = 3;
}

void expect_same_record(const derive_result& from_rows, const derive_result& from_reduction) {
  ASSERT_EQ(from_rows.derived, from_reduction.derived) << from_rows.why << " / " << from_reduction.why;
  if (!from_rows.derived) return;
  std::vector<std::pair<std::string, double>> expected;
  for (const auto& entry : from_rows.record.values) {
    if (entry.first.rfind("perf_topk/", 0) != 0) expected.push_back(entry);
  }
  ASSERT_EQ(expected.size(), from_reduction.record.values.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(expected[i].first, from_reduction.record.values[i].first);
    // Bit for bit: the same sums in the same order (and 0 added for the ranks outside the DP group).
    EXPECT_EQ(expected[i].second, from_reduction.record.values[i].second) << expected[i].first;
  }
  EXPECT_EQ(from_rows.tokens_seen, from_reduction.tokens_seen);
  EXPECT_EQ(from_rows.samples_seen, from_reduction.samples_seen);
  EXPECT_EQ(from_rows.flops_seen, from_reduction.flops_seen);
  // Left out alike, for the same reason (the rest of the warning may differ: only the table knows which rank).
  const auto flops_why = [](const std::string& warning) {
    const std::size_t at = warning.find("train/flops_seen");
    return at == std::string::npos ? std::string() : warning.substr(at);
  };
  EXPECT_EQ(flops_why(from_rows.warning), flops_why(from_reduction.warning));
  EXPECT_EQ(from_rows.record.step, from_reduction.record.step);
}

TEST(log_reduction, random_rows_give_the_gathered_records_figures_bit_for_bit) {
  std::mt19937_64 rng(29);
  derive_context context;
  context.step = 7;
  context.learning_rate = 1e-4;
  context.log_wait_ms = 0.5;
  int derived = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const std::int64_t tp = trial % 3 == 0 ? 2 : 1;
    const std::int64_t world = tp * (1 + trial % 9);
    const std::optional<double> peak =
        trial % 4 == 0 ? std::nullopt : std::optional<double>(trial % 5 == 0 ? 1e-9 : 1e3);
    std::vector<double> rows(static_cast<std::size_t>(world) * kRowFields, 0.0);
    for (std::int64_t r = 0; r < world; ++r) fill_random_row(rng, rows.data() + r * kRowFields);
    const derive_setup setup = setup_for(world, tp, peak);
    metrics_deriver deriver(setup);
    const derive_result from_rows = deriver.derive(rows.data(), world, context);
    const reduced red = reduce_rows(setup, rows, world);
    SCOPED_TRACE("trial " + std::to_string(trial));
    expect_same_record(from_rows, reduced_record(setup, red.sums.data(), red.maxima.data(), world, context));
    derived += from_rows.derived ? 1 : 0;
  }
  EXPECT_EQ(derived, 200);  // every trial compared figures, not two skipped intervals
}

TEST(log_reduction, tp_replicas_count_once_in_the_data_parallel_sums) {
  // tp 2, dp 2: ranks 0, 1 hold replica 0 (100 real tokens, 5 padding, 2 samples, loss 30 over 10 label
  // tokens), ranks 2, 3 replica 1 (300 tokens, 0 padding, 4 samples, loss 10 over 10), 1 s each. DP sums count
  // each replica once: 400 tokens seen, 6 samples, train/loss (30 + 10) / 20 = 2, batch efficiency 400 / 405,
  // train/max_loss = 30 / 10 = 3. tokens/s: each rank 1/2 of its replica's tokens: 50 + 50 + 150 + 150 = 400.
  const std::int64_t world = 4;
  std::vector<double> rows(world * kRowFields, 0.0);
  for (std::int64_t r = 0; r < world; ++r) {
    double* x = rows.data() + r * kRowFields;
    const bool first = r < 2;
    batch_counts n;
    n.real_tokens = first ? 100 : 300;
    n.padding_tokens = first ? 5 : 0;
    n.documents = 1;
    counts_to_row(n, x);
    x[row_interval_seconds] = 1;
    x[row_microbatches] = 1;
    x[row_loss_sum] = first ? 30 : 10;
    x[row_label_tokens] = 10;
    x[row_tokens_seen] = first ? 100 : 300;
    x[row_samples_seen] = first ? 2 : 4;
    x[row_label_tokens_seen] = 10;
    // Running FLOPs: replica 0 has seen 2^32 + 7 (limbs 7, 1, 0), replica 1 2^33 + 1 (limbs 1, 2, 0).
    x[row_flops_seen_0] = first ? 7 : 1;
    x[row_flops_seen_1] = first ? 1 : 2;
    x[row_peak_memory_bytes] = x[row_peak_reserved_memory_bytes] = x[row_data_seconds] =
        x[row_forward_backward_seconds] = kNotReported;
  }
  const derive_setup setup = setup_for(world, 2, std::nullopt);
  const reduced red = reduce_rows(setup, rows, world);
  const derive_result r = reduced_record(setup, red.sums.data(), red.maxima.data(), world, derive_context{});
  ASSERT_TRUE(r.derived) << r.why;
  EXPECT_EQ(value(r.record, metric::kTokensSeen), 400);
  // Each replica once: 2^32 + 7 + 2^33 + 1 = 3 x 2^32 + 8 = 12,884,901,896 (not twice that: TP ranks share).
  EXPECT_EQ(value(r.record, metric::kFlopsSeen), 12884901896.0);
  EXPECT_EQ(value(r.record, metric::kNumSamples), 6);
  EXPECT_EQ(value(r.record, metric::kLoss), 2);
  EXPECT_EQ(value(r.record, metric::kMaxLoss), 3);
  EXPECT_EQ(value(r.record, metric::kBatchEfficiency), 400.0 / 405.0);
  EXPECT_EQ(value(r.record, metric::kTokensPerSecond), 400);
  EXPECT_TRUE(std::isnan(value(r.record, metric::kMemGib)));  // no rank reported memory
}

TEST(log_reduction, a_row_that_cannot_be_derived_skips_the_interval_and_names_the_first_such_rank) {
  std::mt19937_64 rng(7);
  const std::int64_t world = 6;
  std::vector<double> rows(world * kRowFields, 0.0);
  for (std::int64_t r = 0; r < world; ++r) fill_random_row(rng, rows.data() + r * kRowFields);
  rows[4 * kRowFields + row_real_tokens] = 1.5;     // rank 4: a fractional count
  rows[2 * kRowFields + row_interval_seconds] = 0;  // rank 2: no interval (checked first, and a lower rank)
  const derive_setup setup = setup_for(world, 1, 1e3);
  const reduced red = reduce_rows(setup, rows, world);
  const derive_result r = reduced_record(setup, red.sums.data(), red.maxima.data(), world, derive_context{});
  EXPECT_FALSE(r.derived);
  EXPECT_EQ(r.why, "rank 2 reported an interval that is not a positive finite number of seconds");
  metrics_deriver deriver(setup);
  EXPECT_FALSE(deriver.derive(rows.data(), world, derive_context{}).derived);
  rows[2 * kRowFields + row_interval_seconds] = 1;
  const reduced again = reduce_rows(setup, rows, world);
  EXPECT_EQ(reduced_record(setup, again.sums.data(), again.maxima.data(), world, derive_context{}).why,
            "rank 4 reported a count that is not a finite non-negative integer (a corrupt row)");
}

TEST(log_reduction, agreement_figures_carry_the_steps_sequences_and_fingerprint_ranges) {
  std::mt19937_64 rng(3);
  const std::int64_t world = 5;
  std::vector<double> rows(world * kRowFields, 0.0);
  for (std::int64_t r = 0; r < world; ++r) {
    double* x = rows.data() + r * kRowFields;
    fill_random_row(rng, x);
    x[row_step] = r == 3 ? 9 : 7;
    x[row_present] = r == 1 ? 2 : 3;
    x[row_config_tp] = r == 4 ? 2 : 1;
  }
  const reduced red = reduce_rows(setup_for(world, 1, std::nullopt), rows, world);
  EXPECT_EQ(red.sums[sum_ranks], 5);
  EXPECT_EQ(red.sums[sum_rank_ids], 0 + 1 + 2 + 3 + 4);
  EXPECT_EQ(red.maxima[max_step], 9);
  EXPECT_EQ(red.maxima[neg_min_step], -7);
  EXPECT_EQ(red.maxima[max_sequence], 3);
  EXPECT_EQ(red.maxima[neg_min_sequence], -2);
  EXPECT_EQ(describe_reduced_differences(red.maxima.data()), "[parallel] tp from 1 to 2");
  EXPECT_EQ(red.maxima[max_not_warm_up], 1);
}

}  // namespace
}  // namespace flopmeter::detail
