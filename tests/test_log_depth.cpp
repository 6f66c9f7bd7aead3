// Tests of the log-depth schedules and their run (plugin/comm/log_depth.h): the all-reduce by recursive halving
// and doubling, the all-gather by recursive doubling. Every rank a thread of this process, messages through
// in-process mailboxes, so the schedule's pairing is exercised with real concurrency (a send that no rank
// receives, or a receive that no rank sends, hangs the test and the deadline below fails it). The c10d
// version over real Gloo ranks is in test_c10d_communicator.cpp (LogDepthGloo.*).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "flopmeter/error.h"
#include "comm/log_depth.h"

namespace {

using flopmeter::detail::combine_sum_max;
using flopmeter::detail::element_range;
using flopmeter::detail::log_depth_allgather_rounds;
using flopmeter::detail::log_depth_allgather_schedule;
using flopmeter::detail::log_depth_allreduce_rounds;
using flopmeter::detail::log_depth_allreduce_schedule;
using flopmeter::detail::log_depth_step;
using flopmeter::detail::run_log_depth_allgather;
using flopmeter::detail::run_log_depth_allreduce;

// Messages from one rank to another, in order. A receive that waits longer than 10 s throws (a schedule that
// pairs wrongly fails instead of hanging).
class mailboxes {
 public:
  void put(int from, int to, std::vector<double> message) {
    std::lock_guard<std::mutex> lock(mutex_);
    boxes_[{from, to}].push_back(std::move(message));
    arrived_.notify_all();
  }
  std::vector<double> take(int from, int to) {
    std::unique_lock<std::mutex> lock(mutex_);
    auto& box = boxes_[{from, to}];
    if (!arrived_.wait_for(lock, std::chrono::seconds(10), [&] { return !box.empty(); })) {
      throw std::runtime_error("rank " + std::to_string(to) + " waited in vain for rank " + std::to_string(from));
    }
    std::vector<double> message = std::move(box.front());
    box.pop_front();
    return message;
  }
  bool all_empty() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [pair, box] : boxes_) {
      if (!box.empty()) return false;
    }
    return true;
  }

 private:
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::map<std::pair<int, int>, std::deque<std::vector<double>>> boxes_;
};

class mailbox_transport final : public flopmeter::detail::log_depth_transport {
 public:
  mailbox_transport(mailboxes& boxes, int rank) : boxes_(boxes), rank_(rank) {}
  void send(int peer, const double* values, std::size_t count) override {
    peers.insert(peer);
    ++messages_sent;
    values_sent += count;
    boxes_.put(rank_, peer, std::vector<double>(values, values + count));
  }
  void receive(int peer, double* values, std::size_t count) override {
    peers.insert(peer);
    const std::vector<double> message = boxes_.take(peer, rank_);
    values_received += count;
    ASSERT_EQ(message.size(), count);
    std::memcpy(values, message.data(), count * sizeof(double));
  }
  void exchange(int peer, const double* out, std::size_t out_count, double* in, std::size_t in_count) override {
    send(peer, out, out_count);
    receive(peer, in, in_count);
  }
  std::set<int> peers;
  int messages_sent = 0;
  std::size_t values_sent = 0;
  std::size_t values_received = 0;

 private:
  mailboxes& boxes_;
  int rank_;
};

struct run_result {
  std::vector<std::vector<double>> values;  // per rank, after the run
  std::vector<std::set<int>> peers;         // per rank, the ranks it exchanged with
  std::vector<int> messages_sent;
  std::vector<std::size_t> values_sent, values_received;
};

