// The tensor path's logging (see torch_path_log.h): no LibTorch header here.
#include "tensor/torch_path_log.h"

#include <spdlog/spdlog.h>

#include "output/logging.h"

namespace flopmeter::detail {

std::shared_ptr<spdlog::logger> make_tensor_path_logger() {
  return private_logger();
}

bool warn_uncounted_microbatch(spdlog::logger& logger, warning_limiter& limiter, const char* why) noexcept {
  try {
    const auto now = std::chrono::steady_clock::now();
    if (limiter.last.time_since_epoch().count() != 0 && now - limiter.last < kTensorPathWarnEvery) return false;
    limiter.last = now;
    logger.warn("flopmeter: tensor micro-batch not counted: {} (this warning is logged at most once a minute; "
                "health().bad_microbatches counts every one)", why);
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace flopmeter::detail
