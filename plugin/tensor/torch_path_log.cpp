// The tensor path's logging (see torch_path_log.h): no LibTorch header here.
#include "tensor/torch_path_log.h"

#include <spdlog/spdlog.h>

#include "output/logging.h"

namespace flopmeter::detail {

std::shared_ptr<spdlog::logger> make_tensor_path_logger() {
  return private_logger();
}

void warn_uncounted_microbatch(spdlog::logger& logger, const char* why) noexcept {
  try {
    logger.warn("flopmeter: tensor micro-batch not counted: {}", why);
  } catch (...) {
  }
}

}  // namespace flopmeter::detail
