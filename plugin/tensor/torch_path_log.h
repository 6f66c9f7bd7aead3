// Internal: the tensor path's (torch_path.cpp) use of spdlog, compiled in torch_path_log.cpp, away from
// LibTorch's headers. A PyPI LibTorch ships its own fmt (12.x) in its include directory, and Debian's spdlog is
// built against Debian's fmt (9.x): one translation unit cannot see both, so no LibTorch source of flopmeter
// includes spdlog or fmt (plugin/CMakeLists.txt keeps LibTorch's include directories off the others).
#pragma once

#include <memory>

namespace spdlog {
class logger;
}  // namespace spdlog

namespace flopmeter::detail {

// A private, unregistered logger writing to stderr, like the plugin's own (the trainer's spdlog registry is
// not ours to touch).
std::shared_ptr<spdlog::logger> make_tensor_path_logger();

class rate_limited_log;  // output/logging.h: one message a minute per kind, as on the host path

// The rate limit of one kind of tensor-path warning (created where spdlog is visible).
std::shared_ptr<rate_limited_log> make_warning_limiter();

// "flopmeter: tensor micro-batch not counted: <why>" at warning level when `limiter` allows it (one a minute),
// saying how many were held back since the last one (rate_limited_log); returns whether it logged. Never
// throws.
bool warn_uncounted_microbatch(spdlog::logger& logger, rate_limited_log& limiter, const char* why) noexcept;

}  // namespace flopmeter::detail
