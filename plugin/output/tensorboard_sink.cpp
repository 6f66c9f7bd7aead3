// The TensorBoard sink (flopmeter/tensorboard.h): Event protos (tensorboard_event.proto) in TFRecord framing
// (tensorboard_records.h), one file per sink, written with one write(2) per record (no buffer) so TensorBoard
// sees each step as soon as it is logged.
#include "flopmeter/tensorboard.h"

#include <fcntl.h>
#include <spdlog/logger.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <utility>

#include "flopmeter/error.h"
#include "util/printable_text.h"
#include "output/logging.h"
#include "output/sink_paths.h"
#include "output/sink_report.h"
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
      : written_(directory),
        directory_(detail::absolute_sink_path(directory)),
        report_("tensorboard", directory_, std::move(logger)) {
    try {
      open_new_file();  // throws: a directory that cannot be written is a setup error, reported at create
    } catch (...) {
      close_file();
      throw;
    }
  }
  ~tensorboard_sink() override { close_file(); }
  tensorboard_sink(const tensorboard_sink&) = delete;
  tensorboard_sink& operator=(const tensorboard_sink&) = delete;

 protected:
  void write_(const metrics_record& record) override {
    try {
      if (fd_ >= 0 && replaced()) {
        // Writes to an unlinked file succeed and vanish: start a new file (recreating the directory) instead.
        report_.log_always(spdlog::level::warn, "the event file " + detail::quoted(path_) +
                                                    " was removed or replaced while open; starting a new one");
        close_file();
      }
      if (fd_ < 0) {
        open_new_file();
      } else if (written_bytes_ == 0) {
        append(header());  // the file's first record failed (a full disk): it goes first, in the same file
      }
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
        report_.log_always(spdlog::level::info, "writing again, to " + detail::quoted(path_));
        failing_ = false;
      }
    } catch (const error& e) {
      // The file stays open (append() cut it back to its last whole record), so a full disk costs records,
      // not one new empty file per record; only a file that could not be opened is tried again.
      if (!failing_) {
        report_.log_always(spdlog::level::err,
                           e.description() + "; records are dropped (and counted) until a new file can be written");
        failing_ = true;
      }
      throw;  // sink::write counts it
    }
  }

 private:
  void open_new_file() {
    struct stat info {};
    if (::stat(directory_.c_str(), &info) == 0 && !S_ISDIR(info.st_mode)) {
      fail("cannot use " + detail::sink_path_text(written_) + " for TensorBoard event files: it is " +
           detail::file_type_text(info.st_mode) +
           ", not a directory ([sinks] tensorboard names a directory, e.g. \"tensorboard\")");
    }
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
    // A new file (O_EXCL: never one that exists, which could be a FIFO), never blocking, not inherited.
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_NONBLOCK | O_CLOEXEC, 0666);
    if (fd_ < 0) {
      fail("cannot open the TensorBoard event file " + detail::quoted(path_) +
           " for writing: " + detail::open_failure_reason(errno, path_, "[sinks] tensorboard"));
    }
    written_bytes_ = 0;
    append(header());
  }

  static pb::Event header() {
    pb::Event event;
    event.set_wall_time(unix_seconds());
    event.set_file_version(kFileVersion);
    return event;
  }

  void close_file() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // True when the path no longer names the open file (the file or its directory removed, or the file
  // replaced): as the JSONL sink checks before each record.
  bool replaced() const {
    struct stat by_path {};
    struct stat by_handle {};
    if (::stat(path_.c_str(), &by_path) != 0) return true;
    if (::fstat(fd_, &by_handle) != 0) return false;
    return by_path.st_dev != by_handle.st_dev || by_path.st_ino != by_handle.st_ino;
  }

  void append(const pb::Event& event) {
    std::string data;
    if (!event.SerializeToString(&data)) fail("cannot encode an event: protobuf serialization failed");
    std::string record;
    detail::append_tfrecord(record, data);
    std::size_t done = 0;
    while (done < record.size()) {
      const ssize_t n = ::write(fd_, record.data() + done, record.size() - done);
      if (n > 0) {
        done += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      const int code = n < 0 ? errno : 0;
      // A torn record would end TensorBoard's reading of the file: cut it back to the last whole record.
      if (done > 0 && ::ftruncate(fd_, static_cast<off_t>(written_bytes_)) != 0) close_file();
      fail("cannot write the TensorBoard event file " + detail::quoted(path_) + ": " +
           (code != 0 ? std::strerror(code) : "no bytes written"));
    }
    written_bytes_ += record.size();
  }

  // The problem alone, with the directory as where().file (sink_report.h): make_sinks reports its description
  // at [sinks] tensorboard, and the write path logs it under this sink's name.
  [[noreturn]] void fail(const std::string& what) const { throw detail::sink_error(written_, what); }

  std::string written_;    // as given, for messages
  std::string directory_;  // absolute
  detail::sink_report report_;  // what this sink logs, under its name
  std::string path_;
  int fd_ = -1;                      // the event file, O_APPEND
  std::uint64_t written_bytes_ = 0;  // its whole records (the header first); a failed write is cut back to it
  bool failing_ = false;
};

}  // namespace

std::shared_ptr<sink> make_tensorboard_sink(const std::string& directory, std::shared_ptr<spdlog::logger> logger) {
  // Argument errors name the argument as their key ("key 'directory': is empty").
  const error_location argument{"", 0, 0, "directory"};
  if (directory.empty()) throw error(argument, "is empty");
  if (directory.find('\0') != std::string::npos) {  // mkdir() would stop at it and create another directory
    throw error(argument, detail::quoted(directory) + " contains a NUL character (\\u0000)");
  }
  return std::make_shared<tensorboard_sink>(directory, detail::logger_or_private(std::move(logger)));
}

}  // namespace flopmeter
