// c10d_trainer — the recommended way a LibTorch C++ trainer uses flopmeter (README, "Using it from a trainer"),
// as a complete program: 4 ranks (dp 2 x tp 2), one process each, built against an installed flopmeter.
//
//   c10d_trainer PLUGIN.toml
//
// Each rank does what a trainer does: it has a c10d TCPStore (rank 0 serves it), gives flopmeter that store and
// its rank to build flopmeter's OWN Gloo group over every rank of the job, creates the plugin from the plugin
// file (its [sinks] included), registers it with `hooks`, fires one on_microbatch per micro-batch and one
// on_log per logged step, and flushes at the end. No model is trained: the micro-batches are described only.
// main() forks the ranks (a launcher like torchrun would start them) and checks each rank's numbers by hand;
// it exits non-zero when one is off.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "flopmeter/c10d.h"
#include "flopmeter/hooks.h"
#include "flopmeter/sinks.h"
#include "flopmeter/throughput.h"

namespace {

constexpr int kWorld = 4;  // dp 2 x tp 2 (flopmeter.toml)
constexpr int kSteps = 3;
constexpr int kMicrobatchesPerStep = 2;

// Rank order tp-cp-dp-pp (tp fastest): ranks 0 and 1 are data-parallel replica 0, ranks 2 and 3 replica 1.
// Every rank of a tensor-parallel group describes the whole micro-batch of its replica.
// Replica d's micro-batch: documents of 100 + 10d and 50 tokens.
std::vector<std::int64_t> documents_of(int rank) {
  const int replica = rank / 2;
  return {100 + 10 * replica, 50};
}

int run_rank(int rank, int port, const std::string& plugin_config) {
  try {
    // The trainer's own store (a real trainer also builds its process groups over it).
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<std::uint16_t>(port);
    store_options.isServer = rank == 0;
    store_options.numWorkers = kWorld;
    store_options.waitWorkers = false;
    store_options.timeout = std::chrono::seconds(30);
    auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", store_options);

    // flopmeter's own Gloo group over every rank of the job, through the trainer's store: never the trainer's
    // data-parallel group (too small: half the tokens), never a group the trainer also uses (one skipped on_log
    // would pair flopmeter's all-reduce with the trainer's next collective and kill the job).
    flopmeter::gloo_group_options group_options;
    group_options.timeout = std::chrono::seconds(30);
    group_options.gloo_hostname = "127.0.0.1";  // this example's ranks share one host
    std::shared_ptr<flopmeter::communicator> comm =
        flopmeter::make_gloo_communicator(store, rank, kWorld, group_options);

    // The plugin from its file, with the file's sinks; a callback sink lets this example check the numbers.
    std::vector<flopmeter::metrics_record> records;
    auto plugin = flopmeter::create_throughput_plugin(
        plugin_config, comm, nullptr,
        {flopmeter::make_callback_sink([&records](const flopmeter::metrics_record& r) { records.push_back(r); })});
    flopmeter::hooks hooks;
    flopmeter::registration registration = hooks.add(plugin);

    const std::vector<std::int64_t> documents = documents_of(rank);
    for (int step = 1; step <= kSteps; ++step) {
      for (int m = 0; m < kMicrobatchesPerStep; ++m) {
        flopmeter::microbatch_event batch;
        batch.document_lengths = documents;
        batch.samples = 2;
        hooks.on_microbatch(batch);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // stands in for forward and backward
      }
      flopmeter::log_event log;
      log.step = step;
      hooks.on_log(log);
    }
    hooks.flush();  // emits the last step now, while every rank is still here (destroying the plugin would too)

    // By hand: per step, replica 0 runs 2 x 150 = 300 tokens and replica 1 2 x 160 = 320 (the tp ranks of a
    // replica describe the same tokens, counted once): 620 per step, 620 * step seen after `step` steps.
    int failures = 0;
    if (records.size() != kSteps) {
      std::printf("rank %d: expected %d records, got %zu\n", rank, kSteps, records.size());
      return 1;
    }
    for (int i = 0; i < kSteps; ++i) {
      const double* seen = records[static_cast<std::size_t>(i)].find("train/tokens_seen");
      const double expected = 620.0 * (i + 1);
      if (seen == nullptr || *seen != expected) {
        std::printf("rank %d step %d: train/tokens_seen %g, expected %g\n", rank, i + 1, seen ? *seen : -1.0, expected);
        ++failures;
      }
    }
    std::ifstream jsonl("c10d_trainer_" + std::to_string(rank) + ".jsonl");
    int lines = 0;
    for (std::string line; std::getline(jsonl, line);) ++lines;
    if (lines != kSteps) {
      std::printf("rank %d: expected %d lines in c10d_trainer_%d.jsonl, got %d\n", rank, kSteps, rank, lines);
      ++failures;
    }
    const flopmeter::throughput_health health = plugin->health();
    if (health.bad_microbatches + health.failed_collectives + health.skipped_intervals != 0) {
      std::printf("rank %d: unhealthy run\n", rank);
      ++failures;
    }
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("rank %d: %s\n", rank, e.what());
    return 1;
  }
}

// A TCP port on 127.0.0.1 that was free a moment ago (the launcher's job in a real job: MASTER_PORT).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  int port = 0;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  if (fd >= 0) ::close(fd);
  return port;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s PLUGIN.toml\n", argv[0]);
    return 2;
  }
  // Gloo writes to peers with writev(): a dead peer must cost a failed collective, not a SIGPIPE death.
  std::signal(SIGPIPE, SIG_IGN);
  const int port = free_port();
  if (port == 0) {
    std::fprintf(stderr, "c10d_trainer: no free port\n");
    return 1;
  }
  std::fflush(stdout);
  std::vector<pid_t> children;
  for (int rank = 1; rank < kWorld; ++rank) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int rc = run_rank(rank, port, argv[1]);
      std::fflush(stdout);
      std::_Exit(rc);
    }
    children.push_back(pid);
  }
  int failures = run_rank(0, port, argv[1]);
  for (const pid_t pid : children) {
    int status = 0;
    if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
  }
  std::printf("c10d_trainer: %s\n", failures == 0 ? "OK" : "FAILED");
  return failures == 0 ? 0 : 1;
}
