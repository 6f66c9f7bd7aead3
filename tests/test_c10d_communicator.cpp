// Tests of the c10d ProcessGroup adapter (plugin/c10d_communicator.cpp) over real Gloo ranks: four threads
// of this process, each with its own ProcessGroupGloo on 127.0.0.1 (tests/gloo_harness.h), and of the
// environment-driven Gloo factory.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <condition_variable>
#include <mutex>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "flopmeter/c10d.h"
#include "flopmeter/error.h"
#include "flopmeter/throughput.h"
#include "gloo_harness.h"
#include "support/capture_sink.h"
#include "support/ports.h"
#include "support/small_models.h"

namespace {

using flopmeter::collective_status;
using flopmeter::make_c10d_communicator;
using flopmeter::testing::free_port;
using flopmeter_test::gloo_run_options;
using flopmeter_test::run_gloo_ranks;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr int kWorld = 4;
constexpr milliseconds kLongWait{5000};

// Table: what rank r contributes, and the hand-computed sum over r = 0..3.
//   r + 1          -> 1 + 2 + 3 + 4             = 10
//   10 * (r + 1)   -> 10 + 20 + 30 + 40         = 100
//   -r             -> 0 - 1 - 2 - 3             = -6
//   0.5 * r        -> 0 + 0.5 + 1 + 1.5         = 3
//   2^52 + r       -> 4 * 2^52 + 6              = 18014398509481990 (exact in a double: < 2^54, even)
//   r == 2 ? 7 : 0 -> only rank 2 contributes   = 7
std::vector<double> contribution(int r) {
  const double x = r;
  return {x + 1, 10 * (x + 1), -x, 0.5 * x, 4503599627370496.0 + x, r == 2 ? 7.0 : 0.0};
}
const std::vector<double> kExpectedSum = {10, 100, -6, 3, 18014398509481990.0, 7};

// What rank `rank` of a kWorld-rank Gloo job must see: its rank, the world and the backend named, and
// contribution(rank) summed over the job to kExpectedSum, in `values`; `pending` is the finished collective.
// (A fatal failure returns early: callers that go on wrap the call in ASSERT_NO_FATAL_FAILURE.)
void sum_over_the_job(flopmeter::communicator& comm, int rank, std::vector<double>& values,
                      std::unique_ptr<flopmeter::pending_collective>& pending,
                      const std::string& backend = "c10d:gloo") {
  EXPECT_EQ(comm.rank(), rank);
  EXPECT_EQ(comm.world_size(), kWorld);
  EXPECT_EQ(comm.backend_name(), backend);
  values = contribution(rank);
  pending = comm.start_allreduce_sum(values.data(), values.size());
  ASSERT_EQ(pending->wait(kLongWait), collective_status::done) << pending->error_message();
  EXPECT_EQ(values, kExpectedSum);
}

TEST(C10dCommunicator, FourRanksSumDistinctBuffers) {
  run_gloo_ranks(kWorld, [](int rank, c10::intrusive_ptr<c10d::ProcessGroup> group) {
    auto comm = make_c10d_communicator(group);
    std::vector<double> values;
    std::unique_ptr<flopmeter::pending_collective> pending;
    ASSERT_NO_FATAL_FAILURE(sum_over_the_job(*comm, rank, values, pending));
    EXPECT_EQ(pending->error_message(), "");
    // A finished pending keeps answering done and does not copy again.
    values.assign(values.size(), -1.0);
    EXPECT_EQ(pending->wait(milliseconds(0)), collective_status::done);
    EXPECT_EQ(values, std::vector<double>(values.size(), -1.0));
  });
}

TEST(C10dCommunicator, AllGatherPutsEachRanksRowInItsSlot) {
  // Rank r sends contribution(r) (6 values); afterwards every rank holds rank 0's row, then rank 1's, ...
  // Three rounds, so that the buffers are reused; before each round recv is filled with -1 (overwritten).
  run_gloo_ranks(kWorld, [](int rank, c10::intrusive_ptr<c10d::ProcessGroup> group) {
    auto comm = make_c10d_communicator(group);
    std::vector<double> expected;
    for (int r = 0; r < kWorld; ++r) {
      const std::vector<double> row = contribution(r);
      expected.insert(expected.end(), row.begin(), row.end());
    }
    for (int round = 0; round < 3; ++round) {
      const std::vector<double> send = contribution(rank);
      std::vector<double> recv(send.size() * kWorld, -1.0);
      auto pending = comm->start_allgather(send.data(), send.size(), recv.data());
      ASSERT_EQ(pending->wait(kLongWait), collective_status::done) << pending->error_message();
      EXPECT_EQ(recv, expected) << "round " << round;
    }
  });
}

TEST(C10dCommunicator, SumAndMaxOfAnOrdinaryLogRunOnOneBuffer) {
  // values[0, 2) are summed, values[2, 5) maxed. Rank r contributes (r, 1, r, -r, 10 - r): sums 0+1+2+3 = 6
  // and 4; maxima 3, -0 (the largest of 0, -1, -2, -3) and 10. Three rounds: the buffer is reused.
  run_gloo_ranks(kWorld, [](int rank, c10::intrusive_ptr<c10d::ProcessGroup> group) {
    auto comm = make_c10d_communicator(group);
    for (int round = 0; round < 3; ++round) {
      const double r = rank;
      std::vector<double> values = {r, 1, r, -r, 10 - r};
      auto pending = comm->start_allreduce_sum_max(values.data(), 2, 3);
      ASSERT_EQ(pending->wait(kLongWait), collective_status::done) << pending->error_message();
      EXPECT_EQ(values, (std::vector<double>{6, 4, 3, 0, 10})) << "round " << round;
    }
  });
}

TEST(C10dCommunicator, RepeatedCollectivesWithChangingCounts) {
  // Round k, count 1 + k % 3; rank r contributes k * (r + 1) + i at index i.
  // Sum over r: k * (1 + 2 + 3 + 4) + 4 * i = 10k + 4i.
  run_gloo_ranks(kWorld, [](int rank, c10::intrusive_ptr<c10d::ProcessGroup> group) {
    auto comm = make_c10d_communicator(group);
    for (int k = 0; k < 25; ++k) {
      const auto count = static_cast<std::size_t>(1 + k % 3);
      std::vector<double> values(count);
      for (std::size_t i = 0; i < count; ++i) values[i] = k * (rank + 1) + static_cast<double>(i);
      auto pending = comm->start_allreduce_sum(values.data(), values.size());
      ASSERT_EQ(pending->wait(kLongWait), collective_status::done) << "round " << k << ": "
                                                                   << pending->error_message();
      for (std::size_t i = 0; i < count; ++i) {
        EXPECT_EQ(values[i], 10.0 * k + 4.0 * static_cast<double>(i)) << "round " << k << " index " << i;
      }
    }
  });
}

TEST(C10dCommunicator, PendingOwnsACopyOfTheInput) {
  // The values are read at start; the caller's buffer is written only when wait() first returns done.
  run_gloo_ranks(kWorld, [](int rank, c10::intrusive_ptr<c10d::ProcessGroup> group) {
    auto comm = make_c10d_communicator(group);
    std::vector<double> values = contribution(rank);
    auto pending = comm->start_allreduce_sum(values.data(), values.size());
    values.assign(values.size(), 123.0);  // scribble over the buffer while the collective runs
    ASSERT_EQ(pending->wait(kLongWait), collective_status::done) << pending->error_message();
    EXPECT_EQ(values, kExpectedSum);
  });
}

TEST(C10dCommunicator, LateRankGivesPendingThenDone) {
  // Rank 3 starts 600 ms late. The others' short waits report pending and leave the collective running
  // (Gloo's timeout is 5 s here), their buffers untouched; once rank 3 joins, a longer wait reports done.
  run_gloo_ranks(kWorld, [](int rank, c10::intrusive_ptr<c10d::ProcessGroup> group) {
    auto comm = make_c10d_communicator(group);
    std::vector<double> values = contribution(rank);
    if (rank == 3) std::this_thread::sleep_for(milliseconds(600));
    auto pending = comm->start_allreduce_sum(values.data(), values.size());
    if (rank != 3) {
      EXPECT_EQ(pending->wait(milliseconds(0)), collective_status::pending);
      const auto before = steady_clock::now();
      EXPECT_EQ(pending->wait(milliseconds(100)), collective_status::pending);
      EXPECT_GE(steady_clock::now() - before, milliseconds(100));
      EXPECT_EQ(values, contribution(rank));
      EXPECT_EQ(pending->error_message(), "");
    }
    ASSERT_EQ(pending->wait(kLongWait), collective_status::done) << pending->error_message();
    EXPECT_EQ(values, kExpectedSum);
  });
}

TEST(C10dCommunicator, DestroyingAnUnfinishedPendingIsSafe) {
  // Ranks 0-2 start a collective and drop it at once (rank 3 joins 300 ms later): Gloo finishes it in the
  // background without touching the dropped buffer, and the next collective still works and sums right.
  run_gloo_ranks(kWorld, [](int rank, c10::intrusive_ptr<c10d::ProcessGroup> group) {
    auto comm = make_c10d_communicator(group);
    if (rank == 3) std::this_thread::sleep_for(milliseconds(300));
    std::vector<double> first = contribution(rank);
    comm->start_allreduce_sum(first.data(), first.size()).reset();
    first.assign(first.size(), 42.0);
    std::vector<double> second = contribution(rank);
    auto pending = comm->start_allreduce_sum(second.data(), second.size());
    ASSERT_EQ(pending->wait(kLongWait), collective_status::done) << pending->error_message();
    EXPECT_EQ(second, kExpectedSum);
    EXPECT_EQ(first, std::vector<double>(first.size(), 42.0));
  });
}

TEST(C10dCommunicator, SilentPeerGivesFailedWithinGroupTimeout) {
  // Rank 3 stays alive but never joins. With a 1 s Gloo timeout the others' collective fails with a
  // message well within 5 s; wait() neither throws nor writes to the buffer.
  std::atomic<int> others_done{0};
  gloo_run_options options;
  options.group_timeout = milliseconds(1000);
  run_gloo_ranks(
      kWorld,
      [&](int rank, c10::intrusive_ptr<c10d::ProcessGroup> group) {
        auto comm = make_c10d_communicator(group);
        if (rank == 3) {
          while (others_done.load() < kWorld - 1) std::this_thread::sleep_for(milliseconds(5));
          return;
        }
        std::vector<double> values = contribution(rank);
        const auto start = steady_clock::now();
        auto pending = comm->start_allreduce_sum(values.data(), values.size());
        EXPECT_EQ(pending->wait(milliseconds(50)), collective_status::pending);
        collective_status status = collective_status::pending;
        EXPECT_NO_THROW(status = pending->wait(kLongWait));
        EXPECT_EQ(status, collective_status::failed);
        EXPECT_LT(steady_clock::now() - start, milliseconds(4500));
        EXPECT_NE(pending->error_message(), "");
        EXPECT_NE(pending->error_message().find("c10d:gloo all-reduce of 6 values failed: "), std::string::npos)
            << pending->error_message();
        EXPECT_EQ(values, contribution(rank));
        EXPECT_EQ(pending->wait(milliseconds(0)), collective_status::failed);  // sticky
        ++others_done;
      },
      options);
}

TEST(C10dCommunicator, DestroyedPeerGivesFailed) {
  // Rank 3 destroys its group (closing its connections) instead of joining; the others fail fast, long
  // before their 5 s Gloo timeout, with a message and without an exception.
  gloo_run_options options;
  options.keep_groups_until_all_done = false;
  run_gloo_ranks(
      kWorld,
      [&](int rank, c10::intrusive_ptr<c10d::ProcessGroup> group) {
        if (rank == 3) {
          group.reset();
          return;
        }
        auto comm = make_c10d_communicator(std::move(group));
        std::vector<double> values = contribution(rank);
        auto pending = comm->start_allreduce_sum(values.data(), values.size());
        collective_status status = collective_status::pending;
        EXPECT_NO_THROW(status = pending->wait(kLongWait));
        EXPECT_EQ(status, collective_status::failed);
        EXPECT_NE(pending->error_message(), "");
        EXPECT_EQ(values, contribution(rank));
      },
      options);
}

TEST(C10dCommunicator, ZeroCountIsDoneWithoutACollective) {
  // Ranks 0 and 1 pass zero values, with a null pointer; nothing is sent, so the next real collective
  // still pairs up.
  run_gloo_ranks(2, [](int rank, c10::intrusive_ptr<c10d::ProcessGroup> group) {
    auto comm = make_c10d_communicator(group);
    auto empty = comm->start_allreduce_sum(nullptr, 0);
    EXPECT_EQ(empty->wait(milliseconds(0)), collective_status::done);
    double value = rank + 1.0;  // 1 + 2 = 3
    auto pending = comm->start_allreduce_sum(&value, 1);
    ASSERT_EQ(pending->wait(kLongWait), collective_status::done) << pending->error_message();
    EXPECT_EQ(value, 3.0);
  });
}

TEST(C10dCommunicator, SetupErrorsThrowFlopmeterError) {
  EXPECT_THROW(make_c10d_communicator(c10::intrusive_ptr<c10d::ProcessGroup>()), flopmeter::error);
  run_gloo_ranks(1, [](int, c10::intrusive_ptr<c10d::ProcessGroup> group) {
    auto comm = make_c10d_communicator(group);
    EXPECT_THROW(comm->start_allreduce_sum(nullptr, 3), flopmeter::error);
  });
}

// ---- make_gloo_communicator_from_env ----

// Sets (or, with nullopt, unsets) environment variables for one scope and restores them after.
class scoped_env {
 public:
  scoped_env(std::initializer_list<std::pair<const char*, std::optional<std::string>>> vars) {
    for (const auto& [name, value] : vars) {
      const char* old = std::getenv(name);
      saved_.push_back({name, old ? std::optional<std::string>(old) : std::nullopt});
      if (value) {
        ::setenv(name, value->c_str(), 1);
      } else {
        ::unsetenv(name);
      }
    }
  }
  ~scoped_env() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

// Expects make_gloo_communicator_from_env to throw flopmeter::error whose message contains `needle`.
void expect_env_error(const flopmeter::gloo_env_options& options, const std::string& needle) {
  try {
    flopmeter::make_gloo_communicator_from_env(options);
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const flopmeter::error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(GlooFromEnv, MissingOrMalformedVariablesAreNamed) {
  const flopmeter::gloo_env_options options;
  // RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT as set (std::nullopt: unset), and the part of the message
  // that names what is wrong.
  struct env_case {
    std::optional<std::string> rank, world_size, master_addr, master_port;
    const char* message;
  };
  const env_case cases[] = {
      {"0", std::nullopt, "127.0.0.1", "29500", "environment variable WORLD_SIZE is not set"},
      {std::nullopt, "4", "127.0.0.1", "29500", "environment variable RANK is not set"},
      {"0", "4", "", "29500", "environment variable MASTER_ADDR is not set"},
      {"0", "four", "h", "29500", "WORLD_SIZE='four' is not an integer"},
      {"1x", "4", "h", "29500", "RANK='1x' is not an integer"},
      {"4", "4", "h", "29500", "RANK=4 is out of range (must be in [0, WORLD_SIZE) = [0, 4))"},
      {"0", "0", "h", "29500", "WORLD_SIZE=0 is out of range"},
      // Above FLOPMETER_MAX_WORLD_SIZE = 2^20 = 1048576: refused at once, naming the bound, instead of a
      // rendezvous that waits out its timeout for 2,000,000 ranks and then blames a dead peer.
      {"0", "2000000", "h", "29500", "WORLD_SIZE=2000000 is out of range (must be in [1, 1048576], the most ranks"},
      {"0", "99999999999", "h", "29500", "WORLD_SIZE=99999999999 is out of range (must be in [1, 1048576]"},
      {"0", "1", "h", "70000", "MASTER_PORT=70000 is out of range (must be in [1, 65535])"},
  };
  for (const env_case& c : cases) {
    SCOPED_TRACE(c.message);
    scoped_env env({{"RANK", c.rank},
                    {"WORLD_SIZE", c.world_size},
                    {"MASTER_ADDR", c.master_addr},
                    {"MASTER_PORT", c.master_port}});
    expect_env_error(options, c.message);
  }
  {
    scoped_env env({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "65535"}});
    flopmeter::gloo_env_options shifted;
    shifted.store_port_offset = 1;
    expect_env_error(shifted, "store_port_offset=1 = 65536 is not a valid port");
  }
  {
    scoped_env env({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"}});
    flopmeter::gloo_env_options zero;
    zero.timeout = milliseconds(0);
    expect_env_error(zero, "timeout must be in (0, 3600000] ms, got 0");
    flopmeter::gloo_env_options over_an_hour;  // setting_range::max_timeout_ms
    over_an_hour.timeout = milliseconds(3'600'001);
    expect_env_error(over_an_hour, "timeout must be in (0, 3600000] ms, got 3600001");
  }
}

TEST(GlooFromEnv, SingleRankWithItsOwnStoreServer) {
  const int port = free_port();
  ASSERT_GT(port, 0);
  scoped_env env({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "127.0.0.1"},
                  {"MASTER_PORT", std::to_string(port)}, {"GLOO_SOCKET_IFNAME", std::nullopt}});
  flopmeter::gloo_env_options options;
  options.timeout = milliseconds(5000);
  options.start_store_server = true;
  options.gloo_hostname = "127.0.0.1";
  auto comm = flopmeter::make_gloo_communicator_from_env(options);
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->world_size(), 1);
  EXPECT_EQ(comm->backend_name(), "c10d:gloo");
  std::vector<double> values = {1.5, -2.0};  // one rank: the sum is the input
  auto pending = comm->start_allreduce_sum(values.data(), values.size());
  ASSERT_EQ(pending->wait(kLongWait), collective_status::done) << pending->error_message();
  EXPECT_EQ(values, (std::vector<double>{1.5, -2.0}));
}

TEST(GlooFromEnv, UnreachableStoreFailsWithinTheTimeout) {
  const int port = free_port();
  ASSERT_GT(port, 0);
  scoped_env env({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"},
                  {"MASTER_PORT", std::to_string(port)}});
  const auto start = steady_clock::now();
  flopmeter::gloo_env_options options;
  options.timeout = milliseconds(1500);
  // Default options: the trainer's rank 0 should host the store, so the advice is about the trainer's.
  expect_env_error(options, "rank 1 could not reach the TCPStore at 127.0.0.1:" + std::to_string(port) +
                                " (does the trainer host one there? otherwise set start_store_server)");
  EXPECT_LT(steady_clock::now() - start, milliseconds(8000));
  // start_store_server (what the C ABI always sets): flopmeter's own rank 0 should be serving it, and a C
  // trainer has no start_store_server to set, so the advice is about rank 0.
  options.start_store_server = true;
  expect_env_error(options, "rank 1 could not reach the TCPStore at 127.0.0.1:" + std::to_string(port) +
                                " (flopmeter's rank 0 serves it there: is rank 0 running");
}

// ---- Which group: one over the whole job ----

TEST(WhichGroup, AGroupSmallerThanTheJobIsRefusedWithWhatToPass) {
  // The data-parallel group of a dp 2 x tp 2 job: 2 ranks of 4 (WORLD_SIZE=4). Handed to flopmeter it would
  // count half the tokens; it is refused, and the message says what to pass instead.
  scoped_env env({{"WORLD_SIZE", "4"}});
  run_gloo_ranks(2, [](int rank, c10::intrusive_ptr<c10d::ProcessGroup> group) {
    try {
      make_c10d_communicator(group);
      ADD_FAILURE() << "rank " << rank << ": a 2-rank group was accepted in a 4-rank job";
    } catch (const flopmeter::error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("make_c10d_communicator: the group has 2 ranks but the job has 4 (WORLD_SIZE=4)"),
                std::string::npos)
          << what;
      EXPECT_NE(what.find("not the data-parallel group"), std::string::npos) << what;
      EXPECT_NE(what.find("make_gloo_communicator(store, rank, world_size)"), std::string::npos) << what;
    }
  });
}

TEST(WhichGroup, TheJobSizeTheTrainerStatesWinsOverTheEnvironment) {
  scoped_env env({{"WORLD_SIZE", std::nullopt}});
  run_gloo_ranks(2, [](int, c10::intrusive_ptr<c10d::ProcessGroup> group) {
    EXPECT_NO_THROW(make_c10d_communicator(group));  // nothing known: nothing checked
    flopmeter::c10d_options four;
    four.job_world_size = 4;
    try {
      make_c10d_communicator(group, four);
      ADD_FAILURE() << "a 2-rank group was accepted for a stated 4-rank job";
    } catch (const flopmeter::error& e) {
      EXPECT_NE(std::string(e.what()).find("but the job has 4 (job_world_size=4)"), std::string::npos) << e.what();
    }
  });
  scoped_env world2({{"WORLD_SIZE", "2"}});
  run_gloo_ranks(2, [](int, c10::intrusive_ptr<c10d::ProcessGroup> group) {
    EXPECT_NO_THROW(make_c10d_communicator(group));  // the whole job
  });
}

// ---- the log-depth collectives (small_allreduce::log_depth, plugin/comm/c10d_log_depth.cpp) ----

flopmeter::c10d_options log_depth_over(int world) {
  flopmeter::c10d_options options;
  options.job_world_size = world;
  options.allreduce = flopmeter::small_allreduce::log_depth;
  return options;
}

TEST(LogDepthGloo, SumAndMaxEqualGloosOwnAllReduceForOneToNineTwelveAndSixteenRanks) {
  // Rank r, round k contributes (r + k, 3 r + 1, 1) to the SUM and (r, -r, 100 - (r - 2)^2, k - r) to the MAX.
  // By hand over world w: sums w (w - 1) / 2 + k w, 3 w (w - 1) / 2 + w, w; maxima w - 1, 0 (rank 0's -0),
  // 100 when w >= 3 (r = 2), else 100 - 4 = 96 (w = 1) or 100 - 1 = 99 (w = 2), and k. Every value is an
  // integer, so Gloo's ring and recursive halving and doubling, which add in different orders, must give the
  // same bits;
  // each is also checked against the hand value. Three rounds per world (the worker thread reuses its group).
  for (int world : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16}) {
    run_gloo_ranks(world, [world](int rank, c10::intrusive_ptr<c10d::ProcessGroup> group) {
      auto ring = make_c10d_communicator(group, flopmeter::c10d_options{world});
      auto doubling = make_c10d_communicator(group, log_depth_over(world));
      EXPECT_EQ(ring->backend_name(), "c10d:gloo");
      EXPECT_EQ(doubling->backend_name(), world > 1 ? "c10d:gloo+log_depth" : "c10d:gloo");
      // Zero values: done at once, nothing sent, so the rounds below still pair up.
      EXPECT_EQ(doubling->start_allreduce_sum_max(nullptr, 0, 0)->wait(milliseconds(0)), collective_status::done);
      const double w = world;
      const double r = rank;
      for (int round = 0; round < 3; ++round) {
        const double k = round;
        const std::vector<double> input = {r + k, 3 * r + 1, 1, r, -r, 100 - (r - 2) * (r - 2), k - r};
        std::vector<double> by_ring = input, by_doubling = input;
        auto a = ring->start_allreduce_sum_max(by_ring.data(), 3, 4);
        auto b = doubling->start_allreduce_sum_max(by_doubling.data(), 3, 4);
        ASSERT_EQ(a->wait(kLongWait), collective_status::done) << a->error_message();
        ASSERT_EQ(b->wait(kLongWait), collective_status::done) << b->error_message();
        const double third_max = world >= 3 ? 100 : (world == 2 ? 99 : 96);
        const std::vector<double> expected = {
            w * (w - 1) / 2 + k * w, 3 * w * (w - 1) / 2 + w, w, w - 1, 0, third_max, k};
        EXPECT_EQ(by_doubling, expected) << "world " << world << " rank " << rank << " round " << round;
        EXPECT_EQ(by_ring, expected) << "world " << world << " rank " << rank << " round " << round;
      }
    });
  }
}

TEST(LogDepthGloo, AllGatherEqualsGloosOwnBitForBitForOneToNineTwelveAndSixteenRanks) {
  // The per-rank table's all-gather by recursive doubling against c10d's (Gloo's ring): rank r's row of 3 is
  // (r / 7, -r, round + r / 3): -0 at rank 0 (a copy keeps it), fractions with no short binary form. Every
  // rank's table must equal Gloo's bit for bit, and both the rows by hand. Two rounds per world.
  for (int world : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16}) {
    run_gloo_ranks(world, [world](int rank, c10::intrusive_ptr<c10d::ProcessGroup> group) {
      auto ring = make_c10d_communicator(group, flopmeter::c10d_options{world});
      auto log_depth = make_c10d_communicator(group, log_depth_over(world));
      const std::size_t w = static_cast<std::size_t>(world);
      for (int round = 0; round < 2; ++round) {
        const double r = rank;
        const std::vector<double> row = {r / 7, -r, round + r / 3};
        std::vector<double> by_ring(3 * w, 42.0), by_log_depth(3 * w, 42.0);
        auto a = ring->start_allgather(row.data(), 3, by_ring.data());
        ASSERT_EQ(a->wait(kLongWait), collective_status::done) << a->error_message();
        auto b = log_depth->start_allgather(row.data(), 3, by_log_depth.data());
        ASSERT_EQ(b->wait(kLongWait), collective_status::done) << b->error_message();
        EXPECT_EQ(std::memcmp(by_log_depth.data(), by_ring.data(), 3 * w * sizeof(double)), 0)
            << "world " << world << " rank " << rank << " round " << round;
        for (int q = 0; q < world; ++q) {
          const double x = q;
          const std::size_t at = 3 * static_cast<std::size_t>(q);
          EXPECT_EQ(by_log_depth[at], x / 7) << "world " << world << " row " << q;
          EXPECT_EQ(std::signbit(by_log_depth[at + 1]), true) << "world " << world << " row " << q;
          EXPECT_EQ(by_log_depth[at + 1], -x) << "world " << world << " row " << q;
          EXPECT_EQ(by_log_depth[at + 2], round + x / 3) << "world " << world << " row " << q;
        }
      }
    });
  }
}

