// plugin/comm/c_callback_communicator.h — internal: the communicator over a trainer's all-reduce callbacks
// (the C ABI's flopmeter_comm, which abi/c_api.cpp copies into `callback_collective`), one file per backend
// like the c10d and NCCL ones. This floor does not include the C ABI's header: the callbacks' types are
// spelled here, and c_api.cpp checks that they are flopmeter_comm's.
// Ownership: the communicator keeps a copy of the callbacks; the trainer's `user` pointer and callbacks must
// stay valid until the plugin using it is destroyed. Every handle start_allreduce_sum returns is released
// exactly once, by the pending collective that owns it.
// Thread-safety: as the trainer's callbacks are; the plugin calls them under its own lock, one at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "flopmeter/communicator.h"

namespace flopmeter::detail {

// An in-place SUM all-reduce of doubles provided by the trainer: start returns a non-NULL handle (NULL = could
// not start); wait returns 0 done, 1 still pending after timeout_ms, anything else failed; release frees the
// handle (called exactly once per handle, also if unfinished).
struct callback_collective {
  int rank = 0;
  int world_size = 1;
  void* user = nullptr;
  void* (*start_allreduce_sum)(void* user, double* values, std::size_t count) = nullptr;
  int (*wait)(void* user, void* handle, std::int64_t timeout_ms) = nullptr;
  void (*release)(void* user, void* handle) = nullptr;
  // An in-place MAX all-reduce, optional: NULL runs the MAX over the SUM (communicator::start_allreduce_max).
  void* (*start_allreduce_max)(void* user, double* values, std::size_t count) = nullptr;
};

// A communicator calling `callbacks`. Throws flopmeter::error naming `what` ("flopmeter_comm") for callbacks
// it cannot use: one left NULL, world_size outside [1, max_world_size] or rank outside [0, world_size).
std::shared_ptr<communicator> make_callback_communicator(const callback_collective& callbacks, const char* what);

}  // namespace flopmeter::detail