// Runs every rank of `world` on its own thread with inputs[r] and returns what each holds afterwards: the
// all-reduce (SUM of the first sum_count, MAX of the next max_count), or with `gather` the all-gather of
// inputs[r] (the result world x inputs[r].size()).
run_result run_all(int world, const std::vector<std::vector<double>>& inputs, std::size_t sum_count,
                   std::size_t max_count, bool gather = false) {
  mailboxes boxes;
  run_result result;
  result.values = inputs;
  result.peers.resize(static_cast<std::size_t>(world));
  result.messages_sent.resize(static_cast<std::size_t>(world));
  result.values_sent.resize(static_cast<std::size_t>(world));
  result.values_received.resize(static_cast<std::size_t>(world));
  if (gather) {
    for (int r = 0; r < world; ++r) {
      result.values[static_cast<std::size_t>(r)].assign(static_cast<std::size_t>(world) * inputs[0].size(), 0.0);
    }
  }
  std::vector<std::thread> threads;
  std::vector<std::string> failures(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      mailbox_transport transport(boxes, r);
      try {
        double* values = result.values[static_cast<std::size_t>(r)].data();
        if (gather) {
          run_log_depth_allgather(transport, r, world, inputs[static_cast<std::size_t>(r)].data(),
                                  inputs[static_cast<std::size_t>(r)].size(), values);
        } else {
          run_log_depth_allreduce(transport, r, world, values, sum_count, max_count);
        }
      } catch (const std::exception& e) {
        failures[static_cast<std::size_t>(r)] = e.what();
      }
      result.peers[static_cast<std::size_t>(r)] = transport.peers;
      result.messages_sent[static_cast<std::size_t>(r)] = transport.messages_sent;
      result.values_sent[static_cast<std::size_t>(r)] = transport.values_sent;
      result.values_received[static_cast<std::size_t>(r)] = transport.values_received;
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) EXPECT_EQ(failures[static_cast<std::size_t>(r)], "") << "rank " << r;
  EXPECT_TRUE(boxes.all_empty()) << "a message was sent that no rank received (world " << world << ")";
  return result;
}

// The worlds tested: every size up to 9 (powers of two and not), and a few larger ones on either side of a
// power of two.
const std::vector<int> kWorlds = {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 15, 16, 17, 31, 32, 33};
// Vector lengths: one element (every level a doubling level), fewer elements than ranks, more, and the
// ordinary log's 71.
const std::vector<std::size_t> kCounts = {1, 2, 3, 5, 8, 71};

constexpr element_range kNone{};
element_range range(std::size_t begin, std::size_t end) { return {begin, end}; }
log_depth_step step(int peer, element_range send, element_range receive, bool combine) {
  return {peer, send, receive, combine};
}

void expect_steps(const std::vector<log_depth_step>& got, const std::vector<log_depth_step>& want,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const auto show = [](const log_depth_step& s) {
      return "peer " + std::to_string(s.peer) + " send [" + std::to_string(s.send.begin) + "," +
             std::to_string(s.send.end) + ") receive [" + std::to_string(s.receive.begin) + "," +
             std::to_string(s.receive.end) + ")" + (s.combine ? " combine" : " copy");
    };
    const bool same = got[i].peer == want[i].peer && got[i].send == want[i].send && got[i].receive == want[i].receive &&
                      (got[i].peer < 0 || got[i].combine == want[i].combine);
    EXPECT_TRUE(same) << what << " round " << i << ": got " << show(got[i]) << ", want " << show(want[i]);
  }
}

TEST(LogDepthAllreduce, RoundsAreTheHalvingLevelsTwiceAndTheSharedOnesPlusTwoForAFold) {
  // H = min(L, ceil(log2 N)) halving levels (twice: down and back), D = L - H shared levels: D doubling rounds
  // below 4, the tree's 4 D - 2 from 4 on; + 2 when world is not a power of two; L = floor(log2 world). By
  // hand: world 1 -> 0; 2, N 71 -> 2 + 0; 3, N 71 -> 2 + 0 + 2; 4, N 5 -> 4 + 0; 4, N 71 -> 4; 8, N 3 (H 2,
  // D 1) -> 4 + 1; 8, N 1 (H 0, D 3) -> 3; 16, N 1 (D 4) -> 4 x 4 - 2 = 14; 5, N 71 -> 4 + 2; 1024, N 71
  // (H 7, D 3) -> 14 + 3 = 17; 2048 (D 4) -> 14 + 14 = 28; 16384 (D 7) -> 14 + 26 = 40; 131072 = 2^17 (D 10)
  // -> 14 + 38 = 52; 100000 (2^16 <= 100000 < 2^17, D 9) -> 14 + 34 + 2 = 50; N 0 -> 0.
  const std::vector<std::tuple<int, std::size_t, int>> expected = {
      {1, 71, 0},     {2, 71, 2},      {3, 71, 4},       {4, 5, 4},        {4, 71, 4},
      {8, 3, 5},      {8, 1, 3},       {16, 1, 14},      {5, 71, 6},       {1024, 71, 17},
      {2048, 71, 28}, {16384, 71, 40}, {131072, 71, 52}, {100000, 71, 50}, {16, 0, 0}};
  for (const auto& [world, count, rounds] : expected) {
    EXPECT_EQ(log_depth_allreduce_rounds(world, count), rounds) << "world " << world << " N " << count;
    EXPECT_EQ(log_depth_allreduce_schedule(0, world, count).size(), static_cast<std::size_t>(rounds))
        << "world " << world << " N " << count;
  }
}

