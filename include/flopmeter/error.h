// flopmeter/error.h — the one exception type of flopmeter's setup tier.
//
// Contract: configuration loading, validation and the pure FLOP arithmetic throw `flopmeter::error`
// with a message that says what is wrong and where (file:line:col and key path for TOML). The hooks a
// trainer calls (`on_microbatch`, `on_log`, `flush`) never throw: they catch, count and log.
// Thread-safety: an `error` is an immutable value; copy it freely between threads.
#pragma once

#include <stdexcept>
#include <string>

#include "flopmeter/export.h"

namespace flopmeter FLOPMETER_EXPORT {

class error : public std::runtime_error {
 public:
  explicit error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace FLOPMETER_EXPORT