TEST(LogDepthGloo, ThirtyTwoRanksHoldTheSameBitsAsEachOther) {
  // 32 ranks (the largest this machine runs as threads in one test), random-magnitude doubles: the sums depend
  // on the order of addition, so no hand value; every rank must hold rank 0's bits, and the result must be
  // within 1e-12 (relative) of Gloo's ring.
  constexpr int kRanks = 32;
  std::vector<std::vector<double>> results(kRanks), rings(kRanks);
  gloo_run_options options;
  options.deadline = std::chrono::seconds(120);
  run_gloo_ranks(
      kRanks,
      [&](int rank, c10::intrusive_ptr<c10d::ProcessGroup> group) {
        auto ring = make_c10d_communicator(group, flopmeter::c10d_options{kRanks});
        auto doubling = make_c10d_communicator(group, log_depth_over(kRanks));
        std::vector<double> values;
        for (int i = 0; i < 6; ++i) values.push_back(std::ldexp(1.0 + 0.1 * rank + 0.01 * i, (rank * 7 + i) % 40 - 20));
        std::vector<double> by_ring = values;
        auto a = ring->start_allreduce_sum_max(by_ring.data(), 4, 2);
        ASSERT_EQ(a->wait(kLongWait), collective_status::done) << a->error_message();
        auto b = doubling->start_allreduce_sum_max(values.data(), 4, 2);
        ASSERT_EQ(b->wait(kLongWait), collective_status::done) << b->error_message();
        results[static_cast<std::size_t>(rank)] = values;
        rings[static_cast<std::size_t>(rank)] = by_ring;
      },
      options);
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(results[static_cast<std::size_t>(r)].size(), 6u);
    EXPECT_EQ(std::memcmp(results[static_cast<std::size_t>(r)].data(), results[0].data(), 6 * sizeof(double)), 0)
        << "rank " << r;
  }
  for (int i = 0; i < 6; ++i) {
    EXPECT_NEAR(results[0][static_cast<std::size_t>(i)], rings[0][static_cast<std::size_t>(i)],
                1e-12 * std::abs(rings[0][static_cast<std::size_t>(i)]))
        << "value " << i;
  }
}