TEST(LogDepthAllreduce, TheSegmentsOfSmallWorldsAreTheHandDerivedOnes) {
  // World 4, N 5 (log_depth.h's worked example): level 0 splits [0,5) at 2, level 1 splits [0,2) at 1 and
  // [2,5) at 3; the index whose bit is 0 keeps the lower half. The all-gather sends back what was kept.
  const std::vector<std::vector<log_depth_step>> world4 = {
      {step(1, range(2, 5), range(0, 2), true), step(2, range(1, 2), range(0, 1), true),
       step(2, range(0, 1), range(1, 2), false), step(1, range(0, 2), range(2, 5), false)},
      {step(0, range(0, 2), range(2, 5), true), step(3, range(3, 5), range(2, 3), true),
       step(3, range(2, 3), range(3, 5), false), step(0, range(2, 5), range(0, 2), false)},
      {step(3, range(2, 5), range(0, 2), true), step(0, range(0, 1), range(1, 2), true),
       step(0, range(1, 2), range(0, 1), false), step(3, range(0, 2), range(2, 5), false)},
      {step(2, range(0, 2), range(2, 5), true), step(1, range(2, 3), range(3, 5), true),
       step(1, range(3, 5), range(2, 3), false), step(2, range(2, 5), range(0, 2), false)}};
  for (int r = 0; r < 4; ++r) {
    expect_steps(log_depth_allreduce_schedule(r, 4, 5), world4[static_cast<std::size_t>(r)],
                 "world 4 N 5 rank " + std::to_string(r));
  }
  // World 3, N 5 (pof2 2, rem 1): rank 0 folds into rank 1 and sits out; rank 1 is index 0, rank 2 index 1;
  // one halving level at 2, its all-gather, then rank 1 hands the result to rank 0.
  const log_depth_step idle{};
  const std::vector<std::vector<log_depth_step>> world3 = {
      {step(1, range(0, 5), kNone, false), idle, idle, step(1, kNone, range(0, 5), false)},
      {step(0, kNone, range(0, 5), true), step(2, range(2, 5), range(0, 2), true),
       step(2, range(0, 2), range(2, 5), false), step(0, range(0, 5), kNone, false)},
      {idle, step(1, range(0, 2), range(2, 5), true), step(1, range(2, 5), range(0, 2), false), idle}};
  for (int r = 0; r < 3; ++r) {
    expect_steps(log_depth_allreduce_schedule(r, 3, 5), world3[static_cast<std::size_t>(r)],
                 "world 3 N 5 rank " + std::to_string(r));
  }
  // World 8, N 3 (L 3, ceil(log2 3) = 2): level 0 splits [0,3) at 1; the even indices then hold one element
  // [0,1) and double at levels 1 and 2; the odd ones split [1,3) at 2 at level 1 and double at level 2. The
  // all-gather has levels 1 and 0 only; the even ranks sit level 1 out (they never split there).
  expect_steps(log_depth_allreduce_schedule(0, 8, 3),
               {step(1, range(1, 3), range(0, 1), true), step(2, range(0, 1), range(0, 1), true),
                step(4, range(0, 1), range(0, 1), true), idle, step(1, range(0, 1), range(1, 3), false)},
               "world 8 N 3 rank 0");
  expect_steps(log_depth_allreduce_schedule(3, 8, 3),
               {step(2, range(0, 1), range(1, 3), true), step(1, range(1, 2), range(2, 3), true),
                step(7, range(2, 3), range(2, 3), true), step(1, range(2, 3), range(1, 2), false),
                step(2, range(1, 3), range(0, 1), false)},
               "world 8 N 3 rank 3");
  // World 16, N 1: no halving level and 4 shared ones, so the binary tree of log_depth.h's worked example,
  // 14 rounds: reduce (depth 4 left; 3 left, right; 2 left, right; 1 left, right), then broadcast (1 left,
  // right; 2 left, right; 3 left, right; 4 left). Rank 3 (children 7 and 8, parent 1), rank 7 (child 15,
  // parent 3), rank 15 (a leaf, parent 7) and rank 0 (the root, children 1 and 2).
  const element_range one = range(0, 1);
  expect_steps(
      log_depth_allreduce_schedule(3, 16, 1),
      {idle, step(7, kNone, one, true), step(8, kNone, one, true), step(1, one, kNone, false), idle, idle, idle, idle,
       idle, step(1, kNone, one, false), idle, step(7, one, kNone, false), step(8, one, kNone, false), idle},
      "world 16 N 1 rank 3");
  expect_steps(log_depth_allreduce_schedule(7, 16, 1),
               {step(15, kNone, one, true), step(3, one, kNone, false), idle, idle, idle, idle, idle, idle, idle, idle,
                idle, step(3, kNone, one, false), idle, step(15, one, kNone, false)},
               "world 16 N 1 rank 7");
  expect_steps(log_depth_allreduce_schedule(15, 16, 1),
               {step(7, one, kNone, false), idle, idle, idle, idle, idle, idle, idle, idle, idle, idle, idle, idle,
                step(7, kNone, one, false)},
               "world 16 N 1 rank 15");
  expect_steps(log_depth_allreduce_schedule(0, 16, 1),
               {idle, idle, idle, idle, idle, step(1, kNone, one, true), step(2, kNone, one, true),
                step(1, one, kNone, false), step(2, one, kNone, false), idle, idle, idle, idle, idle},
               "world 16 N 1 rank 0");
}

