// Tests of the recursive-doubling schedule and its run (plugin/comm/recursive_doubling.h): every rank a thread
// of this process, messages through in-process mailboxes, so the schedule's pairing is exercised with real
// concurrency (a send that no rank receives, or a receive that no rank sends, hangs the test and the deadline
// below fails it). The c10d version over real Gloo ranks is in test_c10d_communicator.cpp.
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
#include <thread>
#include <utility>
#include <vector>

#include "flopmeter/error.h"
#include "comm/recursive_doubling.h"

namespace {

using flopmeter::detail::combine_sum_max;
using flopmeter::detail::doubling_action;
using flopmeter::detail::recursive_doubling_rounds;
using flopmeter::detail::recursive_doubling_schedule;
using flopmeter::detail::run_recursive_doubling;

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

class mailbox_transport final : public flopmeter::detail::doubling_transport {
 public:
  mailbox_transport(mailboxes& boxes, int rank) : boxes_(boxes), rank_(rank) {}
  void send(int peer, const double* values, std::size_t count) override {
    peers.insert(peer);
    ++messages_sent;
    boxes_.put(rank_, peer, std::vector<double>(values, values + count));
  }
  void receive(int peer, double* values, std::size_t count) override {
    peers.insert(peer);
    const std::vector<double> message = boxes_.take(peer, rank_);
    ASSERT_EQ(message.size(), count);
    std::memcpy(values, message.data(), count * sizeof(double));
  }
  void exchange(int peer, const double* out, double* in, std::size_t count) override {
    send(peer, out, count);
    receive(peer, in, count);
  }
  std::set<int> peers;
  int messages_sent = 0;

