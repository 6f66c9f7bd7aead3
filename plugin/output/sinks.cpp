// Metrics sinks: the console line, the JSONL file and the user callback, plus the JSON rendering.
//
// Error model (sinks.h): a sink's write_() may throw; sink::write() catches and counts. The JSONL sink also
// logs its I/O failures through the logger, at most one message per 60 s (with the number suppressed), and
// closes the file so that the next record reopens it: a full disk or a removed directory costs records,
// never the run, and the file resumes once the cause is gone.

#include "flopmeter/sinks.h"

#include <spdlog/fmt/fmt.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include "flopmeter/error.h"
#include "util/printable_text.h"
#include "output/json_writer.h"
#include "flopmeter/metric_names.h"
#include "flopmeter/tensorboard.h"
#include "output/json_line.h"
#include "output/logging.h"
#include "output/sink_paths.h"
#include "output/sink_report.h"
#include "output/sink_provenance.h"

#if defined(__unix__) || defined(__APPLE__)
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#define FLOPMETER_HAVE_STAT 1
#endif

namespace flopmeter {

// ---- metrics_record, sink ------------------------------------------------------------------------------

const double* metrics_record::find(const std::string& name) const {
  for (const auto& entry : values) {
    if (entry.first == name) return &entry.second;
  }
  return nullptr;
}

void sink::write(const metrics_record& record) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    write_(record);
  } catch (...) {
    ++failures_;
  }
}

void sink::flush() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    flush_();
  } catch (...) {
    ++failures_;
  }
}

std::uint64_t sink::failures() const { return failures_.load(std::memory_order_relaxed); }

namespace {

using detail::logger_or_private;

// ---- console -------------------------------------------------------------------------------------------

struct console_field {
  const char* key;     // metric name
  const char* label;   // shown before the value
  int precision;       // digits after the decimal point
  const char* suffix;  // unit shown after the value
  bool significant_when_small = false;  // below 1: three significant digits, so a small figure never reads 0.0
};

// The order of the line; absent keys are skipped, except MFU which reads "n/a" (unknown peak).
constexpr console_field kConsoleFields[] = {
    {metric::kTokensPerSecond, "tok/s", 1, ""},
    {metric::kTokensPerSecondPerGpu, "tok/s/gpu", 1, ""},
    {metric::kTflopsPerSecond, "TFLOP/s/gpu", 1, "", true},
    {metric::kMfu, "MFU", 1, "%", true},
    {metric::kHfu, "HFU", 1, "%", true},  // hardware FLOPs (recomputation included); absent without a peak
    // perf/step_time is per micro-batch: labelled "step" right after "step N" it read as the optimizer step.
    {metric::kStepTime, "mb_time", 3, "s"},
    {metric::kBatchEfficiency, "eff", 2, ""},
    {metric::kMemGib, "mem", 1, "GiB"},
    {metric::kLoss, "loss", 4, ""},
    {metric::kLogWaitMs, "wait", 2, "ms"},
};

std::string console_line(const metrics_record& record) {
  std::string line = fmt::format("step {}", record.step);
  auto out = std::back_inserter(line);
  for (const console_field& field : kConsoleFields) {
    const double* value = record.find(field.key);
    const bool is_mfu = field.key == metric::kMfu;
    if (value == nullptr && !is_mfu) continue;
    if (value == nullptr || !std::isfinite(*value)) {
      fmt::format_to(out, " | {} n/a", field.label);
    } else if (field.significant_when_small && *value != 0 && std::fabs(*value) < 1) {
      // A CPU demo's TFLOP/s or a low MFU keeps three significant digits instead of reading 0.0.
      fmt::format_to(out, " | {} {:.3g}{}", field.label, *value, field.suffix);
    } else {
      fmt::format_to(out, " | {} {:.{}f}{}", field.label, *value, field.precision, field.suffix);
    }
  }
  return line;
}

class console_sink final : public sink {
 public:
  explicit console_sink(std::shared_ptr<spdlog::logger> logger) : logger_(std::move(logger)) {}

