// Internal: the tensor path's (torch_path.cpp) use of spdlog, compiled in torch_path_log.cpp, away from
// LibTorch's headers. A PyPI LibTorch ships its own fmt (12.x) in its include directory, and Debian's spdlog is
// built against Debian's fmt (9.x): one translation unit cannot see both, so no LibTorch source of flopmeter
// includes spdlog or fmt (plugin/CMakeLists.txt keeps LibTorch's include directories off the others).
#pragma once

#include <chrono>
#include <memory>

namespace spdlog {
class logger;
}  // namespace spdlog

namespace flopmeter::detail {

// A private, unregistered logger writing to stderr, like the plugin's own (the trainer's spdlog registry is
// not ours to touch).
std::shared_ptr<spdlog::logger> make_tensor_path_logger();

// How often one kind of warning may be logged: once a minute, as the host path's (throughput.cpp).
inline constexpr std::chrono::seconds kTensorPathWarnEvery{60};

// The last time one kind of warning was logged. Not synchronised: the caller holds its own lock.
struct warning_limiter {
  std::chrono::steady_clock::time_point last{};
};

// "flopmeter: tensor micro-batch not counted: <why>" at warning level, unless `limiter` logged within
// kTensorPathWarnEvery; returns whether it logged. Never throws.
bool warn_uncounted_microbatch(spdlog::logger& logger, warning_limiter& limiter, const char* why) noexcept;

}  // namespace flopmeter::detail
