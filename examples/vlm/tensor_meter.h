// examples/vlm/tensor_meter.h — flopmeter fed through its C++ tensor path (include/flopmeter/torch.h), the way
// the trainer meters a run with --device cuda: the batch's own cu_seqlens and grid_thw tensors, on the GPU,
// go to flopmeter::tensor_throughput; the counts are formed and accumulated there, and reach the host only
// through the per-log all-reduce of the table, at every log (an NCCL group keeps them on the GPU throughout).
//
// The plugin TOML is the same file the C ABI path hands to flopmeter_create, read by the library's
// create_tensor_throughput: its sinks are built the same way (console, JSONL, TensorBoard, "{rank}" replaced). Like
// vlm::plugin_library it measures the wall time spent inside every event call, for the trainer's overhead
// line.
//
// Ownership: owns the tensor_throughput (which shares the process group). Errors: create throws
// std::runtime_error with flopmeter's message; event calls never throw. Thread-safety: one thread at a time.
#pragma once

#include <c10/core/Device.h>
#include <c10/util/intrusive_ptr.h>

#include <cstdint>
#include <memory>
#include <string>

#include "flopmeter/c_api.h"
#include "flopmeter/events.h"
#include "flopmeter/torch.h"

namespace c10d {
class ProcessGroup;
}  // namespace c10d

namespace vlm {

class tensor_meter {
 public:
  // Counters on `device`, which must be where `group` all-reduces (CUDA for NCCL, the CPU for Gloo).
  static std::unique_ptr<tensor_meter> create(const std::string& plugin_config,
                                              c10::intrusive_ptr<c10d::ProcessGroup> group, c10::Device device);

  void on_microbatch(const flopmeter::tensor_microbatch& batch);
  void on_log(const flopmeter::log_event& log);
  void flush();
  // The plugin's health counters, in the C ABI's struct so the trainer reports both paths the same way.
  flopmeter_health_counters health() const;

  const std::string& description() const { return description_; }
  double event_seconds() const { return event_seconds_; }
  double setup_seconds() const { return setup_seconds_; }
  std::int64_t event_calls() const { return event_calls_; }

 private:
  tensor_meter() = default;
  std::shared_ptr<flopmeter::tensor_throughput> meter_;
  std::string description_;
  double event_seconds_ = 0;
  double setup_seconds_ = 0;
  std::int64_t event_calls_ = 0;
};

}  // namespace vlm
