// The tensor path's logging (see torch_path_log.h): no LibTorch header here.
#include "tensor/torch_path_log.h"

#include <spdlog/spdlog.h>

#include "flopmeter/error.h"
#include "output/logging.h"

namespace flopmeter::detail {

std::shared_ptr<spdlog::logger> make_tensor_path_logger() {
  return private_logger();
}

std::shared_ptr<rate_limiter> make_warning_limiter() { return std::make_shared<rate_limiter>(); }

bool warn_uncounted_microbatch(spdlog::logger& logger, rate_limiter& limiter, const char* why) noexcept {
  try {
    if (!limiter.allow()) return false;
    const std::uint64_t held_back = limiter.take_suppressed();
    if (held_back == 0) {
      logger.warn(
          "flopmeter: tensor micro-batch not counted: {} (logged at most once a minute; "
          "health().bad_microbatches counts every one)",
          printable_text(why, true));
    } else {
      logger.warn(
          "flopmeter: tensor micro-batch not counted: {} ({} more since the last warning; "
          "health().bad_microbatches counts every one)",
          printable_text(why, true), held_back);
    }
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace flopmeter::detail
