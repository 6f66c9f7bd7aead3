// The per-log protocol on its own (plugin/accounting/log_protocol.h): hand-built rows in, a verdict out. No
// plugin, no communicator, no clock. Each test says what the rows hold and derives the verdict by hand.
#include "accounting/log_protocol.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "accounting/row_layout.h"

namespace flopmeter::detail {
namespace {

using namespace std::chrono_literals;
using kind = log_verdict::kind;

// A row of log (step, sequence) with one micro-batch of 10 tokens in 1 s (not a warm-up interval), of a rank
// with the default settings.
std::vector<double> row_of(double step, double sequence, double tokens = 10) {
  std::vector<double> row(kRowFields, 0.0);
  row[row_real_tokens] = tokens;
  row[row_microbatches] = tokens > 0 ? 1 : 0;
  row[row_interval_seconds] = 1;
  row[row_present] = sequence;
  row[row_step] = step;
  row[row_tokens_seen] = tokens;
  write_fingerprint(config_settings{}, row.data());  // the settings of a log_protocol made without any
  return row;
}

// The gathered buffer: the rows one after the other.
std::vector<double> gathered(const std::vector<std::vector<double>>& rows) {
  std::vector<double> out;
  for (const auto& r : rows) out.insert(out.end(), r.begin(), r.end());
  return out;
}

// Rank `rank` of `world` runs one log of `step`: begins it, asks may_start, writes its identity into `sent`.
bool start(log_protocol& p, std::int64_t step, std::vector<double>& sent, bool was_in_flight = false) {
  p.begin_log();
  if (!p.may_start(step, was_in_flight)) return false;
  p.write_identity(sent.data(), step);
  return true;
}

TEST(log_protocol, rows_of_one_log_are_derived_and_the_device_rejections_come_with_them) {
  log_protocol p(1, 2, 20ms);
  std::vector<double> sent = row_of(0, 0);
  ASSERT_TRUE(start(p, 5, sent));
  EXPECT_EQ(sent[row_step], 5.0);
  EXPECT_EQ(sent[row_present], 1.0);  // the first on_log
  std::vector<double> rows = gathered({row_of(5, 1), sent});
  rows[kRowFields + row_device_rejected] = 2;  // this rank's tensor path rejected 2 batches on the device
  const log_verdict v = p.resolve(5, collective_status::done, "", sent.data(), rows.data());
  EXPECT_EQ(v.what, kind::derive);
  EXPECT_EQ(v.device_rejected, 2u);
  EXPECT_EQ(v.skipped_because, "");
  EXPECT_EQ(p.counters().failed_collectives, 0u);
}

TEST(log_protocol, an_interval_before_any_microbatch_is_the_warm_up_and_costs_nothing) {
  log_protocol p(0, 2, 20ms);
  std::vector<double> sent = row_of(0, 0, 0);
  ASSERT_TRUE(start(p, 0, sent));
  const std::vector<double> rows = gathered({sent, row_of(0, 1, 0)});
  EXPECT_EQ(p.resolve(0, collective_status::done, "", sent.data(), rows.data()).what, kind::warm_up);
  // One rank with one token seen: a real interval.
  std::vector<double> next = row_of(0, 0, 0);
  ASSERT_TRUE(start(p, 1, next));
  std::vector<double> later = row_of(1, 2, 0);
  later[row_tokens_seen] = 1;
  const std::vector<double> rows2 = gathered({next, later});
  EXPECT_EQ(p.resolve(1, collective_status::done, "", next.data(), rows2.data()).what, kind::derive);
  EXPECT_EQ(p.counters().skipped_intervals, 0u);
}

TEST(log_protocol, three_failures_back_off_probe_every_16th_log_and_a_completed_probe_resumes) {
  log_protocol p(0, 2, 20ms);
  std::vector<double> sent = row_of(0, 0);
  // Logs 1-3: each collective times out; the third pauses reporting.
  for (std::int64_t step = 1; step <= 3; ++step) {
    ASSERT_TRUE(start(p, step, sent));
    EXPECT_EQ(p.wait_timeout(), 20ms);
    const log_verdict v = p.resolve(step, collective_status::pending, "", sent.data(), nullptr);
    EXPECT_EQ(v.what, kind::lost);
    EXPECT_EQ(v.skipped_because, "the collective did not finish within 20 ms");
    EXPECT_EQ(v.paused.empty(), step < 3) << step;
  }
  EXPECT_TRUE(p.backing_off());
  EXPECT_EQ(p.wait_timeout(), 0ms);
  EXPECT_EQ(p.counters().failed_collectives, 3u);
  // Logs 4-15 start nothing; log 16 (a multiple of kRetryEveryLogs) starts the probe: 12 skipped.
  for (std::int64_t step = 4; step <= 15; ++step) EXPECT_FALSE(start(p, step, sent)) << step;
  ASSERT_TRUE(start(p, 16, sent));
  // Still out at log 17: kept, nothing counted; log 17 starts nothing (one was in flight).
  EXPECT_EQ(p.resolve(16, collective_status::pending, "", sent.data(), nullptr).what, kind::probe_pending);
  EXPECT_FALSE(start(p, 17, sent, /*was_in_flight=*/true));
  // It completes at log 18: reporting resumes with the probe's interval.
  const std::vector<double> rows = gathered({sent, row_of(16, 16)});
  const log_verdict v = p.resolve(16, collective_status::done, "", sent.data(), rows.data());
  EXPECT_EQ(v.what, kind::derive);
  EXPECT_EQ(v.resumed, "flopmeter: reporting resumed: the collective of step 16 completed");
  EXPECT_FALSE(p.backing_off());
  // 3 lost + 12 (logs 4-15) + 1 (log 17) skipped.
  EXPECT_EQ(p.counters().skipped_intervals, 16u);
  EXPECT_EQ(p.counters().failed_collectives, 3u);
}

TEST(log_protocol, rows_no_rank_sent_are_a_lost_collective_that_names_world_size_and_rank) {
  log_protocol p(0, 2, 20ms);
  std::vector<double> sent = row_of(0, 0);
  ASSERT_TRUE(start(p, 1, sent));
  // Two ranks summed into row 0: it reads step 2, log 2 where step 1, log 1 was sent.
  std::vector<double> doubled = sent;
  for (double& x : doubled) x *= 2;
  const std::vector<double> rows = gathered({doubled, row_of(0, 0)});
  const log_verdict v = p.resolve(1, collective_status::done, "", sent.data(), rows.data());
  EXPECT_EQ(v.what, kind::lost);
  EXPECT_EQ(v.skipped_because,
            "the collective returned this rank's own row (rank 0) changed: step 2 and log 2 where step 1 and log 1 "
            "were sent (values no rank sent: the all-reduce or all-gather is broken, or world_size 2 and rank 0 do "
            "not describe its group, every rank with its own index); the interval is discarded");
  // Row 1 left empty (no rank fills it: world_size larger than the group).
  ASSERT_TRUE(start(p, 2, sent));
  const std::vector<double> empty_peer = gathered({sent, std::vector<double>(kRowFields, 0.0)});
  const log_verdict w = p.resolve(2, collective_status::done, "", sent.data(), empty_peer.data());
  EXPECT_EQ(w.what, kind::lost);
  EXPECT_EQ(w.skipped_because.rfind("the collective returned a row for rank 1 that no rank fills that way (step 0, log "
                                    "0) (values no rank sent",
                                    0),
            0u)
      << w.skipped_because;
  EXPECT_EQ(p.counters().out_of_step_intervals, 0u);
  EXPECT_EQ(p.counters().failed_collectives, 2u);
}

TEST(log_protocol, a_rank_behind_the_latest_log_skips_until_it_passes_it_and_adopts_its_sequence) {
  // Rank 0's 9th collective closes step 9, rank 1's closes step 10 (it skipped an on_log). Rank 0 is behind:
  // it starts nothing at its log of step 10 and resumes at step 11 with sequence 9 + 1 = 10, which is rank 1's
  // at its log of step 11.
  log_protocol p(0, 2, 20ms);
  std::vector<double> sent = row_of(0, 0);
  for (std::int64_t step = 1; step <= 9; ++step) ASSERT_TRUE(start(p, step, sent));
  const std::vector<double> rows = gathered({sent, row_of(10, 9)});
  const log_verdict v = p.resolve(9, collective_status::done, "", sent.data(), rows.data());
  EXPECT_EQ(v.what, kind::out_of_step);
  EXPECT_EQ(v.out_of_step,
            "flopmeter: ranks out of step: this rank's row of step 9 met rank 1's of step 10 (a rank skipped or added "
            "an on_log, or issued no collective at some log); the interval is discarded and the ranks get back in "
            "step at the next log they all share");
  EXPECT_FALSE(start(p, 10, sent));
  ASSERT_TRUE(start(p, 11, sent));
  EXPECT_EQ(sent[row_present], 10.0);
  const std::vector<double> again = gathered({sent, row_of(11, 10)});
  EXPECT_EQ(p.resolve(11, collective_status::done, "", sent.data(), again.data()).what, kind::derive);
  EXPECT_EQ(p.counters().out_of_step_intervals, 1u);
  EXPECT_EQ(p.counters().failed_collectives, 1u);
  EXPECT_EQ(p.counters().skipped_intervals, 2u);  // the discarded log 9 and log 10 without a collective
}

TEST(log_protocol, the_rank_at_the_latest_log_carries_on) {
  log_protocol p(1, 2, 20ms);
  std::vector<double> sent = row_of(0, 0);
  for (std::int64_t step = 1; step <= 8; ++step) ASSERT_TRUE(start(p, step, sent));
  ASSERT_TRUE(start(p, 10, sent));  // its 9th log is of step 10
  const std::vector<double> rows = gathered({row_of(9, 9), sent});
  EXPECT_EQ(p.resolve(10, collective_status::done, "", sent.data(), rows.data()).what, kind::out_of_step);
  EXPECT_TRUE(start(p, 11, sent));
  EXPECT_EQ(sent[row_present], 10.0);
  EXPECT_EQ(p.counters().skipped_intervals, 1u);
}

TEST(log_protocol, equal_steps_with_a_sequence_behind_wait_as_many_logs_as_they_are_behind) {
  // Both rows say step 4, but rank 0's is its 3rd log and rank 1's its 4th: rank 0 skips until its sequence
  // passes 4, i.e. its 4th log.
  log_protocol p(0, 2, 20ms);
  std::vector<double> sent = row_of(0, 0);
  for (std::int64_t step = 2; step <= 4; ++step) ASSERT_TRUE(start(p, step, sent));
  const std::vector<double> rows = gathered({sent, row_of(4, 4)});
  EXPECT_EQ(p.resolve(4, collective_status::done, "", sent.data(), rows.data()).what, kind::out_of_step);
  EXPECT_FALSE(start(p, 5, sent));  // sequence 4: not beyond 4
  ASSERT_TRUE(start(p, 6, sent));   // sequence 5
  EXPECT_EQ(sent[row_present], 5.0);
}

TEST(log_protocol, a_collective_that_cannot_start_is_lost_with_the_reason) {
  log_protocol p(0, 1, 20ms);
  std::vector<double> sent = row_of(0, 0);
  ASSERT_TRUE(start(p, 1, sent));
  const log_verdict v = p.could_not_start(1, "no socket");
  EXPECT_EQ(v.what, kind::lost);
  EXPECT_EQ(v.skipped_because, "could not start the collective: no socket");
  EXPECT_EQ(p.counters().failed_collectives, 1u);
  EXPECT_EQ(p.counters().skipped_intervals, 1u);
  const log_verdict failed = p.resolve(1, collective_status::failed, "peer closed", sent.data(), nullptr);
  EXPECT_EQ(failed.skipped_because, "peer closed");
}

TEST(log_protocol, one_row_far_ahead_is_trusted_for_one_log_only) {
  // Rank 1's row of log 5 says step 10^12. Rank 0, behind, skips its log 6 (as for a rank that skipped one
  // on_log) but not the logs up to 10^12: at log 7 it starts again, with the sequence number after that row's
  // (5 + 1 = 6). Before, it skipped every log until its step passed 10^12.
  log_protocol p(0, 2, 20ms);
  std::vector<double> sent = row_of(0, 0);
  for (std::int64_t step = 1; step <= 5; ++step) ASSERT_TRUE(start(p, step, sent));
  const std::vector<double> rows = gathered({sent, row_of(1e12, 5)});
  EXPECT_EQ(p.resolve(5, collective_status::done, "", sent.data(), rows.data()).what, kind::out_of_step);
  EXPECT_FALSE(start(p, 6, sent));
  ASSERT_TRUE(start(p, 7, sent));
  EXPECT_EQ(sent[row_present], 6.0);
  EXPECT_EQ(p.counters().skipped_intervals, 2u);
}

// Two ranks' rows of one log, rank 1's settings changed by `change`.
std::vector<double> rows_with(const std::function<void(config_settings&)>& change) {
  config_settings a;
  a.model_name = "qwen3_vl_2b";
  a.model.dense_per_token = 1000;
  config_settings b = a;
  change(b);
  std::vector<double> r0 = row_of(1, 1), r1 = row_of(1, 1);
  write_fingerprint(a, r0.data());
  write_fingerprint(b, r1.data());
  return gathered({r0, r1});
}

TEST(log_protocol, the_fingerprint_difference_names_the_rank_and_the_setting) {
  EXPECT_EQ(describe_fingerprint_differences(rows_with([](config_settings&) {}).data(), 2), "");
  EXPECT_EQ(
      describe_fingerprint_differences(rows_with([](config_settings& s) { s.model_name = "qwen3_vl_4b"; }).data(), 2),
      "rank 1: model qwen3_vl_4b, the others qwen3_vl_2b");
  EXPECT_EQ(
      describe_fingerprint_differences(rows_with([](config_settings& s) { s.scope = flop_scope::seed; }).data(), 2),
      "rank 1: [model] scope seed, the others scope complete");
  EXPECT_EQ(describe_fingerprint_differences(rows_with([](config_settings& s) { s.parallel.cp = 4; }).data(), 2),
            "rank 1: [parallel] cp 4, the others cp 1");
  EXPECT_EQ(
      describe_fingerprint_differences(rows_with([](config_settings& s) { s.rank_order = "pp-dp-cp-tp"; }).data(), 2),
      "rank 1: [parallel] order pp-dp-cp-tp, the others order tp-cp-dp-pp");
  EXPECT_EQ(describe_fingerprint_differences(rows_with([](config_settings& s) { s.tpi_multiplier = 1.5; }).data(), 2),
            "rank 1: [logging] tpi_multiplier 1.5, the others tpi_multiplier 1");
  // The recompute settings change the hardware FLOPs (HFU), not the model's: a setting of their own.
  EXPECT_EQ(describe_fingerprint_differences(
                rows_with([](config_settings& s) { s.regime.recompute.policy = recompute_policy::full; }).data(), 2),
            "rank 1: [training] recompute full, the others recompute none");
  EXPECT_EQ(describe_fingerprint_differences(rows_with([](config_settings& s) {
                                               s.regime.recompute.policy = recompute_policy::selective;
                                               s.regime.recompute.every = 3;
                                               s.regime.recompute.vision = true;
                                             }).data(),
                                             2),
            "rank 1: [training] recompute selective every 3, vision too, the others recompute none");
  EXPECT_EQ(describe_fingerprint_differences(rows_with([](config_settings& s) {
                                               s.regime.recompute.policy = recompute_policy::op;
                                               s.regime.recompute.layers = (std::int64_t{1} << 31) - 1;
                                             }).data(),
                                             2),
            "rank 1: [training] recompute op on the first 2147483647 layers per stage, the others recompute none");
  // Frozen parts and LoRA: the [training] setting.
  EXPECT_EQ(
      describe_fingerprint_differences(rows_with([](config_settings& s) { s.regime.vision_frozen = true; }).data(), 2),
      "rank 1: [training] frozen vision, the others all trains");
  // The same name with other coefficients (another file of that name): told apart by their hashes.
  const std::string other =
      describe_fingerprint_differences(rows_with([](config_settings& s) { s.model.dense_per_token = 2000; }).data(), 2);
  EXPECT_EQ(other.rfind("rank 1: model qwen3_vl_2b (coefficients ", 0), 0u) << other;
  EXPECT_NE(other.find(", the others qwen3_vl_2b (coefficients "), std::string::npos) << other;
}

TEST(log_protocol, more_than_eight_ranks_that_differ_are_listed_eight_then_counted) {
  // 20 ranks: 10 and more load tp 2, ranks 0-9 tp 1: ten against ten, rank 0's value is the others'.
  config_settings a;
  a.model_name = "m";
  config_settings b = a;
  b.parallel.tp = 2;
  std::vector<std::vector<double>> rows;
  for (int r = 0; r < 20; ++r) {
    rows.push_back(row_of(1, 1));
    write_fingerprint(r < 10 ? a : b, rows.back().data());
  }
  EXPECT_EQ(describe_fingerprint_differences(gathered(rows).data(), 20),
            "ranks 10, 11, 12, 13, 14, 15, 16, 17 and 2 more: [parallel] tp 2, the others tp 1");
}

TEST(log_protocol, rows_whose_settings_differ_are_never_derived_and_the_first_says_why) {
  config_settings mine;
  mine.model_name = "qwen3_vl_2b";
  config_settings theirs = mine;
  theirs.model_name = "qwen3_vl_4b";
  log_protocol p(0, 2, 20ms, mine);
  std::vector<double> sent = row_of(0, 0, 0), peer = row_of(0, 0, 0);
  write_fingerprint(theirs, peer.data());
  // The warm-up log already finds it, and says so once; the next logs are refused without a message.
  for (std::int64_t step = 0; step <= 2; ++step) {
    ASSERT_TRUE(start(p, step, sent));
    peer[row_step] = static_cast<double>(step);
    peer[row_present] = sent[row_present];
    const std::vector<double> rows = gathered({sent, peer});
    const log_verdict v = p.resolve(step, collective_status::done, "", sent.data(), rows.data());
    EXPECT_EQ(v.what, kind::config_mismatch) << step;
    EXPECT_EQ(v.config_mismatch.empty(), step > 0) << step;
    if (step == 0) {
      EXPECT_EQ(v.config_mismatch,
                "flopmeter: the ranks loaded different settings, so their rows cannot be summed; no interval is "
                "reported while they differ (every rank must load the same plugin file and model): rank 1: model "
                "qwen3_vl_4b, the others qwen3_vl_2b");
    }
  }
  EXPECT_EQ(p.counters().config_mismatch_intervals, 3u);
  EXPECT_EQ(p.counters().skipped_intervals, 3u);
  EXPECT_EQ(p.counters().failed_collectives, 0u);
}

}  // namespace
}  // namespace flopmeter::detail