TEST(LogDepthGloo, APluginOverTheLogDepthCollectivesWritesTheRingsRecords) {
  // 5 ranks (not a power of two: ranks 0 and 1 fold), each a plugin with a fake clock (2 s intervals) and rank r
  // passing documents of 10 (r + 1) and 7 tokens: first over Gloo's ring, then over the log-depth collectives,
  // 3 logs each; first with ordinary logs only (the table every 1000 logs), then with the table at every log
  // (gathered by recursive doubling). Every record must carry the same figures: the counts and running totals
  // exactly (integer sums), the rates within 1e-12 (sums of fractions in another order may differ in the last
  // bit). The warm-up log aside, the records of steps 2 and 3 and the flush's.
  constexpr int kRanks = 5;
  for (const std::int64_t table_every : {std::int64_t{1000}, std::int64_t{1}}) {
    std::vector<std::vector<flopmeter::metrics_record>> ring(kRanks), doubling(kRanks);
    run_gloo_ranks(kRanks, [&](int rank, c10::intrusive_ptr<c10d::ProcessGroup> group) {
      for (const bool by_doubling : {false, true}) {
        auto sink = std::make_shared<flopmeter::testing::capture_sink>();
        auto clock = std::make_shared<double>(0.0);
        flopmeter::throughput_options o;
        o.model = flopmeter::testing::small_vlm();
        o.peak_tflops_per_gpu = 1.0;
        o.emit = flopmeter::emit_ranks::all;
        o.topk_interval_logs = table_every;
        o.sinks = {sink};
        o.clock_seconds = [clock] { return *clock; };
        auto comm =
            make_c10d_communicator(group, by_doubling ? log_depth_over(kRanks) : flopmeter::c10d_options{kRanks});
        auto plugin = flopmeter::throughput_plugin::create(std::move(o), comm);
        for (int step = 1; step <= 3; ++step) {
          const std::vector<std::int64_t> lengths = {10 * (rank + 1), 7};
          flopmeter::microbatch_event batch;
          batch.document_lengths = lengths;
          batch.samples = 2;
          plugin->on_microbatch(batch);
          *clock += 2.0;
          flopmeter::log_event log;
          log.step = step;
          log.peak_memory_bytes = (std::int64_t{rank} + 1) << 30;
          plugin->on_log(log);
        }
        plugin->flush();
        EXPECT_EQ(plugin->health().failed_collectives, 0u) << "rank " << rank << (by_doubling ? " doubling" : " ring");
        (by_doubling ? doubling : ring)[static_cast<std::size_t>(rank)] = sink->records;
      }
    });
    for (int r = 0; r < kRanks; ++r) {
      const auto& a = ring[static_cast<std::size_t>(r)];
      const auto& b = doubling[static_cast<std::size_t>(r)];
      ASSERT_EQ(a.size(), 3u) << "rank " << r;  // steps 1, 2 (at on_log 2 and 3) and 3 (at flush)
      ASSERT_EQ(b.size(), a.size()) << "rank " << r;
      for (std::size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].step, b[i].step);
        ASSERT_EQ(a[i].values.size(), b[i].values.size());
        for (std::size_t k = 0; k < a[i].values.size(); ++k) {
          const auto& [name, x] = a[i].values[k];
          EXPECT_EQ(b[i].values[k].first, name);
          const double y = b[i].values[k].second;
          if (name.rfind("train/", 0) == 0) {
            EXPECT_EQ(x, y) << name << " rank " << r << " record " << i;
          } else if (name.rfind("perf/log_", 0) != 0 && name.rfind("health/", 0) != 0 &&
                     name.rfind("perf_topk/log_", 0) != 0) {  // the log's own wall-clock waits differ by run
            EXPECT_NEAR(x, y, 1e-12 * std::abs(x)) << name << " rank " << r << " record " << i;
          }
        }
      }
      // By hand: the job's tokens per interval, 10 (1 + ... + 5) + 5 x 7 = 185; after 3 logs, 555.
      EXPECT_EQ(*b.back().find("train/tokens_seen"), 555.0) << "rank " << r;
      if (table_every == 1) {
        // The table at every log (recursive-doubling all-gather): its per-rank figures are there.
        bool has_topk = false;
        for (const auto& [name, value] : b.back().values) has_topk = has_topk || name.rfind("perf_topk/", 0) == 0;
        EXPECT_TRUE(has_topk) << "rank " << r;
      }
    }
  }
}

