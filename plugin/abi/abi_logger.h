// plugin/abi/abi_logger.h — internal: the logger of every plugin the C ABI creates. Its messages go to the
// trainer's log callback (flopmeter_set_log_callback) when one is set and the message is at or above the level
// it asked for; every other message goes to stderr as the C++ API's private logger writes it.
// Thread-safety: abi_logger() and set_abi_log_callback() may be called from any thread; a message reads the
// callback under a lock and calls it after releasing that lock.
#pragma once

#include <spdlog/logger.h>

#include <memory>

#include "flopmeter/c_api.h"

namespace flopmeter::detail {

// A new logger named "flopmeter" over the process-wide callback target (never registered with spdlog).
std::shared_ptr<spdlog::logger> abi_logger();

// Sets (callback non-NULL) or clears the target: messages at or above `min_level` (FLOPMETER_LOG_LEVEL_*).
void set_abi_log_callback(flopmeter_log_callback callback, void* user, int min_level);

}  // namespace flopmeter::detail
