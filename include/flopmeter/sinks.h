// flopmeter/sinks.h — where derived metrics go: a console line, a JSONL file, a user callback.
//
// A `metrics_record` is one log's metrics as (name, value) pairs in a fixed order, names exactly as in
// METRICS.md (perf/..., perf_topk/..., train/...). Sinks follow spdlog's base_sink: the public `write()` and
// `flush()` are not virtual, take the sink's lock and call the protected `write_()` / `flush_()`, so a sink is
// safe to share between threads. A sink never throws out of write() or flush(): a failing file (disk full,
// removed) becomes one logged error and the sink keeps trying on later records.
// Re-entry: a plugin calls write() and flush() while holding its own lock, on the thread that fired on_log or
// flush. From inside write_() or flush_() (a callback sink's callback) that plugin's health() works, and its
// on_microbatch, on_log and flush are refused, not deadlocked (throughput.h, "Re-entry"); failures() may be
// read at any time. A write_() or flush_() must not write to or flush the same sink again (e.g. through
// another plugin that shares it): the sink's lock is not recursive.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "flopmeter/error.h"
#include "flopmeter/export.h"

// spdlog is part of this API: the sinks log through the trainer's std::shared_ptr<spdlog::logger>, which
// libflopmeter.so calls with the spdlog it was built against; find_package(flopmeter) finds that spdlog and
// flopmeter::flopmeter links it (README, "Linking, embedding, installing").
namespace spdlog {
class logger;
}

namespace flopmeter FLOPMETER_EXPORT {

struct metrics_record {
  std::int64_t step = 0;  // the optimizer step the interval ended at
  std::vector<std::pair<std::string, double>> values;

  // The value of `name`, or nullptr when absent (e.g. perf/mfu for an unknown GPU).
  const double* find(const std::string& name) const;
};

class sink {
 public:
  virtual ~sink() = default;
  void write(const metrics_record& record) noexcept;  // locks, calls write_(), swallows and counts failures
  // Locks, calls flush_(): what the sink holds back reaches its destination. Swallows and counts failures,
  // like write(). A plugin's flush() calls it on each of its sinks after the last record (throughput.h).
  void flush() noexcept;
  // Records that could not be written, and flushes that failed. Lock-free: safe from inside write_() (a
  // plugin's health() reads it there).
  std::uint64_t failures() const;

 protected:
  virtual void write_(const metrics_record& record) = 0;
  // Pushes out what write_() held back. The default does nothing: for a sink that writes each record through
  // at once (the JSONL and TensorBoard sinks do). The console sink flushes its logger.
  virtual void flush_() {}

 private:
  mutable std::mutex mutex_;
  std::atomic<std::uint64_t> failures_{0};
};

// One human line per record through `logger` (the trainer's, or a private unregistered logger named
// "flopmeter" writing to stderr when null). Never registers global loggers or sets the default one.
std::shared_ptr<sink> make_console_sink(std::shared_ptr<spdlog::logger> logger = nullptr);

// One JSON object per line: {"step": N, "<name>": value, ...}. Non-finite values are written as null.
// The file is opened for append on the first write; failures are logged through `logger` (rate-limited).
// A relative path is resolved against the working directory now, so a later chdir() does not move the file.
// A path holding a NUL character throws flopmeter::error (the file system would cut it short).
// A path containing "{rank}" needs the rank: this overload throws flopmeter::error for it (use the next).
// A path that exists and is not a regular file (a FIFO, socket, device; /dev/null and /dev/full are
// accepted) throws flopmeter::error: a sink never opens anything that could block the trainer.
std::shared_ptr<sink> make_jsonl_sink(const std::string& path, std::shared_ptr<spdlog::logger> logger = nullptr);

// Same, with every "{rank}" in `path` replaced by `rank` (>= 0; the rank in flopmeter's group, comm->rank()),
// as the plugin file's [sinks] jsonl does: "metrics_{rank}.jsonl" -> "metrics_3.jsonl" on rank 3.
std::shared_ptr<sink> make_jsonl_sink(const std::string& path, int rank, std::shared_ptr<spdlog::logger> logger = nullptr);

// Calls `callback` with each record. Exceptions from the callback are caught and counted.
std::shared_ptr<sink> make_callback_sink(std::function<void(const metrics_record&)> callback);

// The sinks a plugin file names in its [sinks] table (plugin_configs/SCHEMA.md).
struct sink_config {
  bool console = true;      // one console line per log (make_console_sink); default true
  std::string jsonl_path;   // a JSONL file (make_jsonl_sink); "{rank}" is replaced by the rank; relative to
                            // the working directory when make_sinks runs; empty (the default): no JSONL file
  std::string tensorboard_dir;  // TensorBoard event files (make_tensorboard_sink, flopmeter/tensorboard.h);
                                // "{rank}" is replaced by the rank; relative to the working directory when
                                // make_sinks runs; empty (the default): no TensorBoard sink
};

// The sinks `config` names, for the process of rank `rank`, logging through `logger` (a private one when
// null): the console sink first, then the JSONL sink, then the TensorBoard sink. Throws flopmeter::error when
// a sink cannot be made: a path holding a NUL character, a JSONL path that cannot be opened for append now,
// that exists and is not a regular file (a FIFO, socket, device or directory; /dev/null and /dev/full are
// accepted: writing to them never blocks), or a TensorBoard directory that cannot be created or written, or
// that exists and is not a directory. The error names the key ("sinks.jsonl" / "sinks.tensorboard"), the path
// (with the working directory a relative path is resolved against), the system's reason and, where the
// reason implies one, what to do:
//   key 'sinks.jsonl': cannot open "out/m_0.jsonl" (relative to the working directory "/w") for append: No
//   such file or directory (the directory "out" does not exist: create it first, or change [sinks] jsonl)
// From a plugin file (create_throughput_plugin and the C ABI), the same errors also cite the file:line:col
// the path was written at, and a JSONL path that is the plugin file or its model config is refused.
// (make_jsonl_sink alone opens lazily and counts failed records.)
std::vector<std::shared_ptr<sink>> make_sinks(const sink_config& config, int rank,
                                              std::shared_ptr<spdlog::logger> logger = nullptr);

}  // namespace FLOPMETER_EXPORT
