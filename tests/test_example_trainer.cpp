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
#include <gtest/gtest.h>
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

#include "support/json_reading.h"
#include "support/ports.h"

namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

using flopmeter::testing::free_port_pair;
using flopmeter::testing::number_array_field;
using flopmeter::testing::number_field;
using nlohmann::json;

// The trainer's and flopmeter's JSONL records, and the trainer's summary file, read with nlohmann-json.
std::vector<json> read_records(const fs::path& path) { return flopmeter::testing::read_jsonl(path.string()); }
json read_summary(const fs::path& path) { return flopmeter::testing::read_json_file(path.string()); }

// The summary's flopmeter health counter `name` (the object "flopmeter_health").
double health_counter(const json& summary, const std::string& name) {
  return number_field(summary.value("flopmeter_health", json::object()), name);
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

TEST(ExampleTrainer, SingleProcessLossFallsAndOverheadIsReported) {
  const fs::path out = fresh_dir("single");
  const fs::path log = out / "console.log";
  ASSERT_EQ(run_command(trainer_command(out, "--steps 30 --log-interval 5"), log), 0) << read_file(log);
  const std::string console = read_file(log);
  const json summary = read_summary(out / "summary.json");
  std::printf("%s", console.c_str());

  // Loss falls clearly: the mean of the last 5 steps is well below the first 5 (~6.2 -> ~2.5 here).
  const std::vector<double> losses = number_array_field(summary, "losses");
  ASSERT_EQ(losses.size(), 30u) << summary.dump();
  const double first5 = mean(losses, 0, 5);
  const double last5 = mean(losses, 25, 5);
  std::printf("loss: first-5 mean %.4f, last-5 mean %.4f\n", first5, last5);
  EXPECT_LT(last5, first5 - 1.0);
  EXPECT_DOUBLE_EQ(number_field(summary, "first_loss"), losses.front());
  EXPECT_DOUBLE_EQ(number_field(summary, "final_loss"), losses.back());
  EXPECT_EQ(number_field(summary, "steps"), 30);

  // The overhead is measured and reported; how small it is belongs to benchmarks, not to a test.
  EXPECT_NE(console.find("flopmeter overhead: "), std::string::npos) << console;
  const double fraction = number_field(summary, "flopmeter_overhead_fraction");
  EXPECT_TRUE(std::isfinite(fraction) && fraction >= 0) << summary.dump();
  std::printf("flopmeter overhead: %.4f%% of wall time\n", 100 * fraction);

  // flopmeter took every event: 30 x 2 micro-batches + 6 logs + flush, nothing rejected, one collective per log.
  EXPECT_EQ(number_field(summary, "flopmeter_event_calls"), 60 + 6 + 1);
  EXPECT_EQ(health_counter(summary, "bad_microbatches"), 0);
  EXPECT_EQ(health_counter(summary, "skipped_intervals"), 0);
  EXPECT_EQ(health_counter(summary, "collectives_started"), 6);
  const std::vector<json> metrics = read_records(out / "flopmeter_0.jsonl");
  ASSERT_EQ(metrics.size(), 6u);
  EXPECT_GT(number_field(metrics.back(), "perf/mfu"), 0);
}

// The trainer's --frozen and LoRA flags with the same regime in the plugin file: every record says the regime,
// and carries the Megatron constant's MFU beside the exact one, which is lower (the frozen decoder runs 4 of 6,
// a row without images 2 of 6; the constant bills 6).
TEST(ExampleTrainer, FrozenAndLoraRunsReportTheirRegime) {
  struct run_case {
    const char* name;
    const char* flags;
    const char* training;
    const char* flag_field;
  };
  for (const run_case& c :
       {run_case{"frozen_text", "--frozen text", "frozen = [\"text\"]\n", "train/frozen_text"},
        run_case{"lora", "--frozen vision,merger --lora-rank 4 --lora-targets q_proj,v_proj,in_proj_qkv",
                 "frozen = [\"vision\", \"merger\"]\nlora_rank = 4\nlora_targets = [\"q_proj\", "
                 "\"v_proj\", \"in_proj_qkv\"]\n",
                 "train/frozen_vision"}}) {
    const fs::path out = fresh_dir(c.name);
    std::string plugin = read_file(fs::path(FLOPMETER_SOURCE_DIR) / "examples/flopmeter_plugin.toml");
    const std::string relative = "\"../model_configs/tiny_vlm.toml\"";
    plugin.replace(plugin.find(relative), relative.size(),
                   "\"" + (fs::path(FLOPMETER_SOURCE_DIR) / "model_configs/tiny_vlm.toml").string() + "\"");
    std::ofstream(out / "plugin.toml") << plugin << "\n[training]\n" << c.training;
    const fs::path log = out / "console.log";
    ASSERT_EQ(run_command(trainer_command(out, std::string("--steps 10 --log-interval 5 ") + c.flags +
                                                   " --flopmeter-config '" + (out / "plugin.toml").string() + "'"),
                          log),
              0)
        << read_file(log);
    const std::vector<json> metrics = read_records(out / "flopmeter_0.jsonl");
    ASSERT_EQ(metrics.size(), 2u) << c.name;
    for (const json& record : metrics) {
      EXPECT_EQ(number_field(record, c.flag_field), 1) << c.name;
      EXPECT_EQ(number_field(record, "train/lora_rank"), std::string(c.name) == "lora" ? 4 : 0) << c.name;
      EXPECT_GT(number_field(record, "perf/mfu"), 0) << c.name;
      EXPECT_LT(number_field(record, "perf/mfu"), number_field(record, "perf/mfu_megatron")) << c.name;
    }
  }
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
  std::map<long, std::vector<json>> by_step;
  for (int rank = 0; rank < 2; ++rank) {
    for (const json& record : read_records(out / ("trainer_rank" + std::to_string(rank) + ".jsonl"))) {
      by_step[static_cast<long>(number_field(record, "step"))].push_back(record);
    }
  }
  const std::vector<json> metrics = read_records(out / "flopmeter_0.jsonl");
  ASSERT_EQ(metrics.size(), 2u) << "one JSONL line per log (steps 5 and 10), from rank 0";
  double tokens_seen = 0;
  for (const json& line : metrics) {
    const long step = static_cast<long>(number_field(line, "step"));
    const std::vector<json>& ranks = by_step[step];
    ASSERT_EQ(ranks.size(), 2u) << "step " << step;
    double expected_tps = 0, loss_sum = 0, labels = 0, real = 0;
    for (const json& r : ranks) {
      expected_tps += number_field(r, "real_tokens") / number_field(r, "interval_seconds");
      loss_sum += number_field(r, "loss_sum");
      labels += number_field(r, "label_tokens");
      real += number_field(r, "real_tokens");
    }
    // The ranks saw different data (data parallelism), so a per-rank mix-up would show.
    EXPECT_NE(number_field(ranks[0], "real_tokens"), number_field(ranks[1], "real_tokens"));
    const double reported = number_field(line, "perf/tokens_per_second");
    std::printf("step %ld: flopmeter perf/tokens_per_second %.3f, trainer sum over ranks %.3f\n", step, reported,
                expected_tps);
    // Equal up to where the two clocks are read (microseconds of a ~1 s interval).
    EXPECT_NEAR(reported / expected_tps, 1.0, 1e-3) << line.dump();
    EXPECT_NEAR(number_field(line, "perf/tokens_per_second_per_gpu"), reported / 2, 1e-9 * reported);
    EXPECT_NEAR(number_field(line, "train/loss"), loss_sum / labels, 1e-9);
    tokens_seen += real;
    EXPECT_EQ(number_field(line, "train/tokens_seen"), tokens_seen);
  }
  // Both ranks report the same global loss (gradients and the loss are all-reduced) and an overhead figure.
  EXPECT_EQ(number_array_field(read_summary(out / "summary_rank0.json"), "losses"),
            number_array_field(read_summary(out / "summary_rank1.json"), "losses"));
  EXPECT_NE(console.find("[rank 1] flopmeter overhead: "), std::string::npos) << console;
}

TEST(ExampleTrainer, TensorPathReportsWhatTheTrainerCounted) {
  const fs::path out = fresh_dir("tensor_path");
  const fs::path log = out / "console.log";
  ASSERT_EQ(run_command(trainer_command(out, "--steps 10 --log-interval 5 --flopmeter-path tensor"), log), 0)
      << read_file(log);
  const json summary = read_summary(out / "summary.json");
  EXPECT_EQ(summary.value("flopmeter_path", ""), "tensor") << summary.dump();
  // The path's human-readable description ("tensor path over c10d:gloo, counters on cpu").
  EXPECT_NE(summary.value("flopmeter_library", "").find("c10d:gloo, counters on cpu"), std::string::npos)
      << summary.dump();
  EXPECT_EQ(health_counter(summary, "bad_microbatches"), 0);
  EXPECT_EQ(health_counter(summary, "failed_collectives"), 0);
  EXPECT_EQ(number_field(summary, "flopmeter_event_calls"), 20 + 2 + 1);
  const std::vector<json> trainer = read_records(out / "trainer_rank0.jsonl");
  const std::vector<json> metrics = read_records(out / "flopmeter_0.jsonl");
  ASSERT_EQ(metrics.size(), 2u);
  ASSERT_EQ(trainer.size(), 2u);
  double seen = 0;
  for (std::size_t i = 0; i < metrics.size(); ++i) {
    seen += number_field(trainer[i], "real_tokens");
    EXPECT_EQ(number_field(metrics[i], "train/tokens_seen"), seen) << metrics[i].dump();
    EXPECT_DOUBLE_EQ(number_field(metrics[i], "train/batch_efficiency"),
                     number_field(trainer[i], "real_tokens") / number_field(trainer[i], "device_tokens"));
    EXPECT_NEAR(number_field(metrics[i], "perf/tokens_per_second") /
                    (number_field(trainer[i], "real_tokens") / number_field(trainer[i], "interval_seconds")),
                1.0, 1e-3)
        << metrics[i].dump();
    EXPECT_TRUE(std::isfinite(number_field(metrics[i], "perf/log_wait_ms"))) << metrics[i].dump();
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
