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
#include "flopmeter/metric_names.h"
#include "core/exact_double.h"
#include "output/json_line.h"
#include "output/logging.h"

#if defined(__unix__) || defined(__APPLE__)
#include <sys/stat.h>
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

std::uint64_t sink::failures() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failures_;
}

namespace {

using detail::logger_or_private;

// ---- JSON ----------------------------------------------------------------------------------------------

void append_json_string(std::string& out, const std::string& text) {
  out.push_back('"');
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<unsigned>(c));
        } else {
          out.push_back(ch);  // UTF-8 bytes pass through unchanged
        }
    }
  }
  out.push_back('"');
}

// Integral values below 2^53 in magnitude (counts, steps) print as integers: 20, not 20.0 or 2e+01.
// Anything else prints as the shortest decimal that parses back to the same double (fmt's "{}"): as exact
// as %.17g but 41.2 stays "41.2" rather than "41.200000000000003", and independent of the C locale (a
// trainer that calls setlocale() cannot turn the decimal point into a comma). JSON has no NaN or Inf: null.
void append_json_number(std::string& out, double value) {
  if (!std::isfinite(value)) {
    out += "null";
  } else if (value == std::trunc(value) && std::fabs(value) < detail::kExactIntegerLimit) {
    out += std::to_string(static_cast<long long>(value));
  } else {
    fmt::format_to(std::back_inserter(out), "{}", value);
  }
}

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
    {metric::kStepTime, "step", 3, "s"},
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

 private:
  std::shared_ptr<spdlog::logger> logger_;
};

// ---- JSONL ---------------------------------------------------------------------------------------------

class jsonl_sink final : public sink {
 public:
  jsonl_sink(std::string path, std::shared_ptr<spdlog::logger> logger)
      : path_(std::move(path)), logger_(std::move(logger)) {}
  ~jsonl_sink() override { close(); }
  jsonl_sink(const jsonl_sink&) = delete;
  jsonl_sink& operator=(const jsonl_sink&) = delete;

 protected:
  void write_(const metrics_record& record) override {
    std::string line = detail::to_json_line(record);
    line.push_back('\n');
    if (file_ != nullptr && replaced()) {
      close();
      report(spdlog::level::warn, "was removed or replaced while open; reopening it");
    }
    if (file_ == nullptr) {
      // A previous run (or a failed write) may have left a partial last line; start on a fresh one so that
      // every complete line stays valid JSON.
      if (ends_without_newline()) line.insert(line.begin(), '\n');
      file_ = std::fopen(path_.c_str(), "a");
      if (file_ == nullptr) fail("cannot open for append", errno);
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

  bool ends_without_newline() const {
    std::ifstream in(path_, std::ios::binary | std::ios::ate);
    if (!in) return false;
    const std::streamoff size = in.tellg();
    if (size <= 0) return false;  // empty, missing, or a device such as /dev/full
    in.seekg(-1, std::ios::end);
    char last = '\n';
    return in.get(last) && last != '\n';
  }

  [[noreturn]] void fail(const char* what, int code) {
    const std::string reason = code != 0 ? std::error_code(code, std::generic_category()).message() : "I/O error";
    report(spdlog::level::err, std::string(what) + ": " + reason + "; the record is dropped and the file is " +
                                   "reopened for the next one");
    throw error("jsonl sink " + path_ + ": " + what + ": " + reason);
  }

  // Logs at most one message a minute; the next one says how many were suppressed meanwhile.
  void report(spdlog::level::level_enum level, const std::string& message) {
    if (!reports_.allow()) return;
    const std::uint64_t suppressed = reports_.take_suppressed();
    if (suppressed > 0) {
      logger_->log(level, "flopmeter jsonl sink {}: {} ({} similar messages suppressed)", path_, message,
                   suppressed);
    } else {
      logger_->log(level, "flopmeter jsonl sink {}: {}", path_, message);
    }
  }

  std::string path_;
  std::shared_ptr<spdlog::logger> logger_;
  std::FILE* file_ = nullptr;
  detail::rate_limiter reports_;
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

}  // namespace

std::shared_ptr<sink> make_console_sink(std::shared_ptr<spdlog::logger> logger) {
  return std::make_shared<console_sink>(logger_or_private(std::move(logger)));
}

std::shared_ptr<sink> make_jsonl_sink(const std::string& path, std::shared_ptr<spdlog::logger> logger) {
  if (path.empty()) throw error("jsonl sink: the path is empty");
  return std::make_shared<jsonl_sink>(path, logger_or_private(std::move(logger)));
}

std::shared_ptr<sink> make_callback_sink(std::function<void(const metrics_record&)> callback) {
  if (!callback) throw error("callback sink: the callback is empty");
  return std::make_shared<callback_sink>(std::move(callback));
}

std::vector<std::shared_ptr<sink>> make_sinks(const sink_config& config, int rank,
                                              std::shared_ptr<spdlog::logger> logger) {
  std::vector<std::shared_ptr<sink>> sinks;
  if (config.console) sinks.push_back(make_console_sink(logger));
  if (!config.jsonl_path.empty()) {
    std::string path = config.jsonl_path;
    const std::string placeholder = "{rank}";
    const std::string rank_text = std::to_string(rank);
    for (std::size_t at = path.find(placeholder); at != std::string::npos; at = path.find(placeholder, at)) {
      path.replace(at, placeholder.size(), rank_text);
      at += rank_text.size();
    }
    // Checked here, where the trainer can still act on it: a missing or unwritable directory would otherwise
    // drop every record of the run (each one counted in health().dropped_records, but no file at all).
    std::FILE* probe = std::fopen(path.c_str(), "a");
    if (probe == nullptr) {
      const int code = errno;
      throw error("sinks.jsonl: cannot open '" + path + "' for append: " +
                  std::error_code(code, std::generic_category()).message() +
                  " (create the directory first, or change [sinks] jsonl)");
    }
    std::fclose(probe);
    sinks.push_back(make_jsonl_sink(path, logger));
  }
  return sinks;
}

std::string detail::to_json_line(const metrics_record& record) {
  std::string line = "{\"step\":";
  line += std::to_string(record.step);
  for (const auto& entry : record.values) {
    line.push_back(',');
    append_json_string(line, entry.first);
    line.push_back(':');
    append_json_number(line, entry.second);
  }
  line.push_back('}');
  return line;
}

}  // namespace flopmeter
