// Internal: the c10d communicator with a device-side contribution, for the tensor path (torch_path.cpp).
#pragma once

#include <functional>
#include <memory>

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

}  // namespace flopmeter::detail