TEST(LogDepthGloo, SilentPeerGivesFailedWithinGroupTimeoutAndDestructionDoesNotBlock) {
  // Rank 2 of 3 never joins: rank 1 (its fold partner: 3 = 2 + 1, ranks 0 and 1 fold) waits in vain, and
  // rank 0 (which sat out) waits for the result. With a 1 s Gloo timeout both fail well within 4.5 s, with a
  // message, their buffers untouched. Destroying the communicator afterwards returns at once.
  std::atomic<int> others_done{0};
  gloo_run_options options;
  options.group_timeout = milliseconds(1000);
  run_gloo_ranks(
      3,
      [&](int rank, c10::intrusive_ptr<c10d::ProcessGroup> group) {
        auto comm = make_c10d_communicator(group, log_depth_over(3));
        if (rank == 2) {
          while (others_done.load() < 2) std::this_thread::sleep_for(milliseconds(5));
          return;
        }
        std::vector<double> values = {1.0 + rank, 2.0};
        const auto start = steady_clock::now();
        auto pending = comm->start_allreduce_sum_max(values.data(), 1, 1);
        EXPECT_EQ(pending->wait(milliseconds(50)), collective_status::pending);
        collective_status status = collective_status::pending;
        EXPECT_NO_THROW(status = pending->wait(kLongWait));
        EXPECT_EQ(status, collective_status::failed);
        EXPECT_LT(steady_clock::now() - start, milliseconds(4500));
        EXPECT_NE(pending->error_message().find("log-depth all-reduce of 2 values failed: "), std::string::npos)
            << pending->error_message();
        EXPECT_EQ(values, (std::vector<double>{1.0 + rank, 2.0}));
        const auto destroy = steady_clock::now();
        comm.reset();
        EXPECT_LT(steady_clock::now() - destroy, milliseconds(500));
        ++others_done;
      },
      options);
}

