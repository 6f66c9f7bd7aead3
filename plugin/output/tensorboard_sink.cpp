// The TensorBoard sink (flopmeter/tensorboard.h): Event protos (tensorboard_event.proto) in TFRecord framing
// (tensorboard_records.h), one file per sink, flushed after every record so TensorBoard sees each step as
// soon as it is logged.
#include "flopmeter/tensorboard.h"

#include <spdlog/logger.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <utility>

#include "flopmeter/error.h"
#include "core/spec_rules.h"
#include "output/logging.h"
#include "output/sink_paths.h"
#include "output/tensorboard_records.h"
#include "output/tensorboard_event.pb.h"

namespace flopmeter {
namespace {

namespace fs = std::filesystem;
namespace pb = flopmeter::tensorboard_event;

// TensorBoard's reader identifies an event file by its first record (tensorboard/summary/writer).
constexpr const char* kFileVersion = "brain.Event:2";

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

class tensorboard_sink final : public sink {
 public:
  // `directory` as written names it in messages; the sink works on it made absolute now, so a later new file
  // goes where the first one went even if the trainer changes directory.
  tensorboard_sink(const std::string& directory, std::shared_ptr<spdlog::logger> logger)
      : written_(directory), directory_(detail::absolute_sink_path(directory)), logger_(std::move(logger)) {
    open_new_file();  // throws: a directory that cannot be written is a setup error, reported at create
  }

 protected:
  void write_(const metrics_record& record) override {
    try {
      if (!out_.is_open()) open_new_file();
      pb::Event event;
      event.set_wall_time(unix_seconds());
      event.set_step(record.step);
      pb::Summary* summary = event.mutable_summary();
      for (const auto& [name, value] : record.values) {
        if (!std::isfinite(value)) continue;  // JSONL's null: no point at this step
        pb::Summary::Value* v = summary->add_value();
        v->set_tag(name);
        v->set_simple_value(static_cast<float>(value));
      }
      append(event);
      if (failing_) {
        logger_->info("flopmeter tensorboard sink {}: writing again, to {}", printable_text(directory_),
                      printable_text(path_));
        failing_ = false;
      }
    } catch (const error& e) {
      out_.close();  // the next record starts a new file
      if (!failing_) {
        logger_->error(
            "flopmeter tensorboard sink {}: {}; records are dropped (and counted) until a new file "
            "can be written",
            printable_text(directory_), e.what());
        failing_ = true;
      }
      throw;  // sink::write counts it
    }
  }

 private:
  void open_new_file() {
    std::error_code ec;
    fs::create_directories(directory_, ec);
    if (ec) {
      fail("cannot create the directory " + detail::sink_path_text(written_) +
           " for TensorBoard event files: " + detail::open_failure_reason(ec.value(), written_, "[sinks] tensorboard"));
    }
    static std::atomic<unsigned> sequence{0};
    path_ = (fs::path(directory_) / ("events.out.tfevents." + std::to_string(static_cast<long long>(unix_seconds())) +
                                      "." + host_name() + "." + std::to_string(::getpid()) + "." +
                                      std::to_string(sequence.fetch_add(1))))
                .string();
    errno = 0;
    out_.open(path_, std::ios::binary | std::ios::trunc);
    if (!out_) {
      fail("cannot open the TensorBoard event file " + detail::quoted(path_) +
           " for writing: " + detail::open_failure_reason(errno, path_, "[sinks] tensorboard"));
    }
    pb::Event header;
    header.set_wall_time(unix_seconds());
    header.set_file_version(kFileVersion);
    append(header);
  }

  void append(const pb::Event& event) {
    std::string data;
    if (!event.SerializeToString(&data)) fail("cannot encode an event: protobuf serialization failed");
    std::string record;
    detail::append_tfrecord(record, data);
    errno = 0;
    out_.write(record.data(), static_cast<std::streamsize>(record.size()));
    out_.flush();
    if (!out_) {
      fail("cannot write the TensorBoard event file " + detail::quoted(path_) + ": " +
           (errno != 0 ? std::strerror(errno) : "unknown error"));
    }
  }

  // The message says which sink and path: make_sinks reports it at [sinks] tensorboard as it is, and the
  // write path logs it after "flopmeter tensorboard sink DIR:".
  [[noreturn]] void fail(const std::string& what) const { throw error(what); }

  std::string written_;    // as given, for messages
  std::string directory_;  // absolute
  std::shared_ptr<spdlog::logger> logger_;
  std::string path_;
  std::ofstream out_;
  bool failing_ = false;
};

}  // namespace

std::shared_ptr<sink> make_tensorboard_sink(const std::string& directory, std::shared_ptr<spdlog::logger> logger) {
  if (directory.empty()) throw error("tensorboard sink: the directory is empty");
  if (directory.find('\0') != std::string::npos) {  // mkdir() would stop at it and create another directory
    throw error("tensorboard sink: the directory " + detail::quoted(directory) + " contains a NUL character (\\u0000)");
  }
  return std::make_shared<tensorboard_sink>(directory, detail::logger_or_private(std::move(logger)));
}

}  // namespace flopmeter
