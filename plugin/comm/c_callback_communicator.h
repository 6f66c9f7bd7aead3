// plugin/comm/c_callback_communicator.h — internal: the communicator over a trainer's flopmeter_comm callbacks
// (c_api.h), the C ABI's adapter, one file per backend like the c10d and NCCL ones.
// Ownership: the communicator keeps a copy of the flopmeter_comm struct; the trainer's `user` pointer and
// callbacks must stay valid until the plugin using it is destroyed. Every handle start_allreduce_sum returns
// is released exactly once, by the pending collective that owns it.
// Thread-safety: as the trainer's callbacks are; the plugin calls them under its own lock, one at a time.
#pragma once

#include <memory>

#include "flopmeter/c_api.h"
#include "flopmeter/communicator.h"

namespace flopmeter::detail {

// A communicator calling `comm`'s callbacks, or make_local_communicator() when `comm` is NULL. Throws
// flopmeter::error for a struct the C ABI refuses: struct_size below sizeof(flopmeter_comm), a callback left
// NULL, world_size outside [1, FLOPMETER_MAX_WORLD_SIZE] or rank outside [0, world_size).
std::shared_ptr<communicator> communicator_from(const flopmeter_comm* comm);

}  // namespace flopmeter::detail