TEST(LogDepthGloo, AutomaticMeansLogDepthOnOwnGroupsOfFourRanksOnly) {
  // automatic: flopmeter's own group of 4 ranks (log_depth_min_ranks) runs the log-depth collectives; the
  // same group with small_allreduce::backend, and a group the trainer passes, keep Gloo's ring. (Own groups
  // of 2 and 3 ranks, which keep the ring, are checked through the Python package, test_distributed.py: one
  // process per rank. Here every rank is a thread, and make_gloo_communicator counts its calls per rank, so
  // groups of fewer ranks would leave the later tests' ranks out of step.)
  static_assert(flopmeter::log_depth_min_ranks == 4, "the expectations below are for 4");
  auto store = c10::make_intrusive<c10d::HashStore>();
  gloo_run_options options;
  options.store = store;
  run_gloo_ranks(
      kWorld,
      [&](int rank, c10::intrusive_ptr<c10d::ProcessGroup> group) {
        flopmeter::gloo_group_options own;
        own.timeout = milliseconds(10000);
        own.gloo_hostname = "127.0.0.1";
        auto automatic = flopmeter::make_gloo_communicator(store, rank, kWorld, own);
        EXPECT_EQ(automatic->backend_name(), "c10d:gloo+log_depth");
        own.allreduce = flopmeter::small_allreduce::backend;
        EXPECT_EQ(flopmeter::make_gloo_communicator(store, rank, kWorld, own)->backend_name(), "c10d:gloo");
        EXPECT_EQ(make_c10d_communicator(group, flopmeter::c10d_options{kWorld})->backend_name(), "c10d:gloo");
        // The chosen one sums and maxes: 1 per rank, and the largest rank id.
        std::vector<double> values = {1.0, static_cast<double>(rank)};
        auto pending = automatic->start_allreduce_sum_max(values.data(), 1, 1);
        ASSERT_EQ(pending->wait(kLongWait), collective_status::done) << pending->error_message();
        EXPECT_EQ(values, (std::vector<double>{4.0, 3.0}));
      },
      options);
}

