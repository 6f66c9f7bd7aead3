// The example trainer (examples/vlm/trainer.cpp) end to end, as separate processes:
// - one process (no RANK/WORLD_SIZE): the loss falls over 30 steps with the fixed seed, flopmeter's overhead is
//   reported (printed and in summary.json; its size is a benchmark matter, not asserted here), flopmeter saw
//   every micro-batch and log;
// - two ranks through examples/launch.sh (c10d Gloo, flopmeter's own Gloo group): every perf/tokens_per_second
//   in flopmeter's JSONL equals the sum over both ranks of the real tokens each rank ran in that interval
//   divided by that rank's interval, both taken from the trainer's own per-rank logs; train/loss and
//   train/tokens_seen agree with the same logs;
// - a flopmeter library path that does not load is a clear error, not a crash;
// - flopmeter fed through its tensor path (--flopmeter-path tensor: the batch's cu_seqlens and grid_thw tensors,
//   a one-rank Gloo group, the path --device cuda takes on a GPU) reports what the trainer counted;
// - --device cuda is a clear error where LibTorch sees no GPU (and trains where it does).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> read_lines(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

// The number after "key": in a flat JSON object (the trainer's and flopmeter's lines are flat); NaN if absent.
double number(const std::string& json, const std::string& key) {
  const std::string needle = "\"" + key + "\":";
  const std::size_t at = json.find(needle);
  if (at == std::string::npos) return std::nan("");
  return std::strtod(json.c_str() + at + needle.size(), nullptr);
}

std::vector<double> number_array(const std::string& json, const std::string& key) {
  const std::string needle = "\"" + key + "\":[";
  std::size_t at = json.find(needle);
  std::vector<double> values;
  if (at == std::string::npos) return values;
  at += needle.size();
  while (at < json.size() && json[at] != ']') {
    char* end = nullptr;
    values.push_back(std::strtod(json.c_str() + at, &end));
    at = static_cast<std::size_t>(end - json.c_str());
    if (at < json.size() && json[at] == ',') ++at;
  }
  return values;
}

