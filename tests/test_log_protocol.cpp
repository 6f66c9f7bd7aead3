// The per-log protocol on its own (plugin/accounting/log_protocol.h): hand-built rows in, a verdict out. No
// plugin, no communicator, no clock. Each test says what the rows hold and derives the verdict by hand.
#include "accounting/log_protocol.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "accounting/row_layout.h"

namespace flopmeter::detail {
namespace {

using namespace std::chrono_literals;
using kind = log_verdict::kind;

// A row of log (step, sequence) with one micro-batch of 10 tokens in 1 s (not a warm-up interval).
std::vector<double> row_of(double step, double sequence, double tokens = 10) {
  std::vector<double> row(kRowFields, 0.0);
  row[row_real_tokens] = tokens;
  row[row_microbatches] = tokens > 0 ? 1 : 0;
  row[row_interval_seconds] = 1;
  row[row_present] = sequence;
  row[row_step] = step;
  row[row_tokens_seen] = tokens;
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

}  // namespace
}  // namespace flopmeter::detail