 protected:
  void write_(const metrics_record& record) override { logger_->info("{}", console_line(record)); }
  void flush_() override { logger_->flush(); }

 private:
  std::shared_ptr<spdlog::logger> logger_;
};

// ---- JSONL ---------------------------------------------------------------------------------------------

class jsonl_sink final : public sink {
 public:
  jsonl_sink(std::string path, std::shared_ptr<spdlog::logger> logger)
      : path_(std::move(path)), report_("jsonl", path_, std::move(logger)) {}
  ~jsonl_sink() override { close(); }
  jsonl_sink(const jsonl_sink&) = delete;
  jsonl_sink& operator=(const jsonl_sink&) = delete;

 protected:
  void write_(const metrics_record& record) override {
    std::string line = detail::to_json_line(record);
    line.push_back('\n');
    if (file_ != nullptr && replaced()) {
      close();
      report_.log(spdlog::level::warn, "was removed or replaced while open; reopening it");
    }
    if (file_ == nullptr) {
      open_file();
      // A previous run (or a failed write) may have left a partial last line; start on a fresh one so that
      // every complete line stays valid JSON.
      if (ends_without_newline()) line.insert(line.begin(), '\n');
      // Unbuffered: each record is one write(2) on an O_APPEND file, so a failure belongs to this record
      // (no bytes linger in a buffer to surface later) and lines from several writers do not interleave.
      std::setvbuf(file_, nullptr, _IONBF, 0);
    }
    errno = 0;
    const std::size_t written = std::fwrite(line.data(), 1, line.size(), file_);
    const bool flushed = std::fflush(file_) == 0;  // a full disk shows up here, not in fwrite
    if (written != line.size() || !flushed || std::ferror(file_) != 0) {
      const int code = errno;
      close();
      fail("cannot write", code);
    }
  }

 private:
  void close() noexcept {
    if (file_ != nullptr) std::fclose(file_);
    file_ = nullptr;
  }

  // True when the path no longer names the open file (deleted, or replaced by rotation): writes to the
  // unlinked file would succeed and vanish.
  bool replaced() const {
#ifdef FLOPMETER_HAVE_STAT
    struct stat by_path {};
    struct stat by_handle {};
    if (::stat(path_.c_str(), &by_path) != 0) return true;
    if (::fstat(fileno(file_), &by_handle) != 0) return false;
    return by_path.st_dev != by_handle.st_dev || by_path.st_ino != by_handle.st_ino;
#else
    return false;
#endif
  }

  // Opens file_ without ever blocking (detail::open_jsonl_for_append): a path replaced by a FIFO, a socket or
  // a device since create fails like a missing directory: the record is dropped and counted.
  void open_file() {
    const detail::opened_sink_file opened = detail::open_jsonl_for_append(path_);
    if (opened.wrong_type != nullptr) {
      fail_because("cannot open for append", std::string("the path is ") + opened.wrong_type + ", not a regular file");
    }
    if (opened.fd < 0) fail("cannot open for append", opened.error);
    file_ = ::fdopen(opened.fd, "a");
    if (file_ == nullptr) {
      const int code = errno;
      ::close(opened.fd);
      fail("cannot open for append", code);
    }
  }

  // Reads the open file's last byte, never anything else: only a regular file, and only the one file_ names
  // (opened again for reading without blocking, and checked to be the same file).
  bool ends_without_newline() const {
    struct stat written {};
    if (::fstat(fileno(file_), &written) != 0 || !S_ISREG(written.st_mode) || written.st_size <= 0) return false;
    const int fd = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return false;  // e.g. a write-only file: then the line is not checked
    struct stat read {};
    char last = '\n';
    const bool same = ::fstat(fd, &read) == 0 && read.st_dev == written.st_dev && read.st_ino == written.st_ino;
    const bool got = same && ::pread(fd, &last, 1, written.st_size - 1) == 1;
    ::close(fd);
    return got && last != '\n';
  }

