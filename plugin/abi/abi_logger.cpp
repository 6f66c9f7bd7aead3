// The C ABI's logger: a spdlog sink that hands each message to the trainer's callback (flopmeter_set_log_callback,
// defined here) or, without one, writes it to stderr. See abi_logger.h.
#include "abi/abi_logger.h"

#include <spdlog/details/log_msg.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <mutex>
#include <string>

// libspdlog.so instantiates base_sink<std::mutex> and the stderr sink's base (their vtables and typeinfo, with
// spdlog's default visibility). Declared here, this file uses those instantiations instead of making its own,
// which libflopmeter.so would export as spdlog symbols (ctest packaging_exported_symbols: none is exported).
extern template class spdlog::sinks::base_sink<std::mutex>;
extern template class spdlog::sinks::stdout_sink_base<spdlog::details::console_nullmutex>;

namespace flopmeter::detail {
namespace {

struct log_target {
  std::mutex mutex;
  flopmeter_log_callback callback = nullptr;
  void* user = nullptr;
  int min_level = FLOPMETER_LOG_LEVEL_WARN;
};

log_target& target() {
  static log_target* t = new log_target();  // never destroyed: a message may come during static destruction
  return *t;
}

// spdlog's level_enum numbers trace..critical 0..5, the FLOPMETER_LOG_LEVEL_* values.
static_assert(static_cast<int>(spdlog::level::warn) == FLOPMETER_LOG_LEVEL_WARN, "levels must match spdlog's");
static_assert(static_cast<int>(spdlog::level::critical) == FLOPMETER_LOG_LEVEL_CRITICAL, "levels must match");

class callback_sink final : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    flopmeter_log_callback callback = nullptr;
    void* user = nullptr;
    {
      log_target& t = target();
      std::lock_guard<std::mutex> lock(t.mutex);
      if (static_cast<int>(msg.level) >= t.min_level) {
        callback = t.callback;
        user = t.user;
      }
    }
    if (callback == nullptr) {
      stderr_.log(msg);
      return;
    }
    const std::string text(msg.payload.data(), msg.payload.size());
    callback(user, static_cast<int>(msg.level), text.c_str());
  }
  void flush_() override { stderr_.flush(); }

 private:
  spdlog::sinks::stderr_sink_st stderr_;  // under base_sink's mutex
};

}  // namespace

std::shared_ptr<spdlog::logger> abi_logger() {
  return std::make_shared<spdlog::logger>("flopmeter", std::make_shared<callback_sink>());
}

void set_abi_log_callback(flopmeter_log_callback callback, void* user, int min_level) {
  log_target& t = target();
  std::lock_guard<std::mutex> lock(t.mutex);
  t.callback = callback;
  t.user = callback != nullptr ? user : nullptr;
  t.min_level = min_level;
}

}  // namespace flopmeter::detail

extern "C" int flopmeter_set_log_callback(flopmeter_log_callback callback, void* user, int min_level) {
  if (min_level < FLOPMETER_LOG_LEVEL_TRACE || min_level > FLOPMETER_LOG_LEVEL_CRITICAL) return FLOPMETER_E_REJECTED;
  flopmeter::detail::set_abi_log_callback(callback, user, min_level);
  return FLOPMETER_OK;
}
