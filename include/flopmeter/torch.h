// flopmeter/torch.h — the LibTorch tensor path: micro-batches described by tensors on any device.
//
// What it is: `tensor_throughput` is a throughput plugin (a flopmeter::plugin, so it registers with `hooks`
// like the host path) that also takes the batch tensors a trainer already has (cu_seqlens or positions,
// grid_thw) wherever they live. They are counted on the host by the host path's own counter, so both paths give
// the same counts, FLOPs and refusals for the same batch. CPU tensors are counted at once. Tensors on a device
// (CUDA) are copied with non_blocking copies into pinned host memory on their current stream, with an event
// recorded after them; nothing on the micro-batch path waits for the device. Each copy is counted when its
// event has fired: at the next hook, and at on_log and flush for every copy of the interval that ends, which
// waits for copies still in flight (polling their events) for at most 60 s; a copy that has not arrived by
// then is given up, counted in health().bad_microbatches with a warning.
//
// Rejected batches: a malformed batch is not counted in any metric (tokens, FLOPs, samples, loss sum and label
// tokens alike), exactly as on the host path; only the fact that a micro-batch ran (step time) stays. What is
// known without reading the tensors (both cu_seqlens and positions, a tensor of the wrong rank or shape, a
// floating-point or bool tensor, negative padding or samples, image grids for a model without a vision tower)
// is refused at once; what needs their values (cu_seqlens not starting at 0, positions that do not restart at 0,
// a bad grid, label tokens above the real tokens) when they are counted. Both reach health().bad_microbatches
// and one warning a minute per kind, as on the host path.
//
// Only in builds with LibTorch, against the same LibTorch as the trainer.
// Which group: one over every rank of the job (flopmeter/c10d.h, "WHICH GROUP"), all-reducing where the
// counters live: a world NCCL group for CUDA tensors. A group whose size differs from the job's (WORLD_SIZE,
// or c10d_options) is refused. If that group is also the trainer's, every rank must fire every on_log (c10d.h,
// "THE RECOMMENDED PATH", says why). With CPU tensors the tensor path gains nothing: use the host path over a
// Gloo group of flopmeter's own (make_gloo_communicator) instead.
// Ownership: shares the process group (intrusive_ptr) and owns the plugin and the host copies in flight.
// Thread-safety: all hooks take one internal mutex; tensors must not be written by the trainer while a hook
// reads them (ATen's own rule).
// Re-entry: as for throughput_plugin (throughput.h, "Re-entry"): from inside this plugin's own sinks, logger or
// collective, health() works and on_microbatch / on_log / flush are refused and counted in
// health().reentrant_calls instead of deadlocking.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/util/intrusive_ptr.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "flopmeter/export.h"
#include "flopmeter/c10d.h"
#include "flopmeter/flop_model.h"
#include "flopmeter/hooks.h"
#include "flopmeter/throughput.h"

namespace c10d {
class ProcessGroup;
}  // namespace c10d

namespace flopmeter FLOPMETER_EXPORT {

// One micro-batch as tensors. Give cu_seqlens or positions (1-D, any integer dtype; floating-point and bool
// tensors are rejected), not both.
struct tensor_microbatch {
  at::Tensor cu_seqlens;       // document boundaries, starting at 0
  at::Tensor positions;        // one entry per real token, restarting at 0 per document
  at::Tensor grid_thw;         // [items, 3] (t, h, w) in patches, integer dtype; undefined or empty when none
  std::int64_t padding_tokens = 0;
  std::int64_t samples = 0;
  std::optional<double> loss_sum;            // counted (with label_tokens) only when both are set
  std::optional<std::int64_t> label_tokens;
};

class tensor_throughput final : public plugin {
 public:
  // `options` as for throughput_plugin::create (its `sinks` are the sinks used); the plugin's collective runs
  // over `group`, which must span the job (checked against `checks.job_world_size`, else WORLD_SIZE).
  // `device` is where the batch tensors live, which must be where `group` all-reduces (CPU for Gloo, CUDA
  // for NCCL).
  // Throws flopmeter::error.
  static std::shared_ptr<tensor_throughput> create(throughput_options options,
                                                   c10::intrusive_ptr<c10d::ProcessGroup> group, c10::Device device,
                                                   const c10d_options& checks = {});
  ~tensor_throughput() override;

  void on_microbatch(const tensor_microbatch& batch) noexcept;
  void on_microbatch(const microbatch_event& event) noexcept override;  // host-described batches still work
  void on_log(const log_event& event) noexcept override;
  void flush() noexcept override;

  throughput_plugin& plugin();
  throughput_health health() const;

 private:
  class impl;
  explicit tensor_throughput(std::unique_ptr<impl> state);
  std::unique_ptr<impl> impl_;
};

// The tensor path from a plugin TOML in one call, as create_throughput_plugin is for the host path: loads the
// file, builds the sinks its [sinks] table names (console through `logger`, JSONL with "{rank}" replaced by
// the rank in `group`), appends `extra_sinks` and creates the plugin over `group` for batch tensors on `device`.
// Throws flopmeter::error naming the file on any configuration problem.
std::shared_ptr<tensor_throughput> create_tensor_throughput(const std::string& config_path,
                                                            c10::intrusive_ptr<c10d::ProcessGroup> group,
                                                            c10::Device device,
                                                            std::shared_ptr<spdlog::logger> logger = nullptr,
                                                            std::vector<std::shared_ptr<sink>> extra_sinks = {},
                                                            const c10d_options& checks = {});

}  // namespace FLOPMETER_EXPORT
