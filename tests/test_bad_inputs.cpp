// Bad inputs the other suites do not pin, each with the message that says what is wrong and where (the
// whole catalogue, with the tests that pin every entry, is in METRICS.md "Bad input catalogue"):
//   - options that only the running plugin can check: the layout against the communicator's world, the
//     rank, the peak, top-k, tpi_multiplier, the timeout; through a plugin file they also name the file;
//   - peaks that give no MFU: an unknown GPU, a precision the GPU lacks, no peak at all (one warning each);
//   - micro-batches the plugin rejects: the warning names the entry, and the batch is not counted.
#include <gtest/gtest.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/sinks/ostream_sink.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "flopmeter/error.h"
#include "flopmeter/throughput.h"
#include "support/capture_sink.h"
#include "support/captured_log.h"
#include "support/clocked_plugin.h"
#include "support/error_message.h"
#include "support/fake_group.h"
#include "support/fixed_rank.h"
#include "support/small_models.h"

namespace flopmeter {
namespace {

using testing::capture_sink;
using testing::captured_log;
using testing::fake_group;
using testing::small_vlm;

namespace fs = std::filesystem;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();

// A communicator that claims any rank and world (the plugin must refuse the impossible ones).
class claimed_rank final : public testing::fixed_rank_communicator {
 public:
  using fixed_rank_communicator::fixed_rank_communicator;
  std::string backend_name() const override { return "claimed"; }
  std::unique_ptr<pending_collective> start_allreduce_sum(double*, std::size_t) override {
    throw error("not used in these tests");
  }
};

std::string create_error(throughput_options o, std::shared_ptr<communicator> comm) {
  return testing::error_message_of([&] { (void)throughput_plugin::create(std::move(o), std::move(comm)); },
                                   "throughput_plugin::create");
}

throughput_options base_options() {
  throughput_options o;
  o.model = small_vlm();
  // Keeps the warnings of the create-error cases out of the test output.
  o.logger = std::make_shared<spdlog::logger>("quiet", std::make_shared<spdlog::sinks::null_sink_mt>());
  return o;
}

// ---- options that need the running plugin --------------------------------------------------------------

TEST(bad_inputs, layout_not_dividing_the_world) {
  throughput_options o = base_options();
  o.parallel = {2, 2, 1};
  EXPECT_EQ(create_error(o, std::make_shared<claimed_rank>(0, 6)),
            "key 'parallel': tp*cp*pp = 4 does not divide world_size 6");
}

TEST(bad_inputs, layout_larger_than_the_world) {
  throughput_options o = base_options();
  o.parallel = {8, 1, 2};
  EXPECT_EQ(create_error(o, std::make_shared<claimed_rank>(0, 8)),
            "key 'parallel': tp*cp*pp = 8*1*2 exceeds world_size 8");
}

TEST(bad_inputs, rank_outside_the_world) {
  EXPECT_EQ(create_error(base_options(), std::make_shared<claimed_rank>(4, 4)), "rank 4 is outside [0, 4)");
  EXPECT_EQ(create_error(base_options(), std::make_shared<claimed_rank>(-1, 4)), "rank -1 is outside [0, 4)");
  EXPECT_EQ(create_error(base_options(), std::make_shared<claimed_rank>(0, 0)), "world_size must be >= 1, got 0");
}

TEST(bad_inputs, peak_outside_its_documented_range) {
  // setting_range: [0.001, 100000] TFLOP/s. 1e300 would make every MFU ~0 and 1e-300 or the smallest subnormal
  // (5e-324) an MFU of ~1e300 %: a unit mix-up, refused at create() on every path (C++, C ABI, plugin file).
  for (const double peak :
       {0.0, -5.0, kNaN, std::numeric_limits<double>::infinity(), 1e300, 1e-300, 5e-324, 100000.5, 0.000999}) {
    throughput_options o = base_options();
    o.peak_tflops_per_gpu = peak;
    const std::string message = create_error(o, make_local_communicator());
    EXPECT_EQ(message.rfind("key 'peak_tflops_per_gpu': must be in [0.001, 100000] TFLOP/s (got ", 0), 0u) << message;
  }
  for (const double peak : {0.001, 100000.0}) {  // the bounds themselves are accepted
    throughput_options o = base_options();
    o.peak_tflops_per_gpu = peak;
    EXPECT_NO_THROW((void)throughput_plugin::create(std::move(o), make_local_communicator())) << peak;
  }
}

TEST(bad_inputs, other_options_the_plugin_refuses) {
  throughput_options o = base_options();
  o.topk = -1;
  EXPECT_EQ(create_error(o, make_local_communicator()), "key 'topk': must be >= 0 (got -1)");
  o = base_options();
  o.tpi_multiplier = 0.5;
  EXPECT_EQ(create_error(o, make_local_communicator()), "key 'tpi_multiplier': must be in [1, 1e6] (got 0.500000)");
  o.tpi_multiplier = 1e300;  // accepted before: documented range [1, 1e6]
  EXPECT_EQ(create_error(o, make_local_communicator()).rfind("key 'tpi_multiplier': must be in [1, 1e6]", 0), 0u);
  o = base_options();
  o.collective_timeout = std::chrono::milliseconds(-1);
  EXPECT_EQ(create_error(o, make_local_communicator()),
            "key 'collective_timeout': must be in [0, 3600000] ms (got -1 ms)");
  o.collective_timeout = std::chrono::milliseconds(3'600'001);  // an hour and a millisecond
  EXPECT_EQ(create_error(o, make_local_communicator()),
            "key 'collective_timeout': must be in [0, 3600000] ms (got 3600001 ms)");
  EXPECT_EQ(create_error(base_options(), nullptr),
            "a communicator is required (make_local_communicator() for one process)");
}

// An option error carries the option it is about as data, as a plugin file's error carries its key: a trainer
// that builds throughput_options in code reads where().key instead of parsing the text.
TEST(bad_inputs, an_option_error_names_its_option_as_data) {
  const std::vector<std::pair<std::string, std::function<void(throughput_options&)>>> cases = {
      {"topk", [](throughput_options& o) { o.topk = -1; }},
      {"tpi_multiplier", [](throughput_options& o) { o.tpi_multiplier = kNaN; }},
      {"collective_timeout", [](throughput_options& o) { o.collective_timeout = std::chrono::milliseconds(-1); }},
      {"peak_tflops_per_gpu", [](throughput_options& o) { o.peak_tflops_per_gpu = 0.0; }},
  };
  for (const auto& [option, spoil] : cases) {
    throughput_options o = base_options();
    spoil(o);
    try {
      (void)throughput_plugin::create(std::move(o), make_local_communicator());
      ADD_FAILURE() << option << " was accepted";
    } catch (const error& e) {
      EXPECT_EQ(e.where().key, option);
      EXPECT_TRUE(e.where().file.empty()) << e.where().file;                   // set in code: no file to name
      EXPECT_EQ(e.description().rfind("must be ", 0), 0u) << e.description();  // the problem alone
      EXPECT_EQ(std::string(e.what()), "key '" + option + "': " + e.description());
    }
  }
  try {
    (void)accumulation_schedule(0.5);
    ADD_FAILURE() << "accumulation_schedule(0.5) was accepted";
  } catch (const error& e) {
    EXPECT_EQ(e.where().key, "tpi_multiplier");
    EXPECT_EQ(e.description(), "must be a finite number >= 1 (got 0.500000)");
  }
}

// A plugin file whose layout does not fit the communicator's world: only known at start, but the message
// still names the file the layout came from, at the [parallel] table (line 3, column 1: after [model] and
// its config line). Before, it named the file alone ("path: key 'parallel': ...").
TEST(bad_inputs, plugin_file_layout_not_dividing_the_world_names_the_file) {
  const fs::path path = fs::temp_directory_path() / ("flopmeter_bad_inputs_" + std::to_string(::getpid()) + ".toml");
  std::ofstream(path) << "[model]\nconfig = \"" FLOPMETER_SOURCE_DIR "/model_configs/tiny_vlm.toml\"\n"
                      << "[parallel]\ntp = 4\n[sinks]\nconsole = false\n";
  auto group = std::make_shared<fake_group>(6);
  try {
    (void)create_throughput_plugin(path.string(), group->rank(0));
    ADD_FAILURE() << "no error";
  } catch (const error& e) {
    EXPECT_EQ(std::string(e.what()), path.string() + ":3:1: key 'parallel': tp*cp*pp = 4 does not divide world_size 6");
  }
  fs::remove(path);
}

// The new user's case: [parallel] tp = 2 in a one-rank run. The table is on line 3 (after [model] and its
// config line), so the error is at 3:1, key 'parallel'; tp*cp*pp = 2*1*1 (tp 2, cp and pp defaulting to 1).
TEST(bad_inputs, plugin_file_layout_larger_than_the_world_is_located) {
  const fs::path path =
      fs::temp_directory_path() / ("flopmeter_bad_inputs_tp2_" + std::to_string(::getpid()) + ".toml");
  std::ofstream(path) << "[model]\nconfig = \"" FLOPMETER_SOURCE_DIR "/model_configs/tiny_vlm.toml\"\n"
                      << "[parallel]\ntp = 2\n[sinks]\nconsole = false\n";
  EXPECT_EQ(testing::error_message_of([&] { (void)create_throughput_plugin(path.string(), make_local_communicator()); },
                                      "create_throughput_plugin"),
            path.string() + ":3:1: key 'parallel': tp*cp*pp = 2*1*1 exceeds world_size 1");
  fs::remove(path);
}

// ---- [sinks] across ranks ----------------------------------------------------------------------------------

// A fresh directory for the sink files of one test, and a plugin file there with the given [logging] emit
// and [sinks] lines (the sink paths relative to the working directory, so the tests give absolute ones).
struct sink_files {
  fs::path dir;
  fs::path config;
  sink_files(const std::string& name, const std::string& emit, const std::string& sinks) {
    dir = fs::temp_directory_path() / ("flopmeter_sink_files_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    config = dir / "plugin.toml";
    std::ofstream(config) << "[model]\nconfig = \"" FLOPMETER_SOURCE_DIR "/model_configs/tiny_vlm.toml\"\n"
                          << "[logging]\nemit = \"" << emit << "\"\n"
                          << "[sinks]\nconsole = false\n"
                          << sinks;
  }
  ~sink_files() { fs::remove_all(dir); }
  std::string create_error(const std::shared_ptr<communicator>& comm) const {
    return testing::error_message_of([&] { (void)create_throughput_plugin(config.string(), comm); },
                                     "create_throughput_plugin");
  }
};

// emit = "all" with 2 ranks and a JSONL path without {rank}: both ranks would append to one file. Refused at
// the key: line 7 (after 2 lines of [model], 2 of [logging], [sinks] and console), column 9 (after `jsonl = `),
// before any file is made; the suggestion puts _{rank} before the extension. With one rank it is accepted.
TEST(bad_inputs, emit_all_with_a_jsonl_path_shared_by_the_ranks_is_refused_at_the_key) {
  const fs::path file = fs::temp_directory_path() / ("flopmeter_shared_" + std::to_string(::getpid()) + ".jsonl");
  fs::remove(file);
  const sink_files files("jsonl", "all", "jsonl = \"" + file.string() + "\"\n");
  auto group = std::make_shared<fake_group>(2);
  const std::string suggestion =
      (file.parent_path() / ("flopmeter_shared_" + std::to_string(::getpid()) + "_{rank}.jsonl")).string();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(files.create_error(group->rank(r)),
              files.config.string() +
                  ":7:9: key 'sinks.jsonl': has no {rank}, and with [logging] emit = \"all\" each of the 2 ranks "
                  "writes its records there: they would all append to this one file, each record once per rank, "
                  "with no rank in it. Add {rank} to the path (e.g. \"" +
                  suggestion + "\"), or set emit = \"rank0\"")
        << "rank " << r;
  }
  EXPECT_FALSE(fs::exists(file));
  EXPECT_NO_THROW((void)create_throughput_plugin(files.config.string(), make_local_communicator()));
  EXPECT_TRUE(fs::exists(file));  // one rank: its own file
  fs::remove(file);
}

// The same for TensorBoard: event file names carry the host and process id, so the files would not collide,
// but TensorBoard shows every event file of a directory as one run. Refused at sinks.tensorboard (7:15).
TEST(bad_inputs, emit_all_with_a_tensorboard_dir_shared_by_the_ranks_is_refused_at_the_key) {
  const sink_files files("tensorboard", "all", "tensorboard = \"tb\"\n");
  auto group = std::make_shared<fake_group>(3);
  const std::string message = files.create_error(group->rank(1));
  EXPECT_EQ(message.rfind(files.config.string() + ":7:15: key 'sinks.tensorboard': has no {rank}, and with [logging] "
                                                  "emit = \"all\" each of the 3 ranks",
                          0),
            0u)
      << message;
  EXPECT_NE(message.find("(e.g. \"tb/rank{rank}\")"), std::string::npos) << message;
}

// With the default emit = "rank0" only rank 0 writes records, so only rank 0 makes the [sinks] files: rank 1
// of 2 used to create its own, empty, m_1.jsonl.
TEST(bad_inputs, ranks_that_do_not_emit_create_no_sink_files) {
  const fs::path dir = fs::temp_directory_path() / ("flopmeter_rank0_files_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const sink_files files("rank0", "rank0", "jsonl = \"" + (dir / "m_{rank}.jsonl").string() + "\"\n");
  auto group = std::make_shared<fake_group>(2);
  auto rank0 = create_throughput_plugin(files.config.string(), group->rank(0));
  auto rank1 = create_throughput_plugin(files.config.string(), group->rank(1));
  EXPECT_TRUE(fs::exists(dir / "m_0.jsonl"));
  EXPECT_FALSE(fs::exists(dir / "m_1.jsonl"));
  fs::remove_all(dir);
}

// A config path that names something huge by mistake is refused after 16 MiB, not read whole.
TEST(bad_inputs, config_file_larger_than_16_mib_is_not_read_whole) {
  const fs::path path = fs::temp_directory_path() / ("flopmeter_bad_inputs_big_" + std::to_string(::getpid()) + ".toml");
  {
    std::ofstream out(path, std::ios::binary);
    const std::string line(1023, '#');
    for (int i = 0; i < 17 * 1024; ++i) out << line << '\n';  // 17 MiB of comments
  }
  try {
    (void)load_throughput_options(path.string());
    ADD_FAILURE() << "no error";
  } catch (const error& e) {
    EXPECT_EQ(std::string(e.what()), path.string() + ": cannot read plugin config: larger than 16 MiB, so not a config file");
  }
  fs::remove(path);
}

// ---- peaks that give no MFU ----------------------------------------------------------------------------

struct peak_case {
  const char* name;
  std::optional<std::string> gpu;
  peak_precision precision;
  const char* warning;  // the start of the one warning
};

TEST(bad_inputs, peaks_without_a_number_give_no_mfu_and_one_warning) {
  const peak_case cases[] = {
      {"unknown_gpu", std::string("Z100"), peak_precision::bf16,
       "warning|flopmeter: no bf16 peak FLOP/s for GPU 'Z100'; perf/mfu will not be reported. Set "
       "peak_tflops_per_gpu, or gpu to one of: A100 SXM, "},
      {"precision_the_gpu_lacks", std::string("NVIDIA A100-SXM4-80GB"), peak_precision::fp8,
       "warning|flopmeter: no fp8 peak FLOP/s for GPU 'NVIDIA A100-SXM4-80GB'; perf/mfu will not be reported."},
      // The name is the user's: its control characters are escaped (\u00XX, flopmeter/error.h's
      // printable_text), so a config cannot clear the terminal the warning is printed on.
      {"gpu_name_with_control_characters", std::string("Z\x1b[2J\xC2\x9B"), peak_precision::bf16,
       "warning|flopmeter: no bf16 peak FLOP/s for GPU 'Z\\u001b[2J\\u009b'; perf/mfu will not be reported."},
      {"no_peak_at_all", std::nullopt, peak_precision::bf16,
       "warning|flopmeter: neither peak_tflops_per_gpu nor gpu is configured; perf/mfu will not be reported"},
  };
  for (const peak_case& c : cases) {
    captured_log log;
    throughput_options o = base_options();
    o.logger = log.logger;
    if (c.gpu) o.gpu = *c.gpu;
    o.precision = c.precision;
    testing::clocked_plugin run(o, make_local_communicator());
    auto& [sink, now, plugin] = run;
    EXPECT_FALSE(plugin->peak_tflops_per_gpu().has_value()) << c.name;
    // A micro-batch per interval: intervals before the first one would be warm-ups, written nowhere.
    const std::vector<std::int64_t> lengths = {16};
    microbatch_event batch;
    batch.document_lengths = lengths;
    for (int step = 1; step <= 3; ++step) {
      plugin->on_microbatch(batch);
      now += 1;
      plugin->on_log(log_event{});
    }
    plugin->flush();
    ASSERT_EQ(sink->records.size(), 3u) << c.name;
    for (std::size_t i = 0; i < 3; ++i) {
      EXPECT_FALSE(sink->has(i, "perf/mfu")) << c.name;  // never a fallback number
      EXPECT_FALSE(sink->has(i, "perf_topk/mfu_slow_0")) << c.name;
    }
    EXPECT_EQ(log.text().rfind(c.warning, 0), 0u) << c.name << ": " << log.text();
    EXPECT_EQ(log.text().find('\n'), log.text().size() - 1) << c.name << ": more than one line: " << log.text();
  }
}

// ---- micro-batches the plugin rejects ------------------------------------------------------------------

struct batch_case {
  const char* name;
  std::vector<std::int64_t> lengths, cu_seqlens, positions;
  std::vector<image_grid> grids;
  std::int64_t padding = 0;
  std::int64_t samples = 1;
  std::optional<double> loss;
  std::optional<std::int64_t> labels;
  const char* message;  // what the warning says after "flopmeter: micro-batch not counted: "
};

TEST(bad_inputs, rejected_microbatch_warning_names_the_entry_and_the_batch_is_not_counted) {
  // One case a row.
  // clang-format off
  const batch_case cases[] = {
      {"negative_length", {3, -1}, {}, {}, {}, 0, 1, {}, {}, "document_lengths[1]: document length must be >= 0 (got -1)"},
      {"document_too_long", {5000000000}, {}, {}, {}, 0, 1, {}, {},
       "document_lengths[0] = 5000000000: causal pair count overflows a 64-bit count"},
      {"cu_seqlens_not_from_zero", {}, {2, 5}, {}, {}, 0, 1, {}, {}, "cu_seqlens[0] must be 0 (got 2)"},
      {"cu_seqlens_decreasing", {}, {0, 5, 4}, {}, {}, 0, 1, {}, {},
       "cu_seqlens[2] = 4 is less than cu_seqlens[1] = 5 (cu_seqlens must be non-decreasing)"},
      {"positions_skip", {}, {}, {0, 1, 3}, {}, 0, 1, {}, {},
       "positions[2] = 3: expected 0 (a new document) or 2"},
      {"two_descriptions", {4}, {0, 4}, {}, {}, 0, 1, {}, {},
       "a micro-batch gives more than one of document_lengths, cu_seqlens, positions"},
      {"negative_padding", {4}, {}, {}, {}, -3, 1, {}, {}, "padding_tokens must be >= 0 (got -3)"},
      {"device_tokens_overflow", {1}, {}, {}, {}, kMax, 1, {}, {},
       "real tokens + padding_tokens overflows a 64-bit count"},
      {"grid_with_zero_side", {}, {}, {}, {{1, 2, 2}, {1, 0, 2}}, 0, 1, {}, {},
       "grid_thw[1] = (1, 0, 2): t, h and w must be >= 1"},
      {"grid_not_multiple_of_merge", {}, {}, {}, {{1, 3, 2}}, 0, 1, {}, {},
       "grid_thw[0] = (1, 3, 2): h and w must be multiples of spatial_merge_size 2"},
      {"grid_patch_count_overflows", {}, {}, {}, {{1000000, 1000000, 1000000}}, 0, 1, {}, {},
       "grid_thw[0] = (1000000, 1000000, 1000000): patch or pair count overflows a 64-bit count"},
      {"negative_samples", {4}, {}, {}, {}, 0, -2, {}, {}, "samples must be >= 0 (got -2)"},
      {"negative_label_tokens", {4}, {}, {}, {}, 0, 1, 2.0, -4, "label_tokens must be >= 0"},
      {"loss_not_finite", {4}, {}, {}, {}, 0, 1, kNaN, 4, "loss_sum is not finite"},
      // 4 real tokens, 1000 label tokens: counted, train/loss would read 2/1000 = 0.002 instead of at least 2/4.
      {"label_tokens_beyond_real_tokens", {4}, {}, {}, {}, 0, 1, 2.0, 1000,
       "label_tokens 1000 exceeds the micro-batch's 4 real tokens (a loss is averaged over at most every token)"},
  };
  // clang-format on
  for (const batch_case& c : cases) {
    captured_log log;
    throughput_options o = base_options();
    o.logger = log.logger;
    o.peak_tflops_per_gpu = 1.0;  // no peak warning in the log
    testing::clocked_plugin run(o, make_local_communicator());
    auto& [sink, now, plugin] = run;
    microbatch_event e;
    e.document_lengths = c.lengths;
    e.cu_seqlens = c.cu_seqlens;
    e.positions = c.positions;
    e.grid_thw = c.grids;
    e.padding_tokens = c.padding;
    e.samples = c.samples;
    e.loss_sum = c.loss;
    e.label_tokens = c.labels;
    plugin->on_microbatch(e);
    const std::vector<std::int64_t> good = {10};
    microbatch_event ok;
    ok.document_lengths = good;
    plugin->on_microbatch(ok);
    now = 1;
    plugin->on_log(log_event{});
    plugin->flush();
    EXPECT_EQ(log.text(), std::string("warning|flopmeter: micro-batch not counted: ") + c.message + "\n") << c.name;
    EXPECT_EQ(plugin->health().bad_microbatches, 1u) << c.name;
    ASSERT_EQ(sink->records.size(), 1u) << c.name;
    EXPECT_EQ(sink->value(0, "train/tokens_seen"), 10.0) << c.name;  // only the good batch
    EXPECT_EQ(sink->value(0, "perf/step_time"), 0.5) << c.name;      // both ran: 1 s / 2 micro-batches
  }
}

// A custom clock reading 0, then 5e-324 s: a positive, finite interval, but 10 tokens over it is ~2e324
// tokens/s, beyond the largest double (1.8e308). Before, the record said tokens_per_second = inf (JSONL null)
// and nothing was counted; now the interval is skipped like a zero one. The next interval, 1 - 5e-324 = 1 s
// with 10 tokens, reads 10 tokens/s.
TEST(bad_inputs, an_interval_too_short_for_finite_rates_is_skipped_and_counted) {
  captured_log log;
  throughput_options o = base_options();
  o.logger = log.logger;
  o.peak_tflops_per_gpu = 1.0;
  testing::clocked_plugin run(o, make_local_communicator());
  auto& [sink, now, plugin] = run;
  const std::vector<std::int64_t> ten = {10};
  microbatch_event e;
  e.document_lengths = ten;
  plugin->on_microbatch(e);
  now = 5e-324;
  log_event l;
  l.step = 1;
  plugin->on_log(l);
  plugin->on_microbatch(e);
  now = 1;
  l.step = 2;
  plugin->on_log(l);
  plugin->flush();
  ASSERT_EQ(sink->records.size(), 1u);
  EXPECT_EQ(sink->records[0].step, 2);
  EXPECT_EQ(sink->value(0, "perf/tokens_per_second"), 10.0);
  EXPECT_EQ(plugin->health().skipped_intervals, 1u);
  EXPECT_NE(log.text().find("rank 0 reported an interval of 4.94066e-324 s, too short for its rates to be finite "
                            "numbers"),
            std::string::npos)
      << log.text();
}

TEST(bad_inputs, interval_sums_that_would_overflow_reject_the_batch_that_overflows) {
  // Each batch is valid, but the second would push the interval's sample count past int64: it is rejected,
  // not wrapped; the first stays counted. (The label-token count cannot get there any more: a batch's label
  // tokens are at most its real tokens, below 2^34 by the causal-pair bound, so it would take 2^29 batches.)
  for (const bool labels : {false}) {
    captured_log log;
    throughput_options o = base_options();
    o.logger = log.logger;
    o.peak_tflops_per_gpu = 1.0;
    auto plugin = throughput_plugin::create(o, make_local_communicator());
    const std::vector<std::int64_t> doc = {4};
    microbatch_event e;
    e.document_lengths = doc;
    e.samples = labels ? 1 : kMax;
    if (labels) {
      e.loss_sum = 1.0;
      e.label_tokens = kMax;
    }
    plugin->on_microbatch(e);
    plugin->on_microbatch(e);
    EXPECT_EQ(plugin->health().bad_microbatches, 1u);
    EXPECT_EQ(log.text(), labels ? "warning|flopmeter: micro-batch not counted: the interval's label token "
                                   "count overflows a 64-bit count\n"
                                 : "warning|flopmeter: micro-batch not counted: the interval's sample count "
                                   "overflows a 64-bit count\n");
  }
}

// ---- log fields the plugin leaves out ------------------------------------------------------------------

// A log whose optional fields break their rules (check_log_fields): the record leaves them out as if not
// reported, and one warning names them (the rules themselves: derive.log_fields_that_break_...). Every
// other figure of the record is unaffected: the interval still has its tokens.
TEST(bad_inputs, log_fields_that_break_their_rules_are_left_out_with_one_warning) {
  captured_log log;
  throughput_options o = base_options();
  o.logger = log.logger;
  o.peak_tflops_per_gpu = 1.0;
  testing::clocked_plugin run(o, make_local_communicator());
  auto& [sink, now, plugin] = run;
  const std::vector<std::int64_t> doc = {4};
  microbatch_event e;
  e.document_lengths = doc;
  plugin->on_microbatch(e);
  now += 1;
  log_event l;
  l.step = 1;
  l.learning_rate = 0.001;                                       // kept
  l.grad_norm = -1.0;                                            // left out
  l.data_time = std::chrono::duration<double>(-5.0);             // left out
  l.forward_backward_time = std::chrono::duration<double>(0.5);  // kept
  plugin->on_log(l);
  plugin->flush();
  ASSERT_EQ(sink->records.size(), 1u);
  EXPECT_FALSE(sink->has(0, "train/grad_norm"));
  EXPECT_FALSE(sink->has(0, "perf/data_time"));
  EXPECT_EQ(sink->value(0, "train/lr"), 0.001);
  EXPECT_EQ(sink->value(0, "perf/fwd_bwd_time"), 0.5);
  EXPECT_EQ(sink->value(0, "train/tokens_seen"), 4.0);
  EXPECT_EQ(log.text(),
            "warning|flopmeter: step 1: left out of the record: grad_norm -1 (must be finite and >= 0), "
            "data_time -5 s (must be finite and in [0, 1e6] s)\n");
}

}  // namespace
}  // namespace flopmeter
