// Internal: what the c10d adapter, flopmeter's own Gloo groups and the tensor path share.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include "flopmeter/communicator.h"

namespace c10d {
class ProcessGroup;
}  // namespace c10d

namespace flopmeter::detail {

// Whether a group's ordinary logs and table logs run by the log-depth collectives (c10d_log_depth.cpp):
// `choice` as the caller gave it, `own_group` true for a group flopmeter built itself, `backend` the group's
// backend name. Throws flopmeter::error (starting with `who`) for small_allreduce::log_depth on an NCCL group.
bool resolve_small_allreduce(small_allreduce choice, bool own_group, int world, const std::string& backend,
                             const std::string& who);

// `inner` (a c10d communicator over `group`, a CPU group) with start_allreduce_sum_max (recursive halving and
// doubling) and start_allgather (recursive doubling) run over the group's send/recv on a worker thread
// (log_depth.h); every other collective goes to `inner`. `timeout` bounds each message (0: the group's own
// timeout).
std::shared_ptr<communicator> with_log_depth(std::shared_ptr<communicator> inner,
                                             c10::intrusive_ptr<c10d::ProcessGroup> group,
                                             std::chrono::milliseconds timeout);

// A communicator over a group flopmeter built itself (gloo_group.cpp): `choice` resolved with own_group true.
std::shared_ptr<communicator> make_own_c10d_communicator(c10::intrusive_ptr<c10d::ProcessGroup> group,
                                                         small_allreduce choice, std::chrono::milliseconds timeout,
                                                         const std::string& who);

// The message of an exception without c10's multi-line backtrace (gloo_group.cpp).
std::string describe_exception(const std::exception_ptr& e);

// Refuses a group that cannot be the whole job: `group_size` must equal the job's size, which is
// `stated_job_world_size` when > 0, else WORLD_SIZE when set (else nothing is checked). `who` starts the
// message, which says what to pass instead (c10d.h, "WHICH GROUP"). Throws flopmeter::error.
void check_group_covers_job(const std::string& who, int group_size, int stated_job_world_size);

}  // namespace flopmeter::detail
