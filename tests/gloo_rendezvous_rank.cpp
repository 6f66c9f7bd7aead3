// gloo_rendezvous_rank — one rank of a multi-process job that builds flopmeter's own Gloo group through the C
// ABI (flopmeter_create_gloo_from_env[_with]), as a trainer that loads the plugin does. Driven by
// tests/test_gloo_rendezvous.cpp, which sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT.
//
//   gloo_rendezvous_rank PLUGIN.toml PORT_OFFSET TIMEOUT_MS [linger]
//
// linger: a rank other than 0 keeps its plugin after the flush, waits 1 s (rank 0 destroys its plugin and
// exits meanwhile), then prints "cpu_ms N", the CPU time the whole process used in the next 2 s, and only then
// destroys its plugin.
// TIMEOUT_MS 0: flopmeter_create_gloo_from_env (the plugin file's rendezvous_timeout_ms); > 0: through
// flopmeter_gloo_options. Prints one line, "created MS" or "failed MS: MESSAGE" (MS: the milliseconds the
// create call took), then, when created, runs one micro-batch, one log and a flush. Exit status: 0 created and
// flushed, 3 create failed, 2 usage. It leaves with _Exit: an abandoned rendezvous may still be running on
// flopmeter's helper thread, and the test is about the create call returning, not about process teardown.
#include <sys/resource.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "flopmeter/c_api.h"

namespace {

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

}  // namespace

int main(int argc, char** argv) {
  const bool linger = argc == 5 && std::string(argv[4]) == "linger";
  if (argc != 4 && !linger) {
    std::fprintf(stderr, "usage: %s PLUGIN.toml PORT_OFFSET TIMEOUT_MS [linger]\n", argv[0]);
    return 2;
  }
  std::signal(SIGPIPE, SIG_IGN);  // c_api.h: a dead peer must cost a collective, not the process
  const int port_offset = std::atoi(argv[2]);
  const std::int64_t timeout_ms = std::atoll(argv[3]);
  char error[2048] = {0};
  const auto start = std::chrono::steady_clock::now();
  flopmeter_plugin* plugin = nullptr;
  if (timeout_ms == 0) {
    plugin = flopmeter_create_gloo_from_env(argv[1], port_offset, error, sizeof(error));
  } else {
    flopmeter_gloo_options options{};
    options.struct_size = sizeof(options);
    options.port_offset = port_offset;
    options.rendezvous_timeout_ms = timeout_ms;
    plugin = flopmeter_create_gloo_from_env_with(argv[1], &options, error, sizeof(error));
  }
  const long long ms = static_cast<long long>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count());
  if (plugin == nullptr) {
    std::printf("failed %lld: %s\n", ms, error);
    std::fflush(stdout);
    std::_Exit(3);
  }
  std::printf("created %lld\n", ms);
  std::fflush(stdout);
  const std::int64_t lengths[] = {100, 28};
  flopmeter_microbatch batch{};
  batch.struct_size = sizeof(batch);
  batch.document_lengths = lengths;
  batch.num_document_lengths = 2;
  batch.samples = 2;
  flopmeter_on_microbatch(plugin, &batch);
  flopmeter_log log{};
  log.struct_size = sizeof(log);
  log.step = 1;
  flopmeter_on_log(plugin, &log);
  flopmeter_flush(plugin);
  const char* rank = std::getenv("RANK");
  if (linger && rank != nullptr && std::string(rank) != "0") {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const double before = cpu_seconds();
    std::this_thread::sleep_for(std::chrono::seconds(2));
    std::printf("cpu_ms %.0f\n", (cpu_seconds() - before) * 1e3);
  }
  flopmeter_destroy(plugin);
  std::fflush(stdout);
  std::_Exit(0);
}
