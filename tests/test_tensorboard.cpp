// The TensorBoard sink: CRC32C against published check values, the TFRecord framing byte by byte, and a real
// run whose event files are read back by TensorBoard's own reader (EventAccumulator, from the `tensorboard`
// package on PyPI in a venv under the build directory, created once and reused) and compared with the JSONL
// sink of the same run: the same tags, steps and values (as float32, TensorBoard's scalar type).
// Only where PyPI cannot be reached is that last test skipped, and it says so.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <array>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "flopmeter/communicator.h"
#include "flopmeter/error.h"
#include "flopmeter/events.h"
#include "flopmeter/tensorboard.h"
#include "flopmeter/throughput.h"
#include "output/tensorboard_records.h"
#include "support/captured_log.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using flopmeter::detail::append_tfrecord;
using flopmeter::detail::crc32c;
using flopmeter::detail::masked_crc32c;

TEST(Crc32c, PublishedCheckValues) {
  // The CRC catalogue's check value for CRC-32C (Castagnoli): the nine ASCII digits "123456789".
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  // RFC 3720 (iSCSI), appendix B.4: 32 bytes of 0x00, of 0xFF, and ascending 0x00..0x1F.
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xFF')), 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(crc32c(ascending), 0x46DD794Eu);
  EXPECT_EQ(crc32c(""), 0u);  // init 0xFFFFFFFF xor final 0xFFFFFFFF, nothing in between
}

TEST(Crc32c, MaskIsRotateRight15PlusTheConstant) {
  // crc = 0xE3069283: crc >> 15 = 0x0001C60D, crc << 17 (32 bits) = 0x25060000, OR = 0x2507C60D;
  // + 0xA282EAD8 = 0xC78AB0E5 (no carry out of 32 bits).
  EXPECT_EQ(masked_crc32c("123456789"), 0xC78AB0E5u);
}

TEST(TfRecord, FramingIsLengthCrcDataCrc) {
  std::string record;
  append_tfrecord(record, "abc");
  ASSERT_EQ(record.size(), 8u + 4u + 3u + 4u);
  const std::string length("\x03\0\0\0\0\0\0\0", 8);  // 3, little-endian uint64
  EXPECT_EQ(record.substr(0, 8), length);
  const auto u32_at = [&](std::size_t at) {
    std::uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(record[at + static_cast<std::size_t>(i)]);
    return v;
  };
  EXPECT_EQ(u32_at(8), masked_crc32c(length));
  EXPECT_EQ(record.substr(12, 3), "abc");
  EXPECT_EQ(u32_at(15), masked_crc32c("abc"));
}

TEST(TensorboardSink, BadDirectoryFailsAtCreate) {
  EXPECT_THROW(flopmeter::make_tensorboard_sink(""), flopmeter::error);
  // A directory under a regular file cannot be created.
  const fs::path file = fs::temp_directory_path() / ("flopmeter_tb_file_" + std::to_string(::getpid()));
  std::ofstream(file) << "x";
  try {
    flopmeter::make_tensorboard_sink((file / "runs").string());
    ADD_FAILURE() << "expected an error";
  } catch (const flopmeter::error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot create the directory"), std::string::npos) << e.what();
  }
  fs::remove(file);
}

TEST(TensorboardSink, PluginConfigKey) {
  // The example plugin file names a per-rank directory; "{rank}" stays until the plugin starts.
  const flopmeter::plugin_config c =
      flopmeter::load_plugin_config(std::string(FLOPMETER_SOURCE_DIR) + "/plugin_configs/example.toml");
  EXPECT_EQ(c.sinks.tensorboard_dir, "tensorboard/rank{rank}");
  // An empty directory is an error at its value: [sinks] is line 3, the key line 4, the value at column 15.
  const fs::path config = fs::temp_directory_path() / ("flopmeter_tb_config_" + std::to_string(::getpid()) + ".toml");
  std::ofstream(config) << "[model]\nconfig = \"" << FLOPMETER_SOURCE_DIR << "/model_configs/tiny_vlm.toml\"\n"
                        << "[sinks]\ntensorboard = \"\"\n";
  try {
    flopmeter::load_throughput_options(config.string());
    ADD_FAILURE() << "expected an error";
  } catch (const flopmeter::error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(config.string() + ":4:15:"), std::string::npos) << what;
    EXPECT_NE(what.find("sinks.tensorboard"), std::string::npos) << what;
    EXPECT_NE(what.find("must not be empty"), std::string::npos) << what;
  }
  fs::remove(config);
}

// ---- files removed mid-run, a full disk ------------------------------------------------------------------

std::vector<fs::path> event_files(const fs::path& directory) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(directory)) files.push_back(entry.path());
  return files;
}

// The number of whole TFRecords in `file` (8-byte little-endian length, 4-byte CRC, data, 4-byte CRC), or -1
// when it ends inside one (a torn record, where TensorBoard's reader stops).
int whole_records(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::size_t at = 0;
  int records = 0;
  while (at < bytes.size()) {
    if (bytes.size() - at < 12) return -1;
    std::uint64_t length = 0;
    for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<unsigned char>(bytes[at + i]);
    at += 12;
    if (bytes.size() - at < length + 4) return -1;
    at += length + 4;
    ++records;
  }
  return records;
}