// In each round, rank r's step names peer p exactly when p's names r, and what r sends is what p receives.
void expect_paired(const std::vector<std::vector<log_depth_step>>& steps, const std::string& what) {
  const std::size_t rounds = steps.empty() ? 0 : steps[0].size();
  for (std::size_t r = 0; r < steps.size(); ++r) ASSERT_EQ(steps[r].size(), rounds) << what << " rank " << r;
  for (std::size_t round = 0; round < rounds; ++round) {
    for (std::size_t r = 0; r < steps.size(); ++r) {
      const log_depth_step& s = steps[r][round];
      if (s.peer < 0) continue;
      ASSERT_LT(static_cast<std::size_t>(s.peer), steps.size()) << what;
      const log_depth_step& t = steps[static_cast<std::size_t>(s.peer)][round];
      EXPECT_EQ(t.peer, static_cast<int>(r)) << what << " round " << round << " rank " << r;
      EXPECT_TRUE(s.send == t.receive && s.receive == t.send) << what << " round " << round << " rank " << r;
      EXPECT_FALSE(s.send.empty() && s.receive.empty()) << what << " round " << round << " rank " << r;
    }
  }
}

TEST(LogDepthAllreduce, EveryRoundPairsASendWithAReceiveOfTheSameRange) {
  for (int world : kWorlds) {
    for (std::size_t count : kCounts) {
      std::vector<std::vector<log_depth_step>> steps;
      for (int r = 0; r < world; ++r) steps.push_back(log_depth_allreduce_schedule(r, world, count));
      expect_paired(steps, "world " + std::to_string(world) + " N " + std::to_string(count));
    }
  }
}

TEST(LogDepthAllreduce, SumAndMaxEqualThePlainReductionForEveryWorldUpTo33AndEveryLength) {
  // Rank r contributes, at sum index i, 7 r + i: integers, so every order of addition gives the exact sum
  // 7 (0 + ... + (world - 1)) + world i = 7 world (world - 1) / 2 + world i. MAX index j (from 0) holds
  // r + j, -r - j and 100 - (r - world / 2)^2 in turn, whose maxima are by hand world - 1 + j, -j and 100.
  for (int world : kWorlds) {
    for (std::size_t count : kCounts) {
      const std::size_t sum_count = count / 2;
      const std::size_t max_count = count - sum_count;
      std::vector<std::vector<double>> inputs;
      for (int r = 0; r < world; ++r) {
        std::vector<double> v;
        for (std::size_t i = 0; i < sum_count; ++i) v.push_back(7.0 * r + static_cast<double>(i));
        for (std::size_t j = 0; j < max_count; ++j) {
          const double centred = r - world / 2;
          const double jj = static_cast<double>(j);
          v.push_back(j % 3 == 0 ? r + jj : j % 3 == 1 ? -r - jj : 100 - centred * centred);
        }
        inputs.push_back(v);
      }
      const double w = world;
      std::vector<double> expected;
      for (std::size_t i = 0; i < sum_count; ++i) expected.push_back(7 * w * (w - 1) / 2 + w * static_cast<double>(i));
      for (std::size_t j = 0; j < max_count; ++j) {
        const double jj = static_cast<double>(j);
        expected.push_back(j % 3 == 0 ? w - 1 + jj : j % 3 == 1 ? -jj : 100);
      }
      const run_result out = run_all(world, inputs, sum_count, max_count);
      for (int r = 0; r < world; ++r) {
        EXPECT_EQ(out.values[static_cast<std::size_t>(r)], expected)
            << "world " << world << " N " << count << " rank " << r;
      }
    }
  }
}

