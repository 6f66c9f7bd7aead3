// plugin/output/logging.h — internal: flopmeter's two logging helpers, used by the plugin, the sinks and the
// tensor path.
//   private_logger(): when the trainer gives no logger, a private one named "flopmeter" writing to stderr —
//     never registered in spdlog's registry and never made the default, so the trainer's spdlog set-up is
//     left exactly as it was.
//   rate_limiter: at most one message per interval (60 s by default) for one kind of message, counting the
//     ones it held back so that the next message can say how many.
// Thread-safety: private_logger() is reentrant; a rate_limiter is used under its owner's lock.
#pragma once

#include <spdlog/logger.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

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

}  // namespace flopmeter::detail
