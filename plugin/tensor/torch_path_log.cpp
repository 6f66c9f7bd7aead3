// The tensor path's logging (see torch_path_log.h): no LibTorch header here.
#include "tensor/torch_path_log.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace flopmeter::detail {

std::shared_ptr<spdlog::logger> make_tensor_path_logger() {
  return std::make_shared<spdlog::logger>("flopmeter", std::make_shared<spdlog::sinks::stderr_sink_mt>());
}

void warn_uncounted_microbatch(spdlog::logger& logger, const char* why) noexcept {
  try {
    logger.warn("flopmeter: tensor micro-batch not counted: {}", why);
  } catch (...) {
  }
}

}  // namespace flopmeter::detail
