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
#include <functional>
#include <memory>

#include "flopmeter/communicator.h"

namespace flopmeter::detail {

// One collective as the C ABI's flopmeter_collective describes it (abi/c_api.cpp converts it).
struct collective_request {
  enum class kind { sum_max, allgather };
  kind what = kind::sum_max;
  double* values = nullptr;      // sum_max: count values, in place; allgather: the world x count table
  std::size_t count = 0;         // sum_max: the elements; allgather: the elements per rank
  std::size_t sum_count = 0;     // sum_max: the first sum_count elements add, the rest take the maximum
  const double* send = nullptr;  // allgather: this rank's count values (already in its slot of values)
};

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
  // Optional: every collective of an ordinary log and of the per-rank table as one call (the two starts above
  // are then not used for them). A handle it returns is released by the wait that finishes it (done or
  // failed); `release` is called only for one never waited for to its end.
  std::function<void*(const collective_request&)> start;
};

// A communicator calling `callbacks`. Throws flopmeter::error naming `what` ("flopmeter_comm") for callbacks
// it cannot use: one left NULL, world_size outside [1, max_world_size] or rank outside [0, world_size).
std::shared_ptr<communicator> make_callback_communicator(const callback_collective& callbacks, const char* what);

}  // namespace flopmeter::detail