  [[noreturn]] void fail(const char* what, int code) {
    fail_because(what, code != 0 ? std::error_code(code, std::generic_category()).message() : "I/O error");
  }

  [[noreturn]] void fail_because(const char* what, const std::string& reason) {
    report_.log(spdlog::level::err, std::string(what) + ": " + reason + "; the record is dropped and the file is " +
                                        "reopened for the next one");
    throw detail::sink_error(path_, std::string(what) + ": " + reason);
  }

  std::string path_;
  detail::sink_report report_;  // what this sink logs, under its name (at most one message a minute)
  std::FILE* file_ = nullptr;
};

// ---- callback ------------------------------------------------------------------------------------------

class callback_sink final : public sink {
 public:
  explicit callback_sink(std::function<void(const metrics_record&)> callback) : callback_(std::move(callback)) {}

 protected:
  void write_(const metrics_record& record) override { callback_(record); }

 private:
  std::function<void(const metrics_record&)> callback_;
};

// The one "{rank}" expansion for every path a plugin file names per rank (the JSONL file, the TensorBoard
// directory): each occurrence of "{rank}" becomes the decimal rank; the rest of `pattern` is kept as written.
std::string expand_rank(const std::string& pattern, int rank) {
  std::string path = pattern;
  const std::string placeholder = "{rank}";
  const std::string rank_text = std::to_string(rank);
  for (std::size_t at = path.find(placeholder); at != std::string::npos; at = path.find(placeholder, at)) {
    path.replace(at, placeholder.size(), rank_text);
    at += rank_text.size();
  }
  return path;
}

// A JSONL path that exists and is something a sink must not write (detail::jsonl_may_write): refused when the
// sink is made, not at its first record (where opening a FIFO would block).
void refuse_non_regular_jsonl(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0 && (S_ISDIR(info.st_mode) || !detail::jsonl_may_write(info))) {
    throw error(
        error_location{"", 0, 0, "path"},
        detail::jsonl_wrong_type_text(detail::sink_path_text(path), detail::file_type_text(info.st_mode), "the path"));
  }
}

}  // namespace

std::shared_ptr<sink> make_console_sink(std::shared_ptr<spdlog::logger> logger) {
  return std::make_shared<console_sink>(logger_or_private(std::move(logger)));
}

std::shared_ptr<sink> make_jsonl_sink(const std::string& path, std::shared_ptr<spdlog::logger> logger) {
  // Argument errors name the argument as their key, as a plugin file's name their key ("key 'path': is empty").
  const error_location argument{"", 0, 0, "path"};
  if (path.empty()) throw error(argument, "is empty");
  if (path.find('\0') != std::string::npos) {
    throw error(argument, detail::quoted(path) + " contains a NUL character (\\u0000)");
  }
  if (path.find("{rank}") != std::string::npos) {
    throw error(argument,
                detail::quoted(path) +
                    " contains {rank} but no rank was given; call "
                    "make_jsonl_sink(path, rank, logger) with this process's rank in flopmeter's group (comm->rank())");
  }
  refuse_non_regular_jsonl(path);
  return std::make_shared<jsonl_sink>(detail::absolute_sink_path(path), logger_or_private(std::move(logger)));
}

std::shared_ptr<sink> make_jsonl_sink(const std::string& path, int rank, std::shared_ptr<spdlog::logger> logger) {
  if (rank < 0) throw error(error_location{"", 0, 0, "rank"}, "must be >= 0 (got " + std::to_string(rank) + ")");
  return make_jsonl_sink(expand_rank(path, rank), std::move(logger));
}

std::shared_ptr<sink> make_callback_sink(std::function<void(const metrics_record&)> callback) {
  if (!callback) throw error(error_location{"", 0, 0, "callback"}, "is empty");
  return std::make_shared<callback_sink>(std::move(callback));
}