double mean(const std::vector<double>& v, std::size_t from, std::size_t count) {
  return std::accumulate(v.begin() + static_cast<long>(from), v.begin() + static_cast<long>(from + count), 0.0) /
         static_cast<double>(count);
}

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::path(VLM_TEST_WORK_DIR) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Runs `command` through the shell with the launch variables cleared, stdout+stderr into `log`.
int run_command(const std::string& command, const fs::path& log) {
  const std::string full = "env -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT -u LOCAL_RANK -u FLOPMETER_LIBRARY " +
                           command + " > '" + log.string() + "' 2>&1";
  const int status = std::system(full.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string trainer_command(const fs::path& out, const std::string& extra) {
  return std::string("'") + VLM_TRAINER_PATH + "' --config '" + FLOPMETER_SOURCE_DIR + "/examples/trainer.toml' --output-dir '" +
         out.string() + "' " + extra;
}

// A port p with p and p + 1 (flopmeter's store, port_offset 1) free right now.
int free_port_pair() {
  for (int attempt = 0; attempt < 50; ++attempt) {
    const int s = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof addr;
    if (::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ::close(s);
      continue;
    }
    const int port = ntohs(addr.sin_port);
    const int t = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in next = addr;
    next.sin_port = htons(static_cast<std::uint16_t>(port + 1));
    const bool next_free = port < 65535 && ::bind(t, reinterpret_cast<sockaddr*>(&next), sizeof next) == 0;
    ::close(t);
    ::close(s);
    if (next_free) return port;
  }
  return 0;
}

TEST(ExampleTrainer, SingleProcessLossFallsAndOverheadIsReported) {
  const fs::path out = fresh_dir("single");
  const fs::path log = out / "console.log";
  ASSERT_EQ(run_command(trainer_command(out, "--steps 30 --log-interval 5"), log), 0) << read_file(log);
  const std::string console = read_file(log);
  const std::string summary = read_file(out / "summary.json");
  std::printf("%s", console.c_str());

  // Loss falls clearly: the mean of the last 5 steps is well below the first 5 (~6.2 -> ~2.5 here).
  const std::vector<double> losses = number_array(summary, "losses");
  ASSERT_EQ(losses.size(), 30u) << summary;
  const double first5 = mean(losses, 0, 5);
  const double last5 = mean(losses, 25, 5);
  std::printf("loss: first-5 mean %.4f, last-5 mean %.4f\n", first5, last5);
  EXPECT_LT(last5, first5 - 1.0);
  EXPECT_DOUBLE_EQ(number(summary, "first_loss"), losses.front());
  EXPECT_DOUBLE_EQ(number(summary, "final_loss"), losses.back());
  EXPECT_EQ(number(summary, "steps"), 30);

  // The overhead is measured and reported; how small it is belongs to benchmarks, not to a test.
  EXPECT_NE(console.find("flopmeter overhead: "), std::string::npos) << console;
  const double fraction = number(summary, "flopmeter_overhead_fraction");
  EXPECT_TRUE(std::isfinite(fraction) && fraction >= 0) << summary;
  std::printf("flopmeter overhead: %.4f%% of wall time\n", 100 * fraction);

  // flopmeter took every event: 30 x 2 micro-batches + 6 logs + flush, nothing rejected, one collective per log.
  EXPECT_EQ(number(summary, "flopmeter_event_calls"), 60 + 6 + 1);
  EXPECT_EQ(number(summary, "bad_microbatches"), 0);
  EXPECT_EQ(number(summary, "skipped_intervals"), 0);
  EXPECT_EQ(number(summary, "collectives_started"), 6);
  const std::vector<std::string> metrics = read_lines(out / "flopmeter_0.jsonl");
  ASSERT_EQ(metrics.size(), 6u);
  EXPECT_GT(number(metrics.back(), "perf/mfu"), 0);
}

TEST(ExampleTrainer, TwoRanksTokensPerSecondIsTheSumOverRanks) {
  const fs::path out = fresh_dir("two_ranks");
  const fs::path log = out / "console.log";
  const int port = free_port_pair();
  ASSERT_NE(port, 0);
  const std::string command = "MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) + " '" + VLM_LAUNCH_SCRIPT +
                              "' 2 " + trainer_command(out, "--steps 10 --log-interval 5");
  ASSERT_EQ(run_command(command, log), 0) << read_file(log);
  const std::string console = read_file(log);
  std::printf("%s", console.c_str());

  // The trainer's own per-rank, per-interval records, keyed by step.
  std::map<long, std::vector<std::string>> by_step;
  for (int rank = 0; rank < 2; ++rank) {
    for (const std::string& line : read_lines(out / ("trainer_rank" + std::to_string(rank) + ".jsonl"))) {
      by_step[static_cast<long>(number(line, "step"))].push_back(line);
    }
  }
  const std::vector<std::string> metrics = read_lines(out / "flopmeter_0.jsonl");
  ASSERT_EQ(metrics.size(), 2u) << "one JSONL line per log (steps 5 and 10), from rank 0";
  double tokens_seen = 0;
  for (const std::string& line : metrics) {
    const long step = static_cast<long>(number(line, "step"));
    const std::vector<std::string>& ranks = by_step[step];
    ASSERT_EQ(ranks.size(), 2u) << "step " << step;
    double expected_tps = 0, loss_sum = 0, labels = 0, real = 0;
    for (const std::string& r : ranks) {
      expected_tps += number(r, "real_tokens") / number(r, "interval_seconds");
      loss_sum += number(r, "loss_sum");
      labels += number(r, "label_tokens");
      real += number(r, "real_tokens");
    }
    // The ranks saw different data (data parallelism), so a per-rank mix-up would show.
    EXPECT_NE(number(ranks[0], "real_tokens"), number(ranks[1], "real_tokens"));
    const double reported = number(line, "perf/tokens_per_second");
    std::printf("step %ld: flopmeter perf/tokens_per_second %.3f, trainer sum over ranks %.3f\n", step, reported,
                expected_tps);
    // Equal up to where the two clocks are read (microseconds of a ~1 s interval).
    EXPECT_NEAR(reported / expected_tps, 1.0, 1e-3) << line;
    EXPECT_NEAR(number(line, "perf/tokens_per_second_per_gpu"), reported / 2, 1e-9 * reported);
    EXPECT_NEAR(number(line, "train/loss"), loss_sum / labels, 1e-9);
    tokens_seen += real;
    EXPECT_EQ(number(line, "train/tokens_seen"), tokens_seen);
  }
  // Both ranks report the same global loss (gradients and the loss are all-reduced) and an overhead figure.
  EXPECT_EQ(number_array(read_file(out / "summary_rank0.json"), "losses"),
            number_array(read_file(out / "summary_rank1.json"), "losses"));
  EXPECT_NE(console.find("[rank 1] flopmeter overhead: "), std::string::npos) << console;
}

TEST(ExampleTrainer, TensorPathReportsWhatTheTrainerCounted) {
  const fs::path out = fresh_dir("tensor_path");
  const fs::path log = out / "console.log";
  ASSERT_EQ(run_command(trainer_command(out, "--steps 10 --log-interval 5 --flopmeter-path tensor"), log), 0)
      << read_file(log);
  const std::string summary = read_file(out / "summary.json");
  EXPECT_NE(summary.find("\"flopmeter_path\":\"tensor\""), std::string::npos) << summary;
  EXPECT_NE(summary.find("c10d:gloo, counters on cpu"), std::string::npos) << summary;
  EXPECT_EQ(number(summary, "bad_microbatches"), 0);
  EXPECT_EQ(number(summary, "failed_collectives"), 0);
  EXPECT_EQ(number(summary, "flopmeter_event_calls"), 20 + 2 + 1);
  const std::vector<std::string> trainer = read_lines(out / "trainer_rank0.jsonl");
  const std::vector<std::string> metrics = read_lines(out / "flopmeter_0.jsonl");
  ASSERT_EQ(metrics.size(), 2u);
  ASSERT_EQ(trainer.size(), 2u);
  double seen = 0;
  for (std::size_t i = 0; i < metrics.size(); ++i) {
    seen += number(trainer[i], "real_tokens");
    EXPECT_EQ(number(metrics[i], "train/tokens_seen"), seen) << metrics[i];
    EXPECT_DOUBLE_EQ(number(metrics[i], "train/batch_efficiency"),
                     number(trainer[i], "real_tokens") / number(trainer[i], "device_tokens"));
    EXPECT_NEAR(number(metrics[i], "perf/tokens_per_second") /
                    (number(trainer[i], "real_tokens") / number(trainer[i], "interval_seconds")),
                1.0, 1e-3)
        << metrics[i];
    EXPECT_TRUE(std::isfinite(number(metrics[i], "perf/log_wait_ms"))) << metrics[i];
  }
}

TEST(ExampleTrainer, CudaDeviceWithoutAGpuIsAClearError) {
  const fs::path out = fresh_dir("cuda_device");
  const fs::path log = out / "console.log";
  const int rc = run_command(trainer_command(out, "--steps 1 --log-interval 1 --device cuda"), log);
  if (rc == 0) {
    GTEST_SKIP() << "this LibTorch has a GPU: --device cuda trained (scripts/gpu_check.sh checks that run)";
  }
  EXPECT_EQ(rc, 1);
  EXPECT_NE(read_file(log).find("--device cuda: this LibTorch sees no CUDA device"), std::string::npos)
      << read_file(log);
}

TEST(ExampleTrainer, UnloadableFlopmeterLibraryIsAClearError) {
  const fs::path out = fresh_dir("bad_library");
  const fs::path log = out / "console.log";
  EXPECT_EQ(run_command(trainer_command(out, "--steps 1 --flopmeter-library /nonexistent/libflopmeter.so"), log), 1);
  EXPECT_NE(read_file(log).find("cannot dlopen flopmeter library /nonexistent/libflopmeter.so"), std::string::npos)
      << read_file(log);
}

}  // namespace
