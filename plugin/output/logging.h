// plugin/output/logging.h — internal: flopmeter's logging helpers, used by the plugin, the C ABI, the sinks
// and the tensor path.
//   private_logger(): when the trainer gives no logger, a private one named "flopmeter" writing to stderr —
//     never registered in spdlog's registry and never made the default, so the trainer's spdlog set-up is
//     left exactly as it was.
//   rate_limiter: at most one message per interval (60 s by default) for one kind of message, counting the
//     ones it held back so that the next message can say how many.
//   rate_limited_log: the one way flopmeter reports a problem from a hook, a sink or the C ABI: one kind of
//     message, at most once a minute (the next one says how many were held back), through printable_text
//     (the arguments carry exception texts of the trainer's sinks, clock and communicator), never throwing,
//     and never from inside one of flopmeter's own logger calls on the same thread (a trainer's logger sink
//     that calls back into flopmeter must not log again: that could deadlock on the logger's own sink lock).
// Thread-safety: private_logger() is reentrant; a rate_limiter is used under its owner's lock; a
// rate_limited_log may be used from any thread (it locks its limiter, never while it logs).
#pragma once

#include <spdlog/fmt/fmt.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "flopmeter/error.h"  // printable_text

namespace flopmeter::detail {

inline std::shared_ptr<spdlog::logger> private_logger() {
  return std::make_shared<spdlog::logger>("flopmeter", std::make_shared<spdlog::sinks::stderr_sink_mt>());
}

inline std::shared_ptr<spdlog::logger> logger_or_private(std::shared_ptr<spdlog::logger> logger) {
  return logger ? std::move(logger) : private_logger();
}

class rate_limiter {
 public:
  explicit rate_limiter(std::chrono::steady_clock::duration every = std::chrono::seconds(60)) : every_(every) {}

  // True when a message may be logged now (the first one always); otherwise counts it as suppressed.
  bool allow(std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now()) {
    if (last_ && now - *last_ < every_) {
      ++suppressed_;
      return false;
    }
    last_ = now;
    return true;
  }

  // The messages held back since the last one allowed; resets the count.
  std::uint64_t take_suppressed() { return std::exchange(suppressed_, 0); }

 private:
  std::chrono::steady_clock::duration every_;
  std::optional<std::chrono::steady_clock::time_point> last_;
  std::uint64_t suppressed_ = 0;
};

// True while this thread is inside one of flopmeter's logger calls (log_noexcept, rate_limited_log).
inline bool& inside_logger_call() noexcept {
  thread_local bool inside = false;
  return inside;
}

// Calls `log()` (which logs through a logger) with exceptions swallowed and inside_logger_call() set; does
// nothing when this thread is inside such a call already. Returns whether it called.
template <class Log>
bool log_noexcept_with(const Log& log) noexcept {
  bool& inside = inside_logger_call();
  if (inside) return false;
  inside = true;
  try {
    log();
  } catch (...) {
    // Logging must not be the thing that throws into the training loop.
  }
  inside = false;
  return true;
}

// `format` with `args` on `logger` at `level`, unlimited (a message that is rare by construction: a pause, a
// resumption), with the guarantees of rate_limited_log but its rate limit. The arguments are not escaped.
template <class... Args>
void log_noexcept(spdlog::logger& logger, spdlog::level::level_enum level, const char* format,
                  const Args&... args) noexcept {
  log_noexcept_with([&] { logger.log(level, fmt::runtime(format), args...); });
}

class rate_limited_log {
 public:
  explicit rate_limited_log(std::chrono::steady_clock::duration every = std::chrono::seconds(60)) : limiter_(every) {}

  // Logs `format` with `args` at `level` when this kind of message is allowed now, with " (N similar messages
  // suppressed)" when some were held back; the whole text through printable_text (newlines kept). Returns
  // whether it logged.
  template <class... Args>
  bool log(spdlog::logger& logger, spdlog::level::level_enum level, const char* format, const Args&... args) noexcept {
    if (inside_logger_call()) return false;
    std::uint64_t suppressed = 0;
    try {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (!limiter_.allow()) return false;
      suppressed = limiter_.take_suppressed();
    } catch (...) {
      return false;  // the mutex could not be locked
    }
    return log_noexcept_with([&] {
      std::string message = fmt::format(fmt::runtime(format), args...);
      if (suppressed > 0) message += fmt::format(" ({} similar messages suppressed)", suppressed);
      logger.log(level, "{}", printable_text(message, /*keep_newlines=*/true));
    });
  }

  template <class... Args>
  bool warn(spdlog::logger& logger, const char* format, const Args&... args) noexcept {
    return log(logger, spdlog::level::warn, format, args...);
  }

 private:
  std::mutex mutex_;
  rate_limiter limiter_;
};

}  // namespace flopmeter::detail