// ---- make_gloo_communicator: flopmeter's own group over the trainer's store ----

flopmeter::gloo_group_options loopback_group(milliseconds timeout) {
  flopmeter::gloo_group_options options;
  options.timeout = timeout;
  options.gloo_hostname = "127.0.0.1";
  return options;
}

TEST(OwnGroup, BuiltFromTheTrainersStoreAndRankItSumsOverTheJob) {
  auto store = c10::make_intrusive<c10d::HashStore>();  // the trainer's store; its own groups use it too
  gloo_run_options options;
  options.store = store;
  run_gloo_ranks(
      kWorld,
      [&](int rank, c10::intrusive_ptr<c10d::ProcessGroup>) {
        auto comm = flopmeter::make_gloo_communicator(store, rank, kWorld, loopback_group(milliseconds(10000)));
        std::vector<double> values;
        std::unique_ptr<flopmeter::pending_collective> pending;
        // 4 ranks of its own group: ordinary logs by the log-depth all-reduce; this SUM is Gloo's own.
        sum_over_the_job(*comm, rank, values, pending, "c10d:gloo+log_depth");
      },
      options);
}

TEST(OwnGroup, ASkippedLogCostsAnIntervalNotTheTrainersCollectives) {
  // dp 2 x tp 2 over 4 ranks. Rank 3 skips on_log at step 1. On a group of flopmeter's own, the trainer's next
  // collective on its own group still pairs up and sums right (1 + 2 + 3 + 4 = 10 at every rank); on a shared
  // group it would have met flopmeter's all-reduce instead. flopmeter loses that interval: the other ranks'
  // collective times out at flush (collective_timeout 300 ms), counted.
  auto store = c10::make_intrusive<c10d::HashStore>();
  gloo_run_options options;
  options.store = store;
  options.group_timeout = milliseconds(5000);
  run_gloo_ranks(
      kWorld,
      [&](int rank, c10::intrusive_ptr<c10d::ProcessGroup> group) {
        auto comm = flopmeter::make_gloo_communicator(store, rank, kWorld, loopback_group(milliseconds(2000)));
        flopmeter::throughput_options o;
        o.model = flopmeter::testing::small_vlm();
        o.parallel.tp = 2;
        o.collective_timeout = milliseconds(300);
        auto plugin = flopmeter::throughput_plugin::create(o, comm);
        const std::vector<std::int64_t> lengths = {64};
        flopmeter::microbatch_event batch;
        batch.document_lengths = lengths;
        plugin->on_microbatch(batch);
        if (rank != 3) {
          flopmeter::log_event log;
          log.step = 1;
          plugin->on_log(log);
        }
        at::Tensor trainer = at::full({1}, rank + 1.0, at::kDouble);
        std::vector<at::Tensor> tensors{trainer};
        auto work = group->allreduce(tensors);
        ASSERT_TRUE(work->wait(milliseconds(10000)));
        EXPECT_EQ(trainer.item<double>(), 10.0) << "rank " << rank;
        plugin->flush();
        EXPECT_EQ(plugin->health().failed_collectives, rank == 3 ? 0u : 1u) << "rank " << rank;
      },
      options);
}