namespace {

// Where a sink path was configured; a config built in code has no file, and its errors name the key alone.
error_location located(const error_location& configured, const char* key) {
  error_location at = configured;
  if (at.key.empty()) at.key = key;
  return at;
}

// fopen() and mkdir() stop at a NUL: "out.jsonl\0.evil" would quietly become out.jsonl.
void refuse_nul(const std::string& path, const error_location& at) {
  if (path.find('\0') != std::string::npos) throw error(at, "contains a NUL character (\\u0000)");
}

// A JSONL path that is the same file (device and inode: any spelling, any hard or symbolic link) as one of the
// files the configuration came from: appending records to the plugin or model config would make the next run
// fail on a TOML syntax error. Missing files match nothing.
void refuse_config_file(const std::string& path, const std::vector<std::string>& config_files,
                        const error_location& at) {
  struct stat sink_file {};
  if (::stat(path.c_str(), &sink_file) != 0) return;
  for (const std::string& config_file : config_files) {
    struct stat info {};
    if (::stat(config_file.c_str(), &info) == 0 && info.st_dev == sink_file.st_dev && info.st_ino == sink_file.st_ino) {
      throw error(at, "the JSONL file " + detail::sink_path_text(path) + " is the configuration file " +
                          detail::quoted(config_file) +
                          " itself; records appended to it would corrupt it: name another file");
    }
  }
}

}  // namespace

std::vector<std::shared_ptr<sink>> make_sinks(const sink_config& config, int rank,
                                              std::shared_ptr<spdlog::logger> logger) {
  return detail::make_sinks(config, detail::sink_provenance{}, rank, std::move(logger));
}

std::vector<std::shared_ptr<sink>> detail::make_sinks(const sink_config& config, const sink_provenance& provenance,
                                                      int rank, std::shared_ptr<spdlog::logger> logger) {
  std::vector<std::shared_ptr<sink>> sinks;
  if (config.console) sinks.push_back(make_console_sink(logger));
  if (!config.jsonl_path.empty()) {
    const error_location at = located(provenance.jsonl_at, "sinks.jsonl");
    refuse_nul(config.jsonl_path, at);
    const std::string path = expand_rank(config.jsonl_path, rank);
    // Checked here, where the trainer can still act on it: a missing or unwritable directory would otherwise
    // drop every record of the run (each one counted in health().dropped_records, but no file at all).
    refuse_config_file(path, provenance.config_files, at);
    const detail::opened_sink_file probe = detail::open_jsonl_for_append(path);
    if (probe.wrong_type != nullptr) {
      throw error(at, detail::jsonl_wrong_type_text(detail::sink_path_text(path), probe.wrong_type, "[sinks] jsonl"));
    }
    if (probe.fd < 0) {
      throw error(at, "cannot open " + detail::sink_path_text(path) + " for append: " +
                          detail::open_failure_reason(probe.error, path, "[sinks] jsonl", "metrics.jsonl"));
    }
    ::close(probe.fd);
    sinks.push_back(make_jsonl_sink(path, logger));
  }
  if (!config.tensorboard_dir.empty()) {
    const error_location at = located(provenance.tensorboard_at, "sinks.tensorboard");
    refuse_nul(config.tensorboard_dir, at);
    const std::string directory = expand_rank(config.tensorboard_dir, rank);
    // make_tensorboard_sink creates the directory and opens the first file now, so a bad directory fails here;
    // its message names the path and the reason, and is reported where the directory was configured.
    try {
      sinks.push_back(make_tensorboard_sink(directory, logger));
    } catch (const error& e) {
      throw error(at, e.description());
    }
  }
  return sinks;
}

// One JSON object per record through the library's JSON writer (output/json_writer.h): shortest round-trip
// numbers (41.2, not 41.200000000000003), integral values without an exponent, NaN and Inf as null.
std::string detail::to_json_line(const metrics_record& record) {
  json_object line(/*spaced=*/false);
  line.integer("step", record.step);
  for (const auto& entry : record.values) line.number(entry.first, entry.second);
  return line.str();
}

}  // namespace flopmeter
