// The tensor path's logging (see torch_path_log.h): no LibTorch header here.
#include "tensor/torch_path_log.h"

#include <spdlog/spdlog.h>

#include "output/logging.h"

namespace flopmeter::detail {

std::shared_ptr<spdlog::logger> make_tensor_path_logger() {
  return private_logger();
}

std::shared_ptr<rate_limited_log> make_warning_limiter() { return std::make_shared<rate_limited_log>(); }

bool warn_uncounted_microbatch(spdlog::logger& logger, rate_limited_log& limiter, const char* why) noexcept {
  return limiter.warn(logger,
                      "flopmeter: tensor micro-batch not counted: {} (logged at most once a minute; "
                      "health().bad_microbatches counts every one)",
                      why);
}

}  // namespace flopmeter::detail