TEST(LogDepthAllreduce, EveryRankHoldsTheSameBitsForRandomDoubles) {
  // Random doubles of mixed magnitudes: the sums depend on the order of addition, but every rank must end with
  // the same bits (each element is reduced by one chain of ranks, its owners combine symmetrically, the
  // others receive copies), and within a few ulps of the plain sum in rank order. The maximum is exact.
  std::uint64_t state = 0x243f6a8885a308d3ull;
  const auto next = [&state] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  for (int world : kWorlds) {
    for (const std::size_t half : {std::size_t{1}, std::size_t{3}, std::size_t{36}}) {
      const std::size_t count = 2 * half;
      std::vector<std::vector<double>> inputs(static_cast<std::size_t>(world));
      std::vector<double> plain(count, 0.0);
      for (std::size_t i = half; i < count; ++i) plain[i] = -std::numeric_limits<double>::infinity();
      for (int r = 0; r < world; ++r) {
        auto& in = inputs[static_cast<std::size_t>(r)];
        for (std::size_t i = 0; i < count; ++i) {
          const double v = static_cast<double>(next() % 1000003) * std::pow(10.0, static_cast<int>(next() % 9) - 4);
          in.push_back(next() % 2 ? v : -v);
        }
        for (std::size_t i = 0; i < half; ++i) plain[i] += in[i];
        for (std::size_t i = half; i < count; ++i) plain[i] = std::max(plain[i], in[i]);
      }
      const run_result out = run_all(world, inputs, half, half);
      for (int r = 0; r < world; ++r) {
        EXPECT_EQ(
            std::memcmp(out.values[static_cast<std::size_t>(r)].data(), out.values[0].data(), count * sizeof(double)),
            0)
            << "world " << world << " N " << count << ": rank " << r << " differs from rank 0";
      }
      for (std::size_t i = 0; i < half; ++i) {
        EXPECT_NEAR(out.values[0][i], plain[i], 1e-9 * std::abs(plain[i]) + 1e-9) << "world " << world << " sum " << i;
      }
      for (std::size_t i = half; i < count; ++i) EXPECT_EQ(out.values[0][i], plain[i]);
    }
  }
}

// The elements rank `rank` sends and receives in the all-reduce of `count` over `world`, from its schedule.
std::pair<std::size_t, std::size_t> elements_moved(int rank, int world, std::size_t count) {
  std::size_t sent = 0, received = 0;
  for (const log_depth_step& s : log_depth_allreduce_schedule(rank, world, count)) {
    sent += s.send.size();
    received += s.receive.size();
  }
  return {sent, received};
}

TEST(LogDepthAllreduce, BytesPerRankDoNotGrowWithTheWorld) {
  // log_depth.h's bound for N = 71: the rank whose segments are the upper halves (71, 36, 18, 9, 5, 3, 2, 1)
  // sends (71 - 1) + (36 + 18 + 9 + 5 + 3 + 2 + 1) = 144 elements over the 7 halving levels and their
  // all-gather; beyond them 1 per doubling level up to 3 shared levels, and at most 3 in the tree from 4 on
  // (an inner member: its parent once, its 2 children once each). So at most 144 + 3 = 147 (1,176 B) at
  // 1024 = 2^10 (3 doubling levels), 2048, 16384 = 2^14 and 131072 = 2^17 alike, and received likewise.
  // Plain recursive doubling sent 71 L: 710, 994, 1207. 100000 (L 16, rem 34464): index 255 (the upper path,
  // tree member 1: two children and a parent) is rank 2 x 255 + 1 = 511, which folds: 147 + 71 (its
  // fold-out) = 218; index 127 (rank 255), the tree's root (two children, no parent), 144 + 2 + 71 = 217.
  const std::vector<std::pair<int, std::size_t>> expected = {
      {1024, 147}, {2048, 147}, {16384, 147}, {131072, 147}, {100000, 218}};
  for (const auto& [world, most] : expected) {
    std::size_t most_sent = 0, most_received = 0;
    for (int r = 0; r < world; ++r) {
      const auto [sent, received] = elements_moved(r, world, 71);
      most_sent = std::max(most_sent, sent);
      most_received = std::max(most_received, received);
    }
    EXPECT_EQ(most_sent, most) << "world " << world;
    EXPECT_EQ(most_received, most) << "world " << world;
  }
  EXPECT_EQ(elements_moved(511, 100000, 71).first, 218u);
  EXPECT_EQ(elements_moved(255, 100000, 71).first, 217u);
}

