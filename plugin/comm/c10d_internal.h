// Internal: the c10d communicator with a device-side contribution, for the tensor path (torch_path.cpp), and
// what the c10d adapter, flopmeter's own Gloo groups and the tensor path share.
#pragma once

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

// Called with the collective's buffer (world x kRowFields doubles) on the device the all-reduce runs on — the
// CPU for Gloo, the current CUDA device for NCCL — after the host values were copied in and before the
// all-reduce is enqueued; it may add device-resident values into this rank's row. It must not synchronise.
using device_contribution = std::function<void(at::Tensor& buffer)>;

std::shared_ptr<communicator> make_c10d_communicator_with(c10::intrusive_ptr<c10d::ProcessGroup> group,
                                                          device_contribution contribute);

// The message of an exception without c10's multi-line backtrace (gloo_group.cpp).
std::string describe_exception(const std::exception_ptr& e);

// Refuses a group that cannot be the whole job: `group_size` must equal the job's size, which is
// `stated_job_world_size` when > 0, else WORLD_SIZE when set (else nothing is checked). `who` starts the
// message, which says what to pass instead (c10d.h, "WHICH GROUP"). Throws flopmeter::error.
void check_group_covers_job(const std::string& who, int group_size, int stated_job_world_size);

}  // namespace flopmeter::detail
