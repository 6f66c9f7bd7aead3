// Sinks: the JSON rendering, the JSONL file (including its failure and recovery paths), the console line
// and the callback sink.

#include <gtest/gtest.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <limits>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "flopmeter/error.h"
#include "flopmeter/sinks.h"
#include "output/json_line.h"
#include "output/sink_paths.h"
#include "output/sink_provenance.h"
#include "support/captured_log.h"
#include "support/json_reading.h"

namespace flopmeter {
namespace {

namespace fs = std::filesystem;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

using captured_logger = testing::captured_log;

// A fresh directory per test, removed afterwards.
struct temp_dir {
  fs::path path;
  temp_dir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = fs::temp_directory_path() /
           ("flopmeter_test_sinks_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

metrics_record record_at(std::int64_t step, double mfu) { return {step, {{"perf/mfu", mfu}, {"train/loss", 2.5}}}; }

// ---- metrics_record ------------------------------------------------------------------------------------

TEST(MetricsRecord, FindReturnsTheValueOrNull) {
  const metrics_record record{3, {{"perf/mfu", 41.5}, {"train/loss", 2.0}}};
  ASSERT_NE(record.find("train/loss"), nullptr);
  EXPECT_EQ(*record.find("train/loss"), 2.0);
  EXPECT_EQ(*record.find("perf/mfu"), 41.5);
  EXPECT_EQ(record.find("perf/tokens_per_second"), nullptr);
}

// ---- to_json_line --------------------------------------------------------------------------------------

TEST(JsonLine, ValuesInRecordOrder) {
  // 41.2 is not exactly representable; %.17g would print 41.200000000000003. The shortest string that
  // parses back to the same double is "41.2". Integral 3.0 prints as 3; NaN and Inf as null.
  const metrics_record record{20,
                              {{"perf/mfu", 41.2},
                               {"perf/tokens_per_second", 12345.5},
                               {"train/samples", 3.0},
                               {"perf/tflops_per_second", kNaN},
                               {"a", kInf},
                               {"b", -kInf},
                               {"train/loss", -0.25}}};
  EXPECT_EQ(detail::to_json_line(record),
            "{\"step\":20,\"perf/mfu\":41.2,\"perf/tokens_per_second\":12345.5,\"train/samples\":3,"
            "\"perf/tflops_per_second\":null,\"a\":null,\"b\":null,\"train/loss\":-0.25}");
}

TEST(JsonLine, EmptyRecordAndNegativeStep) {
  EXPECT_EQ(detail::to_json_line(metrics_record{}), "{\"step\":0}");
  EXPECT_EQ(detail::to_json_line(metrics_record{-1, {}}), "{\"step\":-1}");
}

TEST(JsonLine, NamesAreEscaped) {
  // quote -> \", backslash -> \\, newline -> \n, tab -> \t, 0x01 -> \u0001; UTF-8 passes through.
  const metrics_record record{1, {{"a\"b\\c\nd\te\x01", 1.0}, {"\xc2\xb5s", 2.0}}};
  EXPECT_EQ(detail::to_json_line(record), "{\"step\":1,\"a\\\"b\\\\c\\nd\\te\\u0001\":1,\"\xc2\xb5s\":2}");
}

TEST(JsonLine, IntegersBelowTwoTo53HaveNoExponentOrDecimal) {
  // 2^53 - 1 = 9007199254740991 is the largest integer below 2^53; it prints digit for digit.
  const metrics_record record{7, {{"n", 9007199254740991.0}, {"m", -123456789012.0}, {"z", -0.0}}};
  EXPECT_EQ(detail::to_json_line(record), "{\"step\":7,\"n\":9007199254740991,\"m\":-123456789012,\"z\":0}");
}

TEST(JsonLine, NonIntegralValuesRoundTripExactly) {
  // Whatever the text looks like, parsing it back must give the very same double (the %.17g guarantee).
  const double values[] = {0.1, 1.0 / 3.0, 2.0 / 3.0 * 1e-7, 1e20, 6.02214076e23, 1e-300, 123456.789,
                           9007199254740993.0 * 4, std::nextafter(1.0, 2.0)};
  for (double v : values) {
    const std::string line = detail::to_json_line(metrics_record{0, {{"v", v}}});
    const std::string prefix = "{\"step\":0,\"v\":";
    ASSERT_EQ(line.compare(0, prefix.size(), prefix), 0) << line;
    const std::string number = line.substr(prefix.size(), line.size() - prefix.size() - 1);
    EXPECT_EQ(testing::number_field(testing::parse_json(line), "v"), v) << line;  // read back by nlohmann-json
    EXPECT_EQ(number.find(','), std::string::npos) << line;  // never a decimal comma
  }
  EXPECT_EQ(detail::to_json_line(metrics_record{0, {{"v", 0.1}}}), "{\"step\":0,\"v\":0.1}");
}

// ---- JSONL sink ----------------------------------------------------------------------------------------

TEST(JsonlSink, WritesOneLinePerRecordAndAppends) {
  temp_dir dir;
  const fs::path path = dir.path / "metrics.jsonl";
  captured_logger log;
  {
    auto sink = make_jsonl_sink(path.string(), log.logger);
    EXPECT_FALSE(fs::exists(path));  // opened lazily, on the first record
    for (int step = 1; step <= 3; ++step) sink->write(record_at(step, 40.0 + step));
    EXPECT_EQ(sink->failures(), 0u);
  }
  {
    auto sink = make_jsonl_sink(path.string(), log.logger);  // a second run appends
    sink->write(record_at(4, 44.5));
    EXPECT_EQ(sink->failures(), 0u);
  }
  EXPECT_EQ(read_file(path),
            "{\"step\":1,\"perf/mfu\":41,\"train/loss\":2.5}\n"
            "{\"step\":2,\"perf/mfu\":42,\"train/loss\":2.5}\n"
            "{\"step\":3,\"perf/mfu\":43,\"train/loss\":2.5}\n"
            "{\"step\":4,\"perf/mfu\":44.5,\"train/loss\":2.5}\n");
  EXPECT_TRUE(log.lines().empty());
}

TEST(JsonlSink, MissingDirectoryCountsFailureThenRecoversWhenCreated) {
  temp_dir dir;
  const fs::path path = dir.path / "not_yet" / "metrics.jsonl";
  captured_logger log;
  auto sink = make_jsonl_sink(path.string(), log.logger);
  EXPECT_NO_THROW(sink->write(record_at(1, 40.0)));
  EXPECT_EQ(sink->failures(), 1u);
  ASSERT_EQ(log.lines().size(), 1u);
  EXPECT_EQ(log.lines()[0].rfind("error|", 0), 0u) << log.lines()[0];
  EXPECT_NE(log.lines()[0].find("cannot open"), std::string::npos) << log.lines()[0];
  EXPECT_NE(log.lines()[0].find(path.string()), std::string::npos) << log.lines()[0];

  // Within 60 s a second failure is counted but not logged again.
  sink->write(record_at(2, 40.0));
  EXPECT_EQ(sink->failures(), 2u);
  EXPECT_EQ(log.lines().size(), 1u);

  fs::create_directories(path.parent_path());
  sink->write(record_at(3, 40.0));
  EXPECT_EQ(sink->failures(), 2u);  // no new failure: the sink reopened the file
  EXPECT_EQ(read_file(path), "{\"step\":3,\"perf/mfu\":40,\"train/loss\":2.5}\n");
}

TEST(JsonlSink, FullDiskCountsFailureWithoutThrowing) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full on this system";
  captured_logger log;
  auto sink = make_jsonl_sink("/dev/full", log.logger);
  EXPECT_NO_THROW(sink->write(record_at(1, 40.0)));  // open succeeds, the write fails with ENOSPC
  EXPECT_EQ(sink->failures(), 1u);
  EXPECT_NO_THROW(sink->write(record_at(2, 40.0)));
  EXPECT_EQ(sink->failures(), 2u);
  ASSERT_EQ(log.lines().size(), 1u);  // rate-limited
  EXPECT_NE(log.lines()[0].find("cannot write"), std::string::npos) << log.lines()[0];
}

TEST(JsonlSink, RemovedFileIsRecreated) {
  temp_dir dir;
  const fs::path path = dir.path / "metrics.jsonl";
  captured_logger log;
  auto sink = make_jsonl_sink(path.string(), log.logger);
  sink->write(record_at(1, 40.0));
  ASSERT_TRUE(fs::remove(path));
  // Without the check this record would go to the unlinked file and be lost without a trace.
  sink->write(record_at(2, 40.0));
  EXPECT_EQ(sink->failures(), 0u);
  EXPECT_EQ(read_file(path), "{\"step\":2,\"perf/mfu\":40,\"train/loss\":2.5}\n");
  ASSERT_EQ(log.lines().size(), 1u);
  EXPECT_EQ(log.lines()[0].rfind("warning|", 0), 0u) << log.lines()[0];
}

TEST(JsonlSink, PartialLastLineIsTerminatedBeforeAppending) {
  // A run that died mid-write left '{"step":1,"x":' without a newline; the next record starts a new line
  // so that it, at least, is valid JSON.
  temp_dir dir;
  const fs::path path = dir.path / "metrics.jsonl";
  std::ofstream(path) << "{\"step\":1,\"x\":";
  captured_logger log;
  auto sink = make_jsonl_sink(path.string(), log.logger);
  sink->write(metrics_record{2, {}});
  sink->write(metrics_record{3, {}});
  EXPECT_EQ(read_file(path), "{\"step\":1,\"x\":\n{\"step\":2}\n{\"step\":3}\n");
  EXPECT_EQ(sink->failures(), 0u);
}

TEST(JsonlSink, EmptyPathIsASetupError) { EXPECT_THROW(make_jsonl_sink(""), error); }

// A sink's errors carry where they are as data (error_location), never as a prefix of their own name: a bad
// argument is named as the key, a file that cannot be written as the file, and the text is the problem alone.
TEST(JsonlSink, ItsErrorsCarryTheArgumentOrTheFileAsData) {
  const auto caught = [](const std::function<void()>& make) -> error {
    try {
      make();
    } catch (const error& e) {
      return e;
    }
    ADD_FAILURE() << "accepted";
    return error("");
  };
  const error empty = caught([] { (void)make_jsonl_sink(""); });
  EXPECT_EQ(empty.where().key, "path");
  EXPECT_EQ(std::string(empty.what()), "key 'path': is empty");
  const error rank_missing = caught([] { (void)make_jsonl_sink("m_{rank}.jsonl"); });
  EXPECT_EQ(rank_missing.where().key, "path");
  EXPECT_EQ(rank_missing.description().rfind("\"m_{rank}.jsonl\" contains {rank} but no rank was given", 0), 0u)
      << rank_missing.description();
  const error negative_rank = caught([] { (void)make_jsonl_sink("m_{rank}.jsonl", -1); });
  EXPECT_EQ(std::string(negative_rank.what()), "key 'rank': must be >= 0 (got -1)");
  const error no_callback = caught([] { (void)make_callback_sink(nullptr); });
  EXPECT_EQ(std::string(no_callback.what()), "key 'callback': is empty");

  // A record that cannot be written: the sink logs it once under its name, "flopmeter jsonl sink PATH: ...",
  // which sink_report writes in one place; the message itself does not spell the sink's name again.
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full on this system";
  captured_logger log;
  auto sink = make_jsonl_sink("/dev/full", log.logger);
  sink->write(record_at(1, 40.0));
  EXPECT_EQ(sink->failures(), 1u);
  ASSERT_EQ(log.lines().size(), 1u);
  const std::string line = log.lines()[0];
  const std::string expected =
      "error|flopmeter jsonl sink /dev/full: cannot write: No space left on device; the record is dropped";
  EXPECT_EQ(line.rfind(expected, 0), 0u) << line;
  EXPECT_EQ(line.find("jsonl sink", expected.find("jsonl sink") + 1), std::string::npos) << line;  // named once
}

// ---- make_sinks ----------------------------------------------------------------------------------------

TEST(MakeSinks, ConsoleThenJsonlWithEveryRankPlaceholderReplaced) {
  temp_dir dir;
  captured_logger log;
  sink_config config;
  config.jsonl_path = (dir.path / "m_{rank}_of_{rank}.jsonl").string();
  const auto sinks = make_sinks(config, 7, log.logger);
  ASSERT_EQ(sinks.size(), 2u);  // console (the default) first, then the JSONL file
  EXPECT_TRUE(fs::exists(dir.path / "m_7_of_7.jsonl"));  // opened (and created) at once: checked at create
  sinks[1]->write(record_at(3, 40.0));
  EXPECT_EQ(read_file(dir.path / "m_7_of_7.jsonl"), "{\"step\":3,\"perf/mfu\":40,\"train/loss\":2.5}\n");
  sinks[0]->write(record_at(3, 40.0));
  EXPECT_EQ(log.lines().size(), 1u);  // the console line

  config.console = false;
  config.jsonl_path.clear();
  EXPECT_TRUE(make_sinks(config, 0).empty());
}

// The message of the flopmeter::error make_sinks(config, rank) throws, "" and a failure when it throws none.
// make_sinks as from a plugin file: its errors located at `provenance` (detail::make_sinks).
std::string make_sinks_error(const sink_config& config, const detail::sink_provenance& provenance, int rank = 0) {
  try {
    (void)detail::make_sinks(config, provenance, rank, nullptr);
  } catch (const error& e) {
    return e.what();
  }
  ADD_FAILURE() << "make_sinks accepted jsonl '" << config.jsonl_path << "', tensorboard '" << config.tensorboard_dir
                << "'";
  return "";
}

std::string make_sinks_error(const sink_config& config, int rank = 0) {
  return make_sinks_error(config, detail::sink_provenance{}, rank);
}

// Open failures: located at the key (here a config built in code: the key alone), the path in
// double quotes, the system's reason, and a hint that follows from errno and is true for it.
TEST(MakeSinks, AJsonlPathInAMissingDirectoryNamesTheDirectory) {
  temp_dir dir;
  sink_config config;
  config.console = false;
  config.jsonl_path = (dir.path / "missing" / "m_{rank}.jsonl").string();
  // ENOENT: the first missing directory on the path is <dir>/missing, the whole parent.
  EXPECT_EQ(make_sinks_error(config, 3),
            "key 'sinks.jsonl': cannot open \"" + (dir.path / "missing" / "m_3.jsonl").string() +
                "\" for append: No such file or directory (the directory \"" + (dir.path / "missing").string() +
                "\" does not exist: create it first, or change [sinks] jsonl)");
  // Two levels missing: the first one is named, "on the path".
  config.jsonl_path = (dir.path / "a" / "b" / "m.jsonl").string();
  EXPECT_EQ(make_sinks_error(config), "key 'sinks.jsonl': cannot open \"" + config.jsonl_path +
                                          "\" for append: No such file or directory (the directory \"" +
                                          (dir.path / "a").string() +
                                          "\" on the path does not exist: create it first, or change [sinks] jsonl)");
}

TEST(MakeSinks, AJsonlPathThatIsADirectorySaysSoNotCreateTheDirectory) {
  temp_dir dir;
  sink_config config;
  config.console = false;
  config.jsonl_path = dir.path.string();
  // EISDIR: "create the directory first" would be wrong; the hint shows a file inside it instead.
  EXPECT_EQ(make_sinks_error(config),
            "key 'sinks.jsonl': cannot open \"" + dir.path.string() +
                "\" for append: Is a directory (the path is a directory; [sinks] jsonl names a file, e.g. \"" +
                (dir.path / "metrics.jsonl").string() + "\")");
}

TEST(MakeSinks, AnUnwritableDirectorySaysPermission) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes everywhere";
  temp_dir dir;
  fs::create_directory(dir.path / "locked");
  fs::permissions(dir.path / "locked", fs::perms::owner_read | fs::perms::owner_exec);
  sink_config config;
  config.console = false;
  config.jsonl_path = (dir.path / "locked" / "m.jsonl").string();
  EXPECT_EQ(make_sinks_error(config), "key 'sinks.jsonl': cannot open \"" + config.jsonl_path +
                                          "\" for append: Permission denied (this process may not create or write \"" +
                                          config.jsonl_path +
                                          "\": change [sinks] jsonl, or the permissions of its "
                                          "directory)");
  fs::permissions(dir.path / "locked", fs::perms::owner_all);
}

// The hint for each errno, also where the test cannot provoke it (as root, EACCES never happens).
TEST(MakeSinks, TheHintFollowsTheReason) {
  EXPECT_EQ(detail::open_failure_reason(EACCES, "/x/m.jsonl", "[sinks] jsonl", "metrics.jsonl"),
            "Permission denied (this process may not create or write \"/x/m.jsonl\": change [sinks] jsonl, or the "
            "permissions of its directory)");
  // Without a file example (the TensorBoard event file, whose name flopmeter makes) EISDIR has no hint.
  EXPECT_EQ(detail::open_failure_reason(EISDIR, "/x/tb", "[sinks] tensorboard"), "Is a directory");
  EXPECT_EQ(detail::open_failure_reason(ENOSPC, "/x/m.jsonl", "[sinks] jsonl"), "No space left on device");
  EXPECT_EQ(detail::open_failure_reason(0, "/x/m.jsonl", "[sinks] jsonl"), "I/O error");
}

TEST(MakeSinks, AnyOtherReasonIsTheSystemsAlone) {
  sink_config config;
  config.console = false;
  config.jsonl_path = "/proc/self/status";  // procfs refuses O_APPEND|O_CREAT writes with EINVAL
  EXPECT_EQ(make_sinks_error(config),
            "key 'sinks.jsonl': cannot open \"/proc/self/status\" for append: Invalid argument");
}

TEST(MakeSinks, ARelativePathNamesTheWorkingDirectoryItIsResolvedAgainst) {
  // fopen() resolves a relative path against the working directory; the message says which one that is.
  const std::string relative = "flopmeter_no_such_dir_" + std::to_string(::getpid()) + "/m.jsonl";
  sink_config config;
  config.console = false;
  config.jsonl_path = relative;
  const std::string cwd = fs::current_path().string();
  EXPECT_EQ(make_sinks_error(config),
            "key 'sinks.jsonl': cannot open \"" + relative + "\" (relative to the working directory \"" + cwd +
                "\") for append: No such file or directory (the directory \"flopmeter_no_such_dir_" +
                std::to_string(::getpid()) + "\" does not exist: create it first, or change [sinks] jsonl)");
}

TEST(MakeSinks, ARelativeJsonlPathStaysWhereItWasFirstOpened) {
  // The sink resolves the path when it is made: a later chdir() (trainers do) does not move the file.
  temp_dir dir;
  const fs::path before = fs::current_path();
  fs::current_path(dir.path);
  sink_config config;
  config.console = false;
  config.jsonl_path = "m.jsonl";
  const auto sinks = make_sinks(config, 0);
  fs::create_directory(dir.path / "elsewhere");
  fs::current_path(dir.path / "elsewhere");
  fs::remove(dir.path / "m.jsonl");  // removed: the next record reopens it, by its absolute path
  sinks.at(0)->write(record_at(1, 40.0));
  fs::current_path(before);
  EXPECT_EQ(read_file(dir.path / "m.jsonl"), "{\"step\":1,\"perf/mfu\":40,\"train/loss\":2.5}\n");
  EXPECT_FALSE(fs::exists(dir.path / "elsewhere" / "m.jsonl"));
}

TEST(MakeSinks, ErrorsAreReportedWhereThePathWasConfigured) {
  temp_dir dir;
  sink_config config;
  config.console = false;
  config.jsonl_path = (dir.path / "missing" / "m.jsonl").string();
  detail::sink_provenance provenance;
  provenance.jsonl_at = error_location{"p.toml", 5, 9, "sinks.jsonl"};
  try {
    (void)detail::make_sinks(config, provenance, 0, nullptr);
    FAIL() << "no error";
  } catch (const error& e) {
    EXPECT_EQ(e.where().file, "p.toml");
    EXPECT_EQ(e.where().line, 5u);
    EXPECT_EQ(e.where().column, 9u);
    EXPECT_EQ(e.where().key, "sinks.jsonl");
    EXPECT_EQ(std::string(e.what()).rfind("p.toml:5:9: key 'sinks.jsonl': cannot open \"", 0), 0u) << e.what();
  }
}

TEST(MakeSinks, ATensorboardDirectoryUnderAFileIsLocatedAndExplained) {
  temp_dir dir;
  std::ofstream(dir.path / "file") << "x";
  sink_config config;
  config.console = false;
  config.tensorboard_dir = (dir.path / "file" / "tb").string();
  detail::sink_provenance provenance;
  provenance.tensorboard_at = error_location{"p.toml", 4, 15, "sinks.tensorboard"};
  const std::string message = make_sinks_error(config, provenance);
  if (message.find("built without TensorBoard support") != std::string::npos) GTEST_SKIP() << message;
  // ENOTDIR: create_directories meets the regular file "file" where a directory must be.
  EXPECT_EQ(message, "p.toml:4:15: key 'sinks.tensorboard': cannot create the directory \"" + config.tensorboard_dir +
                         "\" for TensorBoard event files: Not a directory (a part of the path that must be a "
                         "directory is a file)");
}

TEST(MakeSinks, APathWithANulIsRefusedAndNothingIsCreated) {
  // fopen() would stop at the NUL and create <dir>/out.jsonl.
  temp_dir dir;
  sink_config config;
  config.console = false;
  config.jsonl_path = (dir.path / "out.jsonl").string() + std::string(1, '\0') + ".evil";
  EXPECT_EQ(make_sinks_error(config), "key 'sinks.jsonl': contains a NUL character (\\u0000)");
  EXPECT_FALSE(fs::exists(dir.path / "out.jsonl"));
  config.jsonl_path.clear();
  config.tensorboard_dir = (dir.path / "tb").string() + std::string(1, '\0') + "x";
  EXPECT_EQ(make_sinks_error(config), "key 'sinks.tensorboard': contains a NUL character (\\u0000)");
  EXPECT_FALSE(fs::exists(dir.path / "tb"));
  EXPECT_THROW((void)make_jsonl_sink((dir.path / "a").string() + std::string(1, '\0') + "b"), error);
}

// ---- console sink --------------------------------------------------------------------------------------

TEST(ConsoleSink, OneLineWithEveryKnownValue) {
  captured_logger log;
  auto sink = make_console_sink(log.logger);
  // Values chosen away from rounding ties: 12345.64 -> "12345.6" (1 decimal), 0.5123 -> "0.512"
  // (3 decimals), 0.931 -> "0.93" (2), 2.34561 -> "2.3456" (4), 0.0123 -> "0.01" (2).
  // Keys the line does not show (perf_topk/...) are ignored; the order is the line's, not the record's.
  const metrics_record record{20,
                              {{"train/loss", 2.34561},
                               {"perf/tokens_per_second", 12345.64},
                               {"perf/tokens_per_second_per_gpu", 3086.41},
                               {"perf/tflops_per_second", 123.44},
                               {"perf/mfu", 41.23},
                               {"perf/hfu", 52.06},
                               {"perf/step_time", 0.5123},
                               {"train/batch_efficiency", 0.931},
                               {"perf/mem_gib", 41.23},
                               {"perf_topk/mfu_min_0", 12.0},
                               {"perf/log_wait_ms", 0.0123}}};
  sink->write(record);
  EXPECT_EQ(sink->failures(), 0u);
  ASSERT_EQ(log.lines().size(), 1u);
  EXPECT_EQ(log.lines()[0],
            "info|step 20 | tok/s 12345.6 | tok/s/gpu 3086.4 | TFLOP/s/gpu 123.4 | MFU 41.2% | HFU 52.1% | "
            "mb_time 0.512s | eff 0.93 | mem 41.2GiB | loss 2.3456 | wait 0.01ms");
}

TEST(ConsoleSink, SmallTflopsAndMfuKeepThreeSignificantDigits) {
  // A CPU demo reports ~0.00114 TFLOP/s and ~0.228% MFU: with one decimal both would read 0.0. Below 1 they get
  // three significant digits ({:.3g}); other small fields (eff 0.931) keep their fixed decimals.
  captured_logger log;
  auto sink = make_console_sink(log.logger);
  sink->write(metrics_record{5,
                             {{"perf/tflops_per_second", 0.0011408},
                              {"perf/mfu", 0.22817},
                              {"train/batch_efficiency", 0.931}}});
  ASSERT_EQ(log.lines().size(), 1u);
  EXPECT_EQ(log.lines()[0], "info|step 5 | TFLOP/s/gpu 0.00114 | MFU 0.228% | eff 0.93");
}

TEST(ConsoleSink, MissingValuesAreSkippedAndMissingMfuIsNa) {
  captured_logger log;
  auto sink = make_console_sink(log.logger);
  sink->write(metrics_record{5, {{"perf/tokens_per_second", 100.0}, {"train/loss", kNaN}}});
  ASSERT_EQ(log.lines().size(), 1u);
  EXPECT_EQ(log.lines()[0], "info|step 5 | tok/s 100.0 | MFU n/a | loss n/a");
}

TEST(ConsoleSink, PrivateLoggerLeavesSpdlogGlobalsAlone) {
  const auto default_before = spdlog::default_logger();
  ::testing::internal::CaptureStderr();
  {
    auto sink = make_console_sink();
    sink->write(metrics_record{3, {{"perf/mfu", 50.0}}});
    EXPECT_EQ(sink->failures(), 0u);
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("step 3 | MFU 50.0%"), std::string::npos) << err;
  EXPECT_EQ(spdlog::get("flopmeter"), nullptr);  // not registered
  EXPECT_EQ(spdlog::default_logger(), default_before);
}

// ---- callback sink -------------------------------------------------------------------------------------

TEST(CallbackSink, DeliversRecords) {
  std::vector<std::int64_t> steps;
  auto sink = make_callback_sink([&](const metrics_record& r) { steps.push_back(r.step); });
  sink->write(metrics_record{1, {}});
  sink->write(metrics_record{2, {}});
  EXPECT_EQ(steps, (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(sink->failures(), 0u);
}

TEST(CallbackSink, ThrowingCallbackIsCountedNotPropagated) {
  int calls = 0;
  auto sink = make_callback_sink([&](const metrics_record& r) {
    ++calls;
    if (r.step == 1) throw std::runtime_error("user bug");
    if (r.step == 2) throw 7;
  });
  EXPECT_NO_THROW(sink->write(metrics_record{1, {}}));
  EXPECT_NO_THROW(sink->write(metrics_record{2, {}}));
  EXPECT_NO_THROW(sink->write(metrics_record{3, {}}));
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(sink->failures(), 2u);
}

TEST(CallbackSink, EmptyCallbackIsASetupError) { EXPECT_THROW(make_callback_sink(nullptr), error); }

// ---- flush ---------------------------------------------------------------------------------------------

// A sink whose flush_ fails the first time.
class failing_flush_sink final : public sink {
 public:
  int flushes = 0;

 protected:
  void write_(const metrics_record&) override {}
  void flush_() override {
    if (++flushes == 1) throw std::runtime_error("device gone");
  }
};

TEST(Sink, AFailingFlushIsCountedNotThrown) {
  failing_flush_sink s;
  EXPECT_NO_THROW(s.flush());
  EXPECT_NO_THROW(s.flush());
  EXPECT_EQ(s.flushes, 2);
  EXPECT_EQ(s.failures(), 1u);
}

TEST(Sink, FlushDoesNothingForASinkThatWritesThrough) {
  temp_dir dir;
  const fs::path path = dir.path / "m.jsonl";
  auto jsonl = make_jsonl_sink(path.string());
  jsonl->write(record_at(1, 40.0));
  EXPECT_NO_THROW(jsonl->flush());
  EXPECT_EQ(jsonl->failures(), 0u);
  EXPECT_EQ(read_file(path), "{\"step\":1,\"perf/mfu\":40,\"train/loss\":2.5}\n");  // written before the flush
  auto callback = make_callback_sink([](const metrics_record&) {});
  EXPECT_NO_THROW(callback->flush());
  EXPECT_EQ(callback->failures(), 0u);
}

// An spdlog sink that counts its flushes, as spdlog's base_sink calls flush_().
class counting_log_sink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  int flushes = 0;

 protected:
  void sink_it_(const spdlog::details::log_msg&) override {}
  void flush_() override { ++flushes; }
};

TEST(ConsoleSink, FlushFlushesItsLogger) {
  auto log_sink = std::make_shared<counting_log_sink>();
  auto logger = std::make_shared<spdlog::logger>("flush-test", log_sink);
  auto console = make_console_sink(logger);
  console->write(record_at(1, 40.0));
  EXPECT_EQ(log_sink->flushes, 0);
  console->flush();
  EXPECT_EQ(log_sink->flushes, 1);
}

TEST(Sink, WritesFromSeveralThreadsAreSerialised) {
  std::int64_t total = 0;  // plain: the sink's lock must make this safe
  std::atomic<bool> inside{false};
  std::atomic<bool> overlapped{false};
  auto sink = make_callback_sink([&](const metrics_record& r) {
    if (inside.exchange(true)) overlapped = true;
    std::this_thread::yield();  // widen the window in which an unserialised write would overlap
    total += r.step;
    inside = false;
  });
  constexpr int kPerThread = 10000;
  auto fire = [&] {
    for (int i = 0; i < kPerThread; ++i) sink->write(metrics_record{1, {}});
  };
  std::thread a(fire);
  std::thread b(fire);
  a.join();
  b.join();
  EXPECT_EQ(total, 2 * kPerThread);
  EXPECT_FALSE(overlapped);
}

// ---- paths a sink must not write: FIFOs, devices, the configuration's own files ------------------------------

// Runs `call` on its own thread and says whether it returned within 10 s: a call that blocks (opening a FIFO
// without a reader waits forever) fails its test instead of hanging the suite. The thread is left behind.
bool returns_within_10s(std::function<void()> call) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> finished = done->get_future();
  std::thread([call = std::move(call), done] {
    call();
    done->set_value();
  }).detach();
  return finished.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
}

TEST(MakeSinks, AJsonlPathThatIsAFifoIsRefusedAtCreateWithoutBlocking) {
  temp_dir dir;
  const fs::path fifo = dir.path / "metrics.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  sink_config config;
  config.console = false;
  config.jsonl_path = fifo.string();
  detail::sink_provenance provenance;
  provenance.jsonl_at = error_location{"p.toml", 5, 9, "sinks.jsonl"};
  const std::string expected = "p.toml:5:9: key 'sinks.jsonl': \"" + fifo.string() +
                               "\" is a FIFO (named pipe): a JSONL sink writes only to a regular file (or /dev/null "
                               "to discard its records), never to anything that could block the trainer; change "
                               "[sinks] jsonl";
  // With a reader (so that opening it for writing would not block): before, create succeeded and the first
  // record then blocked forever, opening the FIFO for reading to check its last byte.
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  EXPECT_EQ(make_sinks_error(config, provenance), expected);
  // The C++ API refuses it at create too, naming the argument as the error's key.
  try {
    (void)make_jsonl_sink(fifo.string());
    ADD_FAILURE() << "make_jsonl_sink accepted a FIFO";
  } catch (const error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("key 'path': \"" + fifo.string() + "\" is a FIFO (named pipe): ", 0), 0u)
        << e.what();
    EXPECT_EQ(e.where().key, "path");
  }
  ::close(reader);
  if (::testing::Test::HasFailure()) return;  // the old code would now block below, not fail
  // Without a reader: before, create blocked forever in open(O_WRONLY).
  std::string message;
  ASSERT_TRUE(returns_within_10s([config, provenance, &message] { message = make_sinks_error(config, provenance); }))
      << "make_sinks blocked on a FIFO without a reader";
  EXPECT_EQ(message, expected);
}

TEST(JsonlSink, APathReplacedByAFifoAfterCreateCostsTheRecordNotTheRun) {
  temp_dir dir;
  const fs::path path = dir.path / "metrics.jsonl";
  captured_logger log;
  auto sink = make_jsonl_sink(path.string(), log.logger);  // a regular file (not there yet): accepted
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);              // swapped in before the first record
  const int reader = ::open(path.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  ASSERT_TRUE(returns_within_10s([sink] { sink->write(record_at(1, 40.0)); })) << "the first record blocked";
  EXPECT_EQ(sink->failures(), 1u);  // dropped and counted, as for a missing directory
  char byte = 0;
  EXPECT_LE(::read(reader, &byte, 1), 0) << "a record went into the FIFO";  // EOF or EAGAIN: nothing written
  ::close(reader);
  ASSERT_EQ(log.lines().size(), 1u);
  EXPECT_NE(log.lines()[0].find("the path is a FIFO (named pipe), not a regular file"), std::string::npos)
      << log.lines()[0];
}

TEST(MakeSinks, DevNullIsAcceptedAndNeverRead) {
  // /dev/null discards the records (SCHEMA.md); it is a character device, so it is never opened for reading.
  if (!fs::exists("/dev/null")) GTEST_SKIP() << "no /dev/null on this system";
  sink_config config;
  config.console = false;
  config.jsonl_path = "/dev/null";
  const auto sinks = make_sinks(config, 0);
  ASSERT_EQ(sinks.size(), 1u);
  sinks[0]->write(record_at(1, 40.0));
  sinks[0]->write(record_at(2, 40.0));
  EXPECT_EQ(sinks[0]->failures(), 0u);
}

TEST(MakeSinks, AJsonlPathThatIsTheConfigurationItselfIsRefusedWhateverTheSpelling) {
  temp_dir dir;
  const fs::path model = dir.path / "model.toml";
  std::ofstream(model) << "[text_config]\n";
  fs::create_directory(dir.path / "sub");
  fs::create_hard_link(model, dir.path / "hard.toml");
  fs::create_symlink(model, dir.path / "soft.toml");
  sink_config config;
  config.console = false;
  detail::sink_provenance provenance;
  provenance.jsonl_at = error_location{"p.toml", 6, 9, "sinks.jsonl"};
  provenance.config_files = {(dir.path / "plugin.toml").string(), model.string()};  // plugin.toml: missing, ignored
  for (const fs::path& spelling :
       {model, dir.path / "sub" / ".." / "model.toml", dir.path / "hard.toml", dir.path / "soft.toml"}) {
    config.jsonl_path = spelling.string();
    EXPECT_EQ(make_sinks_error(config, provenance),
              "p.toml:6:9: key 'sinks.jsonl': the JSONL file \"" + spelling.string() +
                  "\" is the configuration file \"" + model.string() +
                  "\" itself; records appended to it would corrupt it: name another file");
  }
  EXPECT_EQ(read_file(model), "[text_config]\n");  // untouched
  // Another file in the same directory is fine.
  config.jsonl_path = (dir.path / "metrics.jsonl").string();
  EXPECT_EQ(detail::make_sinks(config, provenance, 0, nullptr).size(), 1u);
}

TEST(MakeSinks, ATensorboardPathThatIsNotADirectorySaysWhatItIs) {
  // Before, a FIFO or /dev/null got "a part of the path that must be a directory is a file": the path itself
  // is the problem, and it is no file.
  temp_dir dir;
  const fs::path fifo = dir.path / "tb.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::ofstream(dir.path / "file") << "x";
  sink_config config;
  config.console = false;
  detail::sink_provenance provenance;
  provenance.tensorboard_at = error_location{"p.toml", 4, 15, "sinks.tensorboard"};
  const std::pair<std::string, const char*> cases[] = {{fifo.string(), "a FIFO (named pipe)"},
                                                       {"/dev/null", "a character device"},
                                                       {(dir.path / "file").string(), "a regular file"}};
  for (const auto& [path, what] : cases) {
    config.tensorboard_dir = path;
    const std::string message = make_sinks_error(config, provenance);
    if (message.find("built without TensorBoard support") != std::string::npos) GTEST_SKIP() << message;
    EXPECT_EQ(message, "p.toml:4:15: key 'sinks.tensorboard': cannot use \"" + path +
                           "\" for TensorBoard event files: it is " + what +
                           ", not a directory ([sinks] tensorboard names a directory, e.g. \"tensorboard\")");
  }
}

}  // namespace
}  // namespace flopmeter