TEST(OwnGroup, BadArgumentsAreRefused) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  scoped_env env({{"WORLD_SIZE", std::nullopt}});
  EXPECT_THROW(flopmeter::make_gloo_communicator(c10::intrusive_ptr<c10d::Store>(), 0, 2), flopmeter::error);
  EXPECT_THROW(flopmeter::make_gloo_communicator(store, 2, 2), flopmeter::error);
  EXPECT_THROW(flopmeter::make_gloo_communicator(store, 0, 0), flopmeter::error);
  EXPECT_THROW(flopmeter::make_gloo_communicator(store, 0, 1, loopback_group(milliseconds(0))), flopmeter::error);
  scoped_env world4({{"WORLD_SIZE", "4"}});
  try {
    flopmeter::make_gloo_communicator(store, 0, 2, loopback_group(milliseconds(1000)));
    ADD_FAILURE() << "world_size 2 was accepted with WORLD_SIZE=4";
  } catch (const flopmeter::error& e) {
    EXPECT_NE(std::string(e.what()).find("but the job has 4 (WORLD_SIZE=4)"), std::string::npos) << e.what();
  }
}

// A store whose waits ignore their timeout, and whose every get and wait blocks once hang() is called: a store
// host that stopped answering, with a client that has no receive timeout. release() makes the blocked calls throw, so that the
// rendezvous attempts abandoned to flopmeter's helper threads end before the test does.
class hanging_store final : public c10d::Store {
 public:
  void hang() {
    std::lock_guard<std::mutex> lock(mutex_);
    hanging_ = true;
  }
  void release() {
    std::lock_guard<std::mutex> lock(mutex_);
    released_ = true;
    cv_.notify_all();
  }
  int blocked() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return blocked_;
  }

  void set(const std::string& key, const std::vector<uint8_t>& value) override { inner_->set(key, value); }
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override {
    return inner_->compareSet(key, expected, desired);
  }
  std::vector<uint8_t> get(const std::string& key) override {
    block_if_hanging();
    return inner_->get(key);
  }
  int64_t add(const std::string& key, int64_t value) override { return inner_->add(key, value); }
  bool deleteKey(const std::string& key) override { return inner_->deleteKey(key); }
  bool check(const std::vector<std::string>& keys) override { return inner_->check(keys); }
  int64_t getNumKeys() override { return inner_->getNumKeys(); }
  void wait(const std::vector<std::string>& keys) override { wait_ignoring_timeout(keys); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override {
    wait_ignoring_timeout(keys);
  }

 private:
  void block_if_hanging() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!hanging_) return;
    ++blocked_;
    cv_.wait(lock, [&] { return released_; });
    --blocked_;
    throw std::runtime_error("hanging_store: released");
  }

  // A wait that never times out: polls for the keys (and blocks for good once the store hangs).
  void wait_ignoring_timeout(const std::vector<std::string>& keys) {
    for (;;) {
      block_if_hanging();
      if (inner_->check(keys)) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  c10::intrusive_ptr<c10d::HashStore> inner_ = c10::make_intrusive<c10d::HashStore>();
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool hanging_ = false;
  bool released_ = false;
  int blocked_ = 0;
};

TEST(OwnGroup, EveryRankReturnsWithinTheTimeoutWhenTheStoreHangsMidRendezvous) {
  // World 3: ranks 0 and 1 start the rendezvous, rank 2 has not arrived, and then the store stops answering.
  // Without a bound both ranks would wait forever in the rendezvous; with it each throws within the timeout
  // (1500 ms) + the 500 ms grace, here allowed 2.5 s of scheduling slack on top.
  scoped_env env({{"WORLD_SIZE", std::nullopt}});
  auto store = c10::make_intrusive<hanging_store>();
  constexpr milliseconds kTimeout{1500};
  std::vector<std::string> errors(2);
  std::vector<milliseconds> took(2);
  std::atomic<int> returned{0};
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      const auto start = steady_clock::now();
      try {
        flopmeter::make_gloo_communicator(store, rank, 3, loopback_group(kTimeout));
      } catch (const flopmeter::error& e) {
        errors[static_cast<std::size_t>(rank)] = e.what();
      }
      took[static_cast<std::size_t>(rank)] = std::chrono::duration_cast<milliseconds>(steady_clock::now() - start);
      ++returned;
    });
  }
  std::this_thread::sleep_for(milliseconds(200));  // both have published their addresses by now
  store->hang();
  // A rank that never returns fails the test (abort with a message) instead of hanging ctest.
  const auto give_up = steady_clock::now() + milliseconds(30000);
  while (returned.load() < 2) {
    if (steady_clock::now() > give_up) {
      std::fprintf(stderr, "EveryRankReturnsWithinTheTimeoutWhenTheStoreHangsMidRendezvous: a rank never returned\n");
      std::abort();
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  for (auto& t : ranks) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_NE(errors[static_cast<std::size_t>(rank)].find("the Gloo rendezvous did not finish within 1500 ms"),
              std::string::npos)
        << "rank " << rank << ": " << errors[static_cast<std::size_t>(rank)];
    EXPECT_LE(took[static_cast<std::size_t>(rank)], kTimeout + milliseconds(500) + milliseconds(2500));
    EXPECT_GE(took[static_cast<std::size_t>(rank)], kTimeout);
  }
  // The abandoned attempts are still blocked in the store; released, they end on their helper threads.
  EXPECT_GE(store->blocked(), 1);
  store->release();
  const auto deadline = steady_clock::now() + milliseconds(10000);
  while (store->blocked() > 0 && steady_clock::now() < deadline) std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(store->blocked(), 0);
  // They unwind their half-built Gloo groups on their own threads; give them a moment before the process exits.
  std::this_thread::sleep_for(milliseconds(300));
}

}  // namespace