 private:
  mailboxes& boxes_;
  int rank_;
};

struct run_result {
  std::vector<std::vector<double>> values;  // per rank, after the run
  std::vector<std::set<int>> peers;         // per rank, the ranks it exchanged with
  std::vector<int> messages_sent;
};

// Runs every rank of `world` on its own thread with inputs[r] and returns what each holds afterwards.
run_result run_all(int world, const std::vector<std::vector<double>>& inputs, std::size_t sum_count,
                   std::size_t max_count) {
  mailboxes boxes;
  run_result result;
  result.values = inputs;
  result.peers.resize(static_cast<std::size_t>(world));
  result.messages_sent.resize(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  std::vector<std::string> failures(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      mailbox_transport transport(boxes, r);
      try {
        run_recursive_doubling(transport, r, world, result.values[static_cast<std::size_t>(r)].data(), sum_count,
                               max_count);
      } catch (const std::exception& e) {
        failures[static_cast<std::size_t>(r)] = e.what();
      }
      result.peers[static_cast<std::size_t>(r)] = transport.peers;
      result.messages_sent[static_cast<std::size_t>(r)] = transport.messages_sent;
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

TEST(RecursiveDoubling, RoundsAreTheFloorOfLog2PlusTwoForAWorldThatIsNotAPowerOfTwo) {
  // By hand: 1 -> 0; 2 -> 1; 3 -> 1 + 2 = 3; 4 -> 2; 5, 6, 7 -> 2 + 2 = 4; 8 -> 3; 9 -> 3 + 2 = 5;
  // 16 -> 4; 17 -> 6; 131072 = 2^17 -> 17; 100000 (2^16 = 65536 <= 100000 < 2^17) -> 16 + 2 = 18.
  const std::vector<std::pair<int, int>> expected = {{1, 0},  {2, 1},       {3, 3},      {4, 2}, {5, 4},
                                                     {6, 4},  {7, 4},       {8, 3},      {9, 5}, {16, 4},
                                                     {17, 6}, {131072, 17}, {100000, 18}};
  for (const auto& [world, rounds] : expected) {
    EXPECT_EQ(recursive_doubling_rounds(world), rounds) << "world " << world;
    EXPECT_EQ(recursive_doubling_schedule(0, world).size(), static_cast<std::size_t>(rounds)) << "world " << world;
  }
}

TEST(RecursiveDoubling, EveryRoundPairsASendWithAReceive) {
  // In each round, rank r's step names peer p exactly when p's step names r, with matching actions.
  for (int world : kWorlds) {
    std::vector<std::vector<flopmeter::detail::doubling_step>> steps;
    for (int r = 0; r < world; ++r) steps.push_back(recursive_doubling_schedule(r, world));
    for (int round = 0; round < recursive_doubling_rounds(world); ++round) {
      for (int r = 0; r < world; ++r) {
        const auto& s = steps[static_cast<std::size_t>(r)][static_cast<std::size_t>(round)];
        if (s.action == doubling_action::idle) continue;
        ASSERT_GE(s.peer, 0);
        ASSERT_LT(s.peer, world);
        const auto& t = steps[static_cast<std::size_t>(s.peer)][static_cast<std::size_t>(round)];
        EXPECT_EQ(t.peer, r) << "world " << world << " round " << round << " rank " << r;
        const auto partner = [](doubling_action a) {
          switch (a) {
            case doubling_action::send_partial: return doubling_action::receive_and_combine;
            case doubling_action::receive_and_combine: return doubling_action::send_partial;
            case doubling_action::send_result: return doubling_action::receive_result;
            case doubling_action::receive_result: return doubling_action::send_result;
            default: return a;
          }
        };
        EXPECT_EQ(t.action, partner(s.action)) << "world " << world << " round " << round << " rank " << r;
      }
    }
  }
}

TEST(RecursiveDoubling, SumAndMaxEqualThePlainReductionForEveryWorldUpTo33) {
  // Rank r contributes, at sum index i (4 of them), r * 7 + i: integers, so every order of addition gives the
  // exact sum 7 * (0 + ... + (world - 1)) + world * i = 7 world (world - 1) / 2 + world i. MAX part: r, -r,
  // (r * 5) % world (a permutation's maximum when 5 and world share no factor, else still <= world - 1), and
  // 100 - (r - world / 2)^2, whose maximum is by hand 100 at r = world / 2.
  for (int world : kWorlds) {
    std::vector<std::vector<double>> inputs;
    for (int r = 0; r < world; ++r) {
      const double x = r;
      const double centred = r - world / 2;
      inputs.push_back({7 * x, 7 * x + 1, 7 * x + 2, 7 * x + 3, x, -x, static_cast<double>((r * 5) % world),
                        100 - centred * centred});
    }
    const run_result out = run_all(world, inputs, 4, 4);
    double expected_max_perm = 0;
    for (int r = 0; r < world; ++r)
      expected_max_perm = std::max(expected_max_perm, static_cast<double>((r * 5) % world));
    const double w = world;
    const std::vector<double> expected = {7 * w * (w - 1) / 2,
                                          7 * w * (w - 1) / 2 + w,
                                          7 * w * (w - 1) / 2 + 2 * w,
                                          7 * w * (w - 1) / 2 + 3 * w,
                                          w - 1,
                                          0,
                                          expected_max_perm,
                                          100};
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(out.values[static_cast<std::size_t>(r)], expected) << "world " << world << " rank " << r;
    }
  }
}

TEST(RecursiveDoubling, EveryRankHoldsTheSameBitsForRandomDoubles) {
  // Random doubles of mixed magnitudes: the sums depend on the order of addition, but every rank must end with
  // the same bits (both partners combine the same two vectors; the ranks that sat out receive the result),
  // and within a few ulps of the plain sum in rank order. The maximum is exact.
  std::uint64_t state = 0x243f6a8885a308d3ull;
  const auto next = [&state] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  for (int world : kWorlds) {
    std::vector<std::vector<double>> inputs(static_cast<std::size_t>(world));
    std::vector<double> plain(6, 0.0);
    for (int i = 3; i < 6; ++i) plain[static_cast<std::size_t>(i)] = -std::numeric_limits<double>::infinity();
    for (int r = 0; r < world; ++r) {
      for (int i = 0; i < 6; ++i) {
        const double v = static_cast<double>(next() % 1000003) * std::pow(10.0, static_cast<int>(next() % 9) - 4);
        inputs[static_cast<std::size_t>(r)].push_back(next() % 2 ? v : -v);
      }
      for (int i = 0; i < 3; ++i)
        plain[static_cast<std::size_t>(i)] += inputs[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)];
      for (int i = 3; i < 6; ++i) {
        plain[static_cast<std::size_t>(i)] = std::max(plain[static_cast<std::size_t>(i)],
                                                      inputs[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)]);
      }
    }
    const run_result out = run_all(world, inputs, 3, 3);
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(std::memcmp(out.values[static_cast<std::size_t>(r)].data(), out.values[0].data(), 6 * sizeof(double)),
                0)
          << "world " << world << ": rank " << r << " differs from rank 0";
    }
    for (int i = 0; i < 3; ++i) {
      EXPECT_NEAR(out.values[0][static_cast<std::size_t>(i)], plain[static_cast<std::size_t>(i)],
                  1e-9 * std::abs(plain[static_cast<std::size_t>(i)]) + 1e-9)
          << "world " << world << " sum " << i;
    }
    for (int i = 3; i < 6; ++i)
      EXPECT_EQ(out.values[0][static_cast<std::size_t>(i)], plain[static_cast<std::size_t>(i)]);
  }
}

TEST(RecursiveDoubling, EachRankTalksToLog2Peers) {
  // The point of the schedule at scale: with lazily connected Gloo, a rank connects only to the peers it
  // messages. A rank of the doubling talks to log2(pof2) peers, plus its fold partner; one that sat out to one.
  // By hand for world 12 (pof2 8, rem 4): ranks 0, 2, 4, 6 -> 1 peer; 1, 3, 5, 7 -> 3 + 1 = 4; 8..11 -> 3.
  const run_result out = run_all(12, std::vector<std::vector<double>>(12, std::vector<double>{1, 2}), 1, 1);
  for (int r = 0; r < 12; ++r) {
    const std::size_t expected = r < 8 ? (r % 2 == 0 ? 1u : 4u) : 3u;
    EXPECT_EQ(out.peers[static_cast<std::size_t>(r)].size(), expected) << "rank " << r;
    // 1 + ... : sum of 1 over 12 ranks = 12; max of 2 = 2.
    EXPECT_EQ(out.values[static_cast<std::size_t>(r)], (std::vector<double>{12, 2})) << "rank " << r;
  }
}

TEST(RecursiveDoubling, NaNAndSignedZerosCombineTheSameWhicheverSideHoldsThem) {
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
}

TEST(RecursiveDoubling, ARankOutsideTheWorldIsRefused) {
  EXPECT_THROW(recursive_doubling_schedule(3, 3), flopmeter::error);
  EXPECT_THROW(recursive_doubling_schedule(-1, 3), flopmeter::error);
  EXPECT_THROW(recursive_doubling_schedule(0, 0), flopmeter::error);
}

}  // namespace
