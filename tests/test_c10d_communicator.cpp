// Tests of the c10d ProcessGroup adapter (plugin/c10d_communicator.cpp) over real Gloo ranks: four threads
// of this process, each with its own ProcessGroupGloo on 127.0.0.1 (tests/gloo_harness.h), and of the
// environment-driven Gloo factory.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "flopmeter/c10d.h"
#include "flopmeter/error.h"
#include "gloo_harness.h"

namespace {

using flopmeter::collective_status;
using flopmeter::make_c10d_communicator;
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

TEST(C10dCommunicator, FourRanksSumDistinctBuffers) {
  run_gloo_ranks(kWorld, [](int rank, c10::intrusive_ptr<c10d::ProcessGroup> group) {
    auto comm = make_c10d_communicator(group);
    EXPECT_EQ(comm->rank(), rank);
    EXPECT_EQ(comm->world_size(), kWorld);
    EXPECT_EQ(comm->backend_name(), "c10d:gloo");
    std::vector<double> values = contribution(rank);
    auto pending = comm->start_allreduce_sum(values.data(), values.size());
    ASSERT_EQ(pending->wait(kLongWait), collective_status::done) << pending->error_message();
    EXPECT_EQ(values, kExpectedSum);
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

// A TCP port on 127.0.0.1 that was free a moment ago.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  ::close(fd);
  return port;
}

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
  {
    scoped_env env({{"RANK", "0"}, {"WORLD_SIZE", std::nullopt}, {"MASTER_ADDR", "127.0.0.1"},
                    {"MASTER_PORT", "29500"}});
    expect_env_error(options, "environment variable WORLD_SIZE is not set");
  }
  {
    scoped_env env({{"RANK", std::nullopt}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "127.0.0.1"},
                    {"MASTER_PORT", "29500"}});
    expect_env_error(options, "environment variable RANK is not set");
  }
  {
    scoped_env env({{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", ""}, {"MASTER_PORT", "29500"}});
    expect_env_error(options, "environment variable MASTER_ADDR is not set");
  }
  {
    scoped_env env({{"RANK", "0"}, {"WORLD_SIZE", "four"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"}});
    expect_env_error(options, "WORLD_SIZE='four' is not an integer");
  }
  {
    scoped_env env({{"RANK", "1x"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"}});
    expect_env_error(options, "RANK='1x' is not an integer");
  }
  {
    scoped_env env({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"}});
    expect_env_error(options, "RANK=4 is out of range (must be in [0, WORLD_SIZE) = [0, 4))");
  }
  {
    scoped_env env({{"RANK", "0"}, {"WORLD_SIZE", "0"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"}});
    expect_env_error(options, "WORLD_SIZE=0 is out of range");
  }
  {
    scoped_env env({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}});
    expect_env_error(options, "MASTER_PORT=70000 is out of range (must be in [1, 65535])");
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
    expect_env_error(zero, "timeout must be > 0 ms");
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
  expect_env_error(options, "rank 1 could not reach the TCPStore at 127.0.0.1:" + std::to_string(port));
  EXPECT_LT(steady_clock::now() - start, milliseconds(8000));
}

}  // namespace
