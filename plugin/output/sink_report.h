// plugin/output/sink_report.h — internal: how a sink names itself, as data, in what it logs and throws.
//
// A sink's message never spells its own name. It says the problem alone ("cannot write: No space left on
// device"), and the sink's identity travels beside it:
//   - a logged message goes through sink_report::log, the one place that writes the identity, as
//     "flopmeter jsonl sink /run/m.jsonl: cannot write: ...";
//   - a thrown flopmeter::error carries the sink's path as where().file (sink_error), so that make_sinks can
//     re-locate the same problem at the plugin file's key with error(at, e.description()) and no prefix to
//     strip, and what() reads "/run/m.jsonl: cannot write: ...".
// Not installed. Thread-safety: a sink_report is used under its sink's lock (sink::write), like the
// rate_limited_log it holds.
#pragma once

#include <spdlog/logger.h>

#include <memory>
#include <string>
#include <utility>

#include "flopmeter/error.h"
#include "output/logging.h"

namespace flopmeter::detail {

// The error a sink throws about its own file or directory `path`: where().file is the path, description()
// the problem.
inline error sink_error(const std::string& path, const std::string& problem) {
  return error(error_location{path, 0, 0, ""}, problem);
}

class sink_report {
 public:
  // `kind` names the sink type ("jsonl", "tensorboard"); `path` its file or directory.
  sink_report(const char* kind, std::string path, std::shared_ptr<spdlog::logger> logger)
      : kind_(kind), path_(std::move(path)), logger_(std::move(logger)) {}

  // "flopmeter KIND sink PATH: MESSAGE" at `level`, at most once a minute (the next one says how many were
  // held back), never throwing (rate_limited_log).
  bool log(spdlog::level::level_enum level, const std::string& message) noexcept {
    return limited_.log(*logger_, level, "flopmeter {} sink {}: {}", kind_, path_, message);
  }
  // The same without the rate limit: for messages that are rare by construction (a sink that starts failing
  // or recovers says so once per change of state).
  void log_always(spdlog::level::level_enum level, const std::string& message) noexcept {
    log_noexcept(*logger_, level, "flopmeter {} sink {}: {}", kind_, printable_text(path_),
                 printable_text(message, /*keep_newlines=*/true));
  }

 private:
  const char* kind_;
  std::string path_;
  std::shared_ptr<spdlog::logger> logger_;
  rate_limited_log limited_;
};

}  // namespace flopmeter::detail