fs::path fresh_directory(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("flopmeter_tb_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

flopmeter::metrics_record record_at(std::int64_t step) { return {step, {{"perf/tokens_per_second", 100.0}}}; }

TEST(TensorboardSink, ARemovedEventFileOrDirectoryIsReplacedWithAWarningNotWrittenIntoTheVoid) {
  const fs::path dir = fresh_directory("removed");
  flopmeter::testing::captured_log log;
  auto sink = flopmeter::make_tensorboard_sink(dir.string(), log.logger);
  sink->write(record_at(1));
  ASSERT_EQ(event_files(dir).size(), 1u);
  // The file removed: before, records 2.. went on into the unlinked file, with no warning and nothing counted.
  fs::remove(event_files(dir)[0]);
  sink->write(record_at(2));
  EXPECT_EQ(sink->failures(), 0u);
  ASSERT_EQ(event_files(dir).size(), 1u);
  EXPECT_EQ(whole_records(event_files(dir)[0]), 2);  // a new file: its header, then step 2
  EXPECT_NE(log.text().find("was removed or replaced while open; starting a new one"), std::string::npos) << log.text();
  // The whole directory removed: recreated, with a new file.
  fs::remove_all(dir);
  sink->write(record_at(3));
  sink->write(record_at(4));
  EXPECT_EQ(sink->failures(), 0u);
  ASSERT_TRUE(fs::is_directory(dir));
  ASSERT_EQ(event_files(dir).size(), 1u);
  EXPECT_EQ(whole_records(event_files(dir)[0]), 3);  // header, steps 3 and 4
  fs::remove_all(dir);
}

// A file size limit (RLIMIT_FSIZE) stands in for a full disk: a write past it fails with EFBIG, as one past
// the end of a full disk fails with ENOSPC, and the test needs no privileges or special file system.
struct file_size_limit {
  rlimit saved{};
  void (*saved_handler)(int) = nullptr;
  explicit file_size_limit(rlim_t bytes) {
    saved_handler = std::signal(SIGXFSZ, SIG_IGN);  // the write fails instead of killing the process
    ::getrlimit(RLIMIT_FSIZE, &saved);
    rlimit limit = saved;
    limit.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~file_size_limit() {
    ::setrlimit(RLIMIT_FSIZE, &saved);
    std::signal(SIGXFSZ, saved_handler);
  }
};

TEST(TensorboardSink, AFullDiskCostsRecordsInOneFileNotANewFilePerRecord) {
  const fs::path dir = fresh_directory("full");
  flopmeter::testing::captured_log log;
  auto sink = flopmeter::make_tensorboard_sink(dir.string(), log.logger);
  const fs::path file = event_files(dir).at(0);
  const std::uintmax_t header_size = fs::file_size(file);
  sink->write(record_at(1));
  const std::uintmax_t size = fs::file_size(file);  // header + step 1
  {
    // Room for 10 more bytes: step 2 is written in part and fails; the part is cut off again, so the file
    // still ends on a whole record (a torn one would end TensorBoard's reading of it).
    file_size_limit limit(size + 10);
    sink->write(record_at(2));
    EXPECT_EQ(sink->failures(), 1u);
    EXPECT_EQ(fs::file_size(file), size);
  }
  {
    // No room at all beyond a new file's header: steps 3..29 (27 records) fail. Before, each failure closed
    // the file and the next record opened a new one, whose header fitted and whose record did not: 27 files
    // holding a header each. Now they all fail on the one file.
    file_size_limit limit(header_size);
    for (std::int64_t step = 3; step <= 29; ++step) sink->write(record_at(step));
    EXPECT_EQ(sink->failures(), 28u);  // 1 + 27
    EXPECT_EQ(event_files(dir).size(), 1u);
  }
  // Room again: the same file resumes, and says so.
  sink->write(record_at(30));
  EXPECT_EQ(sink->failures(), 28u);
  ASSERT_EQ(event_files(dir).size(), 1u);
  EXPECT_EQ(whole_records(file), 3);  // header, steps 1 and 30
  EXPECT_NE(log.text().find("writing again"), std::string::npos) << log.text();
  fs::remove_all(dir);
}

// ---- the real reader ------------------------------------------------------------------------------------

struct command_result {
  int status = -1;
  std::string out;
};

command_result run_shell(const std::string& command) {
  command_result r;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buffer{};
  while (const std::size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe)) r.out.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string quoted(const std::string& s) {
  std::string out = "'";
  for (const char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The venv's python with `tensorboard` importable, installing it on first use. Empty with `skip_reason` set
// when PyPI cannot be reached; a failure for any other reason fails the test.
std::string tensorboard_python(std::string& skip_reason) {
  const fs::path venv = fs::path(FLOPMETER_BINARY_DIR) / "tensorboard-venv";
  const std::string python = (venv / "bin" / "python").string();
  const std::string check = quoted(python) + " -c 'import tensorboard.backend.event_processing.event_accumulator'";
  if (fs::exists(python) && run_shell(check).status == 0) return python;
  const command_result made = run_shell("python3 -m venv " + quoted(venv.string()));
  if (made.status != 0) {
    ADD_FAILURE() << "python3 -m venv failed (Debian: python3-venv):\n" << made.out;
    return "";
  }
  const command_result installed =
      run_shell(quoted(python) + " -m pip install --disable-pip-version-check -q tensorboard");
  if (installed.status == 0 && run_shell(check).status == 0) return python;
  // Installing failed: skip only if the package index itself cannot be reached.
  const command_result index = run_shell(quoted(python) + " -m pip index versions tensorboard");
  if (index.status != 0) {
    skip_reason = "PyPI cannot be reached, so TensorBoard's reader cannot be installed: " + index.out;
    return "";
  }
  ADD_FAILURE() << "pip install tensorboard failed although PyPI answers:\n" << installed.out;
  return "";
}

// TensorBoard's EventAccumulator over `dir`: {tag: [[step, value], ...]} as JSON.
const char* const kReadEvents = R"(import json, sys
from tensorboard.backend.event_processing import event_accumulator
acc = event_accumulator.EventAccumulator(sys.argv[1], size_guidance={event_accumulator.SCALARS: 0})
acc.Reload()
print(json.dumps({tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}))
)";

TEST(TensorboardSink, TensorboardReadsWhatTheJsonlSinkWrote) {
  std::string skip_reason;
  const std::string python = tensorboard_python(skip_reason);
  if (python.empty()) {
    if (!skip_reason.empty()) GTEST_SKIP() << skip_reason;
    return;  // a failure was recorded
  }

  const fs::path dir = fs::path(FLOPMETER_BINARY_DIR) / ("tensorboard_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path config = dir / "plugin.toml";
  std::ofstream(config) << "[model]\nconfig = \"" << FLOPMETER_SOURCE_DIR << "/model_configs/tiny_vlm.toml\"\n"
                        << "[peak]\ntflops_per_gpu = 0.5\n"
                        << "[sinks]\nconsole = false\n"
                        << "jsonl = \"" << (dir / "metrics_{rank}.jsonl").string() << "\"\n"
                        << "tensorboard = \"" << (dir / "tb" / "rank{rank}").string() << "\"\n";
  {
    auto plugin = flopmeter::create_throughput_plugin(config.string(), flopmeter::make_local_communicator());
    const std::vector<std::int64_t> lengths = {100, 60, 40};
    const std::vector<flopmeter::image_grid> grids = {{1, 4, 4}};
    for (int step = 1; step <= 12; ++step) {
      flopmeter::microbatch_event e;
      e.document_lengths = lengths;
      e.grid_thw = grids;
      e.samples = 3;
      e.loss_sum = 200.0 / step;
      e.label_tokens = 200;
      plugin->on_microbatch(e);
      if (step % 3 == 0) {
        flopmeter::log_event log;
        log.step = step;
        log.learning_rate = 1e-3 / step;
        plugin->on_log(log);
      }
    }
    plugin->flush();
  }

  // The JSONL sink's records: tag -> [(step, value as float32)].
  std::map<std::string, std::vector<std::pair<std::int64_t, float>>> expected;
  std::ifstream jsonl(dir / "metrics_0.jsonl");
  std::string line;
  int records = 0;
  while (std::getline(jsonl, line)) {
    const json record = json::parse(line);
    ++records;
    for (const auto& [name, value] : record.items()) {
      if (name == "step" || value.is_null()) continue;  // null (non-finite) is no point in TensorBoard
      expected[name].emplace_back(record.at("step").get<std::int64_t>(), static_cast<float>(value.get<double>()));
    }
  }
  ASSERT_GE(records, 3) << "the run logged too little to compare";
  ASSERT_TRUE(expected.count("perf/tokens_per_second"));

  ASSERT_TRUE(fs::is_directory(dir / "tb" / "rank0"));  // {rank} substituted
  const fs::path script = dir / "read_events.py";
  std::ofstream(script) << kReadEvents;
  const command_result read =
      run_shell(quoted(python) + " " + quoted(script.string()) + " " + quoted((dir / "tb" / "rank0").string()));
  ASSERT_EQ(read.status, 0) << read.out;
  // The reader prints one JSON line, last (TensorBoard may log warnings before it).
  std::string last_line;
  std::istringstream lines(read.out);
  for (std::string l; std::getline(lines, l);) {
    if (!l.empty() && l.front() == '{') last_line = l;
  }
  const json scalars = json::parse(last_line);
  std::map<std::string, std::vector<std::pair<std::int64_t, float>>> got;
  for (const auto& [tag, points] : scalars.items()) {
    for (const auto& point : points) {
      got[tag].emplace_back(point.at(0).get<std::int64_t>(), static_cast<float>(point.at(1).get<double>()));
    }
  }
  EXPECT_EQ(got.size(), expected.size());
  for (const auto& [tag, points] : expected) {
    ASSERT_TRUE(got.count(tag)) << tag;
    EXPECT_EQ(got[tag], points) << tag;
  }
  fs::remove_all(dir);
}

}  // namespace