TEST(LogDepthAllreduce, EachRankTalksToLog2Peers) {
  // The point of the schedule at scale: with lazily connected Gloo, a rank connects only to the peers it
  // messages. A rank of the halving and doubling talks to log2(pof2) peers, plus its fold partner; one that
  // sat out to one. By hand for world 12 (pof2 8, rem 4): ranks 0, 2, 4, 6 -> 1 peer; 1, 3, 5, 7 -> 3 + 1 =
  // 4; 8..11 -> 3.
  const run_result out = run_all(12, std::vector<std::vector<double>>(12, std::vector<double>{1, 2}), 1, 1);
  for (int r = 0; r < 12; ++r) {
    const std::size_t expected = r < 8 ? (r % 2 == 0 ? 1u : 4u) : 3u;
    EXPECT_EQ(out.peers[static_cast<std::size_t>(r)].size(), expected) << "rank " << r;
    // 1 + ... : sum of 1 over 12 ranks = 12; max of 2 = 2.
    EXPECT_EQ(out.values[static_cast<std::size_t>(r)], (std::vector<double>{12, 2})) << "rank " << r;
  }
}

TEST(LogDepthAllreduce, NaNAndSignedZerosCombineTheSameWhicheverSideHoldsThem) {
  // combine(a, b) and combine(b, a) must agree bit for bit, or two partners would end with different bits.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<std::pair<double, double>> cases = {{0.0, -0.0}, {-0.0, 0.0},  {nan, 1.0},
                                                        {1.0, nan},  {-1.0, -2.0}, {-0.0, -0.0}};
  for (const auto& [a, b] : cases) {
    double ab[2] = {a, a}, ba[2] = {b, b};
    const double b_copy[2] = {b, b}, a_copy[2] = {a, a};
    combine_sum_max(ab, b_copy, 1, 1);
    combine_sum_max(ba, a_copy, 1, 1);
    EXPECT_EQ(std::memcmp(ab, ba, sizeof ab), 0) << a << " and " << b;
  }
  double zeros[1] = {-0.0};
  const double positive_zero[1] = {0.0};
  combine_sum_max(zeros, positive_zero, 0, 1);
  EXPECT_FALSE(std::signbit(zeros[0])) << "of -0 and +0 the maximum is +0";
  double with_nan[1] = {3.0};
  const double nan_in[1] = {nan};
  combine_sum_max(with_nan, nan_in, 0, 1);
  EXPECT_TRUE(std::isnan(with_nan[0])) << "a NaN must not vanish in the maximum";
  // combine_sum_max_from: element first_index + j adds below sum_count. Elements 2 and 3 of a vector with
  // sum_count 3: element 2 adds (1 + 5 = 6), element 3 takes the maximum (max(4, 2) = 4).
  double part[2] = {1, 4};
  const double other[2] = {5, 2};
  flopmeter::detail::combine_sum_max_from(part, other, 2, 2, 3);
  EXPECT_EQ(part[0], 6);
  EXPECT_EQ(part[1], 4);
}

TEST(LogDepthAllreduce, ARankOutsideTheWorldIsRefused) {
  EXPECT_THROW(log_depth_allreduce_schedule(3, 3, 5), flopmeter::error);
  EXPECT_THROW(log_depth_allreduce_schedule(-1, 3, 5), flopmeter::error);
  EXPECT_THROW(log_depth_allreduce_schedule(0, 0, 5), flopmeter::error);
  EXPECT_THROW(log_depth_allgather_schedule(3, 3, 5), flopmeter::error);
  EXPECT_THROW(log_depth_allgather_schedule(0, 0, 5), flopmeter::error);
}

