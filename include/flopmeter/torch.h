// flopmeter/torch.h — the LibTorch tensor path: micro-batches described by tensors on any device.
//
// What it is: `tensor_throughput` wraps a throughput plugin so that a trainer can hand it the batch tensors
// it already has (cu_seqlens or positions, grid_thw) wherever they live. Counts are computed with ATen ops on
// the tensors' device and accumulated there; nothing is copied to the host and nothing synchronises on the
// micro-batch path. At each log the accumulated counts are added into this rank's row of the log's one
// collective on that device (the c10d group's device: CPU for Gloo, the current CUDA device for NCCL), and
// the interval is read back after the collective with a non-blocking copy and an event, one log later. On
// CPU tensors it is the same code path, trivially complete. FLOPs are formed from the gathered integer
// counts on the host, so the tensor path and the host path give bit-identical FLOPs for the same batch.
//
// Validation happens on the device too: a malformed batch (cu_seqlens not starting at 0 or decreasing,
// positions that do not restart at 0 or step by 1, a grid dimension < 1 or not divisible by the merge size,
// sizes beyond the overflow-safe bounds) is excluded from the counts by a mask and counted; the count reaches
// health().bad_microbatches one log later. Bounds on the device: documents <= 2^31 tokens, t*h*w <= 2^31.
//
// Only in builds with LibTorch, against the same LibTorch as the trainer.
// Ownership: shares the process group (intrusive_ptr) and owns the plugin and its device accumulators.
// Thread-safety: all hooks take one internal mutex; tensors must not be written by the trainer while a hook
// reads them (ATen's own rule).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/util/intrusive_ptr.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

#include "flopmeter/export.h"
#include "flopmeter/flop_model.h"
#include "flopmeter/throughput.h"

namespace c10d {
class ProcessGroup;
}  // namespace c10d

namespace flopmeter FLOPMETER_EXPORT {

// One micro-batch as tensors. Give cu_seqlens or positions (1-D, any integer dtype), not both.
struct tensor_microbatch {
  at::Tensor cu_seqlens;       // document boundaries, starting at 0
  at::Tensor positions;        // one entry per real token, restarting at 0 per document
  at::Tensor grid_thw;         // [items, 3] (t, h, w) in patches; undefined or empty when there are none
  std::int64_t padding_tokens = 0;
  std::int64_t samples = 0;
  std::optional<double> loss_sum;
  std::optional<std::int64_t> label_tokens;
};

// The counts of one micro-batch on its tensors' device, without a sync: an int64 tensor of 10 entries, the
// nine batch_counts fields in declaration order followed by the number of invalid entries found (0 = valid).
at::Tensor tensor_batch_counts(const tensor_microbatch& batch, const vision_geometry& geometry);

// Reads such a tensor back (synchronises: for tests and tools, not for the training loop).
batch_counts to_batch_counts(const at::Tensor& counts);

class tensor_throughput {
 public:
  // `options` as for throughput_plugin::create; the plugin's collective runs over `group`. The counters
  // live on `device`, which must be where `group` all-reduces (CPU for Gloo, CUDA for NCCL).
  static std::shared_ptr<tensor_throughput> create(throughput_options options,
                                                   c10::intrusive_ptr<c10d::ProcessGroup> group, c10::Device device);
  ~tensor_throughput();

  void on_microbatch(const tensor_microbatch& batch) noexcept;
  void on_microbatch(const microbatch_event& event) noexcept;  // host-described batches still work
  void on_log(const log_event& event) noexcept;
  void flush() noexcept;

  throughput_plugin& plugin();
  throughput_health health() const;

  class impl;

 private:
  explicit tensor_throughput(std::unique_ptr<impl> state);
  std::unique_ptr<impl> impl_;
};

}  // namespace FLOPMETER_EXPORT
