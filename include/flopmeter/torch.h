// flopmeter/torch.h — the LibTorch tensor path: micro-batches described by tensors on any device.
//
// What it is: `tensor_throughput` is a throughput plugin (a flopmeter::plugin, so it registers with `hooks`
// like the host path) that also takes the batch tensors a trainer already has (cu_seqlens or positions,
// grid_thw) wherever they live. Counts are computed with ATen ops on the tensors' device and accumulated
// there; nothing is copied to the host and nothing synchronises on the micro-batch path. At each log the
// accumulated counts are added into this rank's row of the per-rank table on that device, gathered at every log (the c10d
// group's device: CPU for Gloo, the current CUDA device for NCCL), and the interval is read back after the
// collective with a non-blocking copy and an event, one log later. On CPU tensors it is the same code path,
// trivially complete. FLOPs are formed from the gathered integer counts on the host, so the tensor path and
// the host path give bit-identical FLOPs for the same batch. train/flops_seen, the running total, cannot wait
// for counts that stay on the device: at each log the device forms the exact FLOPs of its interval's counts
// itself (integer arithmetic, no sync) and adds this rank's running total into its row, so the figure is the
// host path's, exact, whichever intervals were lost.
//
// Rejected batches: a malformed batch is not counted in any metric — tokens, FLOPs, samples, loss sum and
// label tokens alike — exactly as on the host path; only the fact that a micro-batch ran (step time) stays.
// - Known on the host, at once: both cu_seqlens and positions, a tensor of the wrong rank or shape, a
//   floating-point or bool tensor (cu_seqlens, positions and grid_thw must have an integer dtype), negative
//   padding, samples or label tokens, a non-finite loss sum, image grids for a model without a vision tower.
//   One warning a minute per kind, as on the host path.
// - Found on the device, by a mask (no sync): cu_seqlens not starting at 0 or decreasing, positions that do
//   not restart at 0 or step by 1, a grid dimension < 1 or not divisible by the merge size, sizes beyond the
//   overflow-safe bounds (documents <= 2^32 - 1 tokens as on the host path, t*h*w <= 2^31). The batch's
//   counts, samples, loss and label tokens are multiplied by the mask on the device. Sums over documents,
//   items and micro-batches are float64 on the device: exact below 2^53, never wrapping; an interval whose
//   count reaches 2^53 is skipped by every rank, as on the host path.
// Both reach health().bad_microbatches one log later (the count travels on the device, in the log's
// collective).
//
// Only in builds with LibTorch, against the same LibTorch as the trainer.
// Which group: one over every rank of the job (flopmeter/c10d.h, "WHICH GROUP"), all-reducing where the
// counters live: a world NCCL group for CUDA tensors. A group whose size differs from the job's (WORLD_SIZE,
// or c10d_options) is refused. If that group is also the trainer's, every rank must fire every on_log (c10d.h,
// "THE RECOMMENDED PATH", says why). With CPU tensors the tensor path gains nothing: use the host path over a
// Gloo group of flopmeter's own (make_gloo_communicator) instead.
// Ownership: shares the process group (intrusive_ptr) and owns the plugin and its device accumulators.
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

// The counts of one micro-batch on its tensors' device, without a sync: a float64 tensor of the batch_counts
// fields in the order of the count table (the per-log row's), followed by the number of invalid entries found
// (0 = valid).
// Each document's and item's count is exact in int64; their sums are float64, exact below 2^53 and never
// wrapping (a larger sum stays >= 2^53, which the plugin refuses as beyond what a row carries exactly).
// Throws flopmeter::error for what is known on the host (see "Rejected batches" above).
at::Tensor tensor_batch_counts(const tensor_microbatch& batch, const vision_geometry& geometry);

// Reads such a tensor back (synchronises: for tests and tools, not for the training loop). Throws
// flopmeter::error when a count is not an exact integer below 2^53.
batch_counts to_batch_counts(const at::Tensor& counts);

class tensor_throughput final : public plugin {
 public:
  // `options` as for throughput_plugin::create (its `sinks` are the sinks used); the plugin's collective runs
  // over `group`, which must span the job (checked against `checks.job_world_size`, else WORLD_SIZE). The
  // counters live on `device`, which must be where `group` all-reduces (CPU for Gloo, CUDA for NCCL).
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
// the rank in `group`), appends `extra_sinks` and creates the plugin over `group` with counters on `device`.
// Throws flopmeter::error naming the file on any configuration problem.
std::shared_ptr<tensor_throughput> create_tensor_throughput(const std::string& config_path,
                                                            c10::intrusive_ptr<c10d::ProcessGroup> group,
                                                            c10::Device device,
                                                            std::shared_ptr<spdlog::logger> logger = nullptr,
                                                            std::vector<std::shared_ptr<sink>> extra_sinks = {},
                                                            const c10d_options& checks = {});

}  // namespace FLOPMETER_EXPORT