// ---- the all-gather (the per-rank table) ----

TEST(LogDepthAllgather, RoundsAreLog2WorldPlusTwoForAFold) {
  // floor(log2 world) + 2 when world is not a power of two: 1 -> 0, 2 -> 1, 3 -> 3, 4 -> 2, 5 -> 4, 8 -> 3,
  // 12 -> 5, 131072 -> 17, 100000 -> 18. (c10d's ring all-gather: world - 1.)
  const std::vector<std::pair<int, int>> expected = {{1, 0}, {2, 1},  {3, 3},       {4, 2},      {5, 4},
                                                     {8, 3}, {12, 5}, {131072, 17}, {100000, 18}};
  for (const auto& [world, rounds] : expected) {
    EXPECT_EQ(log_depth_allgather_rounds(world), rounds) << "world " << world;
    EXPECT_EQ(log_depth_allgather_schedule(0, world, 2).size(), static_cast<std::size_t>(rounds)) << "world " << world;
  }
}

TEST(LogDepthAllgather, TheBlocksOfSmallWorldsAreTheHandDerivedOnes) {
  // World 3, 2 values per rank (pof2 2, rem 1): rank 0 hands its block [0,2) to rank 1 and sits out; rank 1
  // (index 0, standing for ranks 0 and 1: [0,4)) swaps with rank 2 (index 1: [4,6)); rank 1 hands the table
  // [0,6) to rank 0.
  const log_depth_step idle{};
  expect_steps(log_depth_allgather_schedule(0, 3, 2),
               {step(1, range(0, 2), kNone, false), idle, step(1, kNone, range(0, 6), false)}, "world 3 rank 0");
  expect_steps(log_depth_allgather_schedule(1, 3, 2),
               {step(0, kNone, range(0, 2), false), step(2, range(0, 4), range(4, 6), false),
                step(0, range(0, 6), kNone, false)},
               "world 3 rank 1");
  expect_steps(log_depth_allgather_schedule(2, 3, 2), {idle, step(1, range(4, 6), range(0, 4), false), idle},
               "world 3 rank 2");
  // World 5, 1 value per rank (pof2 4, rem 1): index 0 is rank 1 (ranks 0 and 1), indices 1, 2, 3 are ranks 2,
  // 3, 4. Rank 1 swaps [0,2) for [2,3) with rank 2 (distance 1), then [0,3) for [3,5) with rank 3 (distance 2).
  expect_steps(log_depth_allgather_schedule(1, 5, 1),
               {step(0, kNone, range(0, 1), false), step(2, range(0, 2), range(2, 3), false),
                step(3, range(0, 3), range(3, 5), false), step(0, range(0, 5), kNone, false)},
               "world 5 rank 1");
}

TEST(LogDepthAllgather, EveryRoundPairsASendWithAReceiveOfTheSameRange) {
  for (int world : kWorlds) {
    std::vector<std::vector<log_depth_step>> steps;
    for (int r = 0; r < world; ++r) steps.push_back(log_depth_allgather_schedule(r, world, 3));
    expect_paired(steps, "world " + std::to_string(world));
  }
}

TEST(LogDepthAllgather, EveryRankHoldsEveryRanksBlockBitForBit) {
  // Rank r's block of 3: r, -r and r / 7 (not a short binary fraction, and -0 for rank 0's second value:
  // a copy keeps it, a SUM with +0 would not). Every rank's table must hold exactly these bits.
  for (int world : kWorlds) {
    std::vector<std::vector<double>> inputs;
    std::vector<double> expected;
    for (int r = 0; r < world; ++r) {
      inputs.push_back({static_cast<double>(r), -static_cast<double>(r), r / 7.0});
      expected.insert(expected.end(), inputs.back().begin(), inputs.back().end());
    }
    const run_result out = run_all(world, inputs, 0, 0, /*gather=*/true);
    for (int r = 0; r < world; ++r) {
      const auto& got = out.values[static_cast<std::size_t>(r)];
      ASSERT_EQ(got.size(), expected.size());
      EXPECT_EQ(std::memcmp(got.data(), expected.data(), expected.size() * sizeof(double)), 0)
          << "world " << world << " rank " << r;
    }
  }
}

}  // namespace
