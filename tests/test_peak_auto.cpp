// [peak] gpu = "auto": the plugin reads the name of the GPU it runs on when it starts (the CUDA driver, loaded
// at run time) and looks it up in the peak table. Without a device there is no MFU and exactly one warning that
// names the situation; a device the table does not know gives no MFU and one warning naming the device. The
// expectations follow what detect_cuda_device() finds on the machine the test runs on: on a CPU-only machine
// the no-device case, on a GPU machine the device's own row (or its warning when the table lacks it).

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "hardware/device_name.h"
#include "flopmeter/communicator.h"
#include "flopmeter/peak_table.h"
#include "flopmeter/throughput.h"
#include "support/capture_sink.h"
#include "support/captured_log.h"
#include "support/clocked_plugin.h"
#include "support/small_models.h"

namespace flopmeter {
namespace {

namespace fs = std::filesystem;
using testing::captured_log;

TEST(peak_auto, detection_gives_a_name_or_a_reason) {
  const detail::detected_device device = detail::detect_cuda_device();
  EXPECT_NE(device.name.empty(), device.why.empty()) << "name '" << device.name << "', why '" << device.why << "'";
  // Detection is repeatable (the plugin of every rank does it once).
  EXPECT_EQ(detail::detect_cuda_device().name, device.name);
}

// What the plugin must do on this machine, from what detection finds.
void expect_auto_outcome(const throughput_plugin& plugin, const captured_log& log, peak_precision precision) {
  const detail::detected_device device = detail::detect_cuda_device();
  const std::vector<std::string> lines = log.lines();
  if (device.name.empty()) {
    EXPECT_FALSE(plugin.peak_tflops_per_gpu().has_value());
    ASSERT_EQ(lines.size(), 1u) << log.text();
    EXPECT_EQ(lines[0].rfind("warning|flopmeter: gpu = \"auto\" found no GPU (" + device.why +
                                 "); perf/mfu will not be reported. Set peak_tflops_per_gpu, or gpu to one of: ",
                             0),
              0u)
        << lines[0];
    return;
  }
  const auto expected = find_peak(device.name, precision);
  if (expected) {
    ASSERT_TRUE(plugin.peak_tflops_per_gpu().has_value()) << device.name;
    EXPECT_DOUBLE_EQ(*plugin.peak_tflops_per_gpu(), expected->tflops) << device.name;
    EXPECT_TRUE(lines.empty()) << log.text();
  } else {
    EXPECT_FALSE(plugin.peak_tflops_per_gpu().has_value());
    ASSERT_EQ(lines.size(), 1u) << log.text();
    EXPECT_NE(lines[0].find("GPU '" + device.name + "' (the device gpu = \"auto\" found)"), std::string::npos)
        << lines[0];
  }
}

TEST(peak_auto, options_with_auto_resolve_the_device_at_start_up) {
  for (const peak_precision precision : {peak_precision::bf16, peak_precision::fp8}) {
    captured_log log;
    throughput_options o;
    o.model = testing::small_vlm();
    o.logger = log.logger;
    o.gpu = "auto";
    o.precision = precision;
    testing::clocked_plugin run(o, make_local_communicator());
    auto& [sink, now, plugin] = run;
    expect_auto_outcome(*plugin, log, precision);
    // Records carry perf/mfu exactly when a peak was found: never a fallback number.
    const std::vector<std::int64_t> lengths = {16};
    microbatch_event batch;
    batch.document_lengths = lengths;
    for (int step = 1; step <= 2; ++step) {
      plugin->on_microbatch(batch);
      now += 1;
      plugin->on_log(log_event{});
    }
    plugin->flush();
    ASSERT_EQ(sink->records.size(), 2u);
    for (std::size_t i = 0; i < 2; ++i) EXPECT_EQ(sink->has(i, "perf/mfu"), plugin->peak_tflops_per_gpu().has_value());
    // The one warning stays one: later logs do not repeat it.
    EXPECT_LE(log.lines().size(), 1u) << log.text();
  }
}

TEST(peak_auto, a_number_wins_over_auto_and_detection_is_skipped) {
  captured_log log;
  throughput_options o;
  o.model = testing::small_vlm();
  o.logger = log.logger;
  o.gpu = "auto";
  o.peak_tflops_per_gpu = 100.0;
  testing::clocked_plugin run(o, make_local_communicator());
  EXPECT_EQ(run.plugin->peak_tflops_per_gpu(), 100.0);
  EXPECT_TRUE(log.lines().empty()) << log.text();
}

TEST(peak_auto, plugin_file_with_gpu_auto) {
  const fs::path dir = fs::temp_directory_path() / ("flopmeter_peak_auto_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path config = dir / "flopmeter.toml";
  std::ofstream(config) << "[model]\nconfig = \"" << FLOPMETER_SOURCE_DIR
                        << "/model_configs/tiny_vlm.toml\"\n\n[peak]\ngpu = \"AUTO\"\n";
  const throughput_options o = load_throughput_options(config.string());
  EXPECT_EQ(o.gpu, "AUTO");  // kept as written; any case means auto
  EXPECT_TRUE(is_auto_gpu(o.gpu));
  captured_log log;
  const auto plugin = create_throughput_plugin(config.string(), make_local_communicator(), log.logger);
  expect_auto_outcome(*plugin, log, peak_precision::bf16);
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace flopmeter
