// flopmeter/metric_names.h — the names of the metrics in a metrics_record, defined once. METRICS.md says what
// each one means; the console line, the sinks and the derivation all use these constants.
//
// Names are plain string literals (char arrays), usable as keys in a callback sink:
// `record.find(flopmeter::metric::kMfu)`. Top-k rows are named by topk_name(): perf_topk/<base>_<side>_<i>
// and perf_topk/<base>_<side>_<i>_rank. Thread-safety: constants and a pure function.
#pragma once

#include <cstddef>
#include <string>

namespace flopmeter::metric {

// Throughput and utilisation (perf/...)
inline constexpr char kTokensPerSecond[] = "perf/tokens_per_second";
inline constexpr char kTokensPerSecondPerGpu[] = "perf/tokens_per_second_per_gpu";
inline constexpr char kTflopsPerSecond[] = "perf/tflops_per_second";  // per GPU
inline constexpr char kMfu[] = "perf/mfu";                             // percent
// Hardware FLOPs: the model FLOPs plus the forward that activation recomputation runs again ([training]
// recompute), over the same interval, peak and world; equal to the two above with recompute "none"
inline constexpr char kTflopsPerSecondHardware[] = "perf/tflops_per_second_hardware";  // per GPU
inline constexpr char kHfu[] = "perf/hfu";                                             // percent
inline constexpr char kStepTime[] = "perf/step_time";                  // seconds per micro-batch
inline constexpr char kOptimizerStepTime[] = "perf/optimizer_step_time";
inline constexpr char kMemGib[] = "perf/mem_gib";
inline constexpr char kMemReservedGib[] = "perf/mem_reserved_gib";  // the allocator's reserved peak
inline constexpr char kDataTime[] = "perf/data_time";
inline constexpr char kDataTimePct[] = "perf/data_time_pct";  // percent of the interval
inline constexpr char kForwardBackwardTime[] =
    "perf/fwd_bwd_time";  // the reference's name (0.2: forward_backward_time)
inline constexpr char kLogWaitMs[] = "perf/log_wait_ms";
inline constexpr char kLogEmitMs[] = "perf/log_emit_ms";
// What the Megatron per-token constant at each micro-batch's row length would report for the same interval,
// in full-training form, beside the exact figures (METRICS.md says when and why they differ)
inline constexpr char kTflopsPerSecondMegatron[] = "perf/tflops_per_second_megatron";  // per GPU
inline constexpr char kMfuMegatron[] = "perf/mfu_megatron";                            // percent

// Training (train/...)
inline constexpr char kBatchEfficiency[] = "train/batch_efficiency";
inline constexpr char kLoss[] = "train/loss";
inline constexpr char kMaxLoss[] = "train/max_loss";  // the highest mean loss of a data-parallel rank
inline constexpr char kTokensSeen[] = "train/tokens_seen";
inline constexpr char kFlopsSeen[] = "train/flops_seen";  // exact model FLOPs, running DP total (METRICS.md)
inline constexpr char kNumSamples[] = "train/num_samples";
inline constexpr char kAssistantTokensSeen[] = "train/assistant_tokens_seen";  // label tokens, running total
inline constexpr char kLearningRate[] = "train/lr";
inline constexpr char kGradNorm[] = "train/grad_norm";
// The training regime the FLOPs are billed for (training_regime): 1 when the part is frozen, else 0; the
// LoRA rank (0: no LoRA). In every record, so dashboards can tell runs apart.
inline constexpr char kFrozenVision[] = "train/frozen_vision";
inline constexpr char kFrozenMerger[] = "train/frozen_merger";
inline constexpr char kFrozenText[] = "train/frozen_text";
inline constexpr char kLoraRank[] = "train/lora_rank";

// The emitting rank's health counters (throughput_health), in every record (health/...)
inline constexpr char kHealthBadMicrobatches[] = "health/bad_microbatches";
inline constexpr char kHealthFailedCollectives[] = "health/failed_collectives";
inline constexpr char kHealthSkippedIntervals[] = "health/skipped_intervals";
inline constexpr char kHealthOutOfStepIntervals[] = "health/out_of_step_intervals";
inline constexpr char kHealthDroppedRecords[] = "health/dropped_records";
inline constexpr char kHealthReentrantCalls[] = "health/reentrant_calls";
inline constexpr char kHealthConfigMismatchIntervals[] = "health/config_mismatch_intervals";

// Bases of the per-rank top-k rows (perf_topk/<base>_...)
inline constexpr char kTopkTps[] = "tps";
inline constexpr char kTopkStepTime[] = "step_time";
inline constexpr char kTopkTflops[] = "tflops";
inline constexpr char kTopkMfu[] = "mfu";
inline constexpr char kTopkMemGib[] = "mem_gib";
inline constexpr char kTopkForwardBackwardTime[] = "fwd_bwd_time";
inline constexpr char kTopkDataTime[] = "data_time";
inline constexpr char kTopkLogWaitMs[] = "log_wait_ms";

enum class topk_side { slow, fast };

// "perf_topk/<base>_slow_<i>" (or _fast_), with "_rank" appended when `rank` is true.
inline std::string topk_name(const char* base, topk_side side, std::size_t i, bool rank = false) {
  std::string name = "perf_topk/";
  name += base;
  name += side == topk_side::slow ? "_slow_" : "_fast_";
  name += std::to_string(i);
  if (rank) name += "_rank";
  return name;
}

}  // namespace flopmeter::metric
