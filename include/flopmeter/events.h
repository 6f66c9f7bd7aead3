// flopmeter/events.h — what a trainer tells flopmeter: one event per micro-batch, one per log step.
//
// Ownership: events are passed by const reference and only read during the call; array views point into the
// trainer's memory, which flopmeter never keeps. Thread-safety: an event is a value; see hooks.h for who
// may fire events from which thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

#include "flopmeter/array_view.h"
#include "flopmeter/export.h"
#include "flopmeter/flop_model.h"

namespace flopmeter FLOPMETER_EXPORT {

// One micro-batch this rank ran. Describe its documents by exactly one of `document_lengths`, `cu_seqlens`
// or `positions` (all three give the same counts; leaving all empty means no documents, e.g. only padding).
// With tensor or context parallelism every rank of the group passes the whole micro-batch, not its shard.
// (The pragmas keep the compiler's own constructors and copies quiet about the deprecated field below; a caller
// that writes or reads it still gets the warning.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
struct microbatch_event {
  array_view<std::int64_t> document_lengths;  // tokens per document
  array_view<std::int64_t> cu_seqlens;        // cumulative lengths, starting at 0
  array_view<std::int64_t> positions;         // per real token; 0 starts a document
  array_view<std::int32_t> positions_int32;   // or the same as int32 (counts as `positions`; give one of them)
  std::int64_t padding_tokens = 0;            // tokens the device ran that belong to no document
  array_view<image_grid> grid_thw;            // one (t, h, w) grid in patches per image or video
  std::int64_t samples = 0;                   // training samples in the micro-batch
  std::optional<double> loss_sum;             // sum of per-token losses over the label tokens
  std::optional<std::int64_t> label_tokens;   // tokens that carry a label (the loss denominator)
  // The name of grid_thw before 0.3, still read (give one of the two): write grid_thw, the name of the item
  // grids in the C++ API, tensor_microbatch and the Python package.
  [[deprecated("write microbatch_event::grid_thw")]] array_view<image_grid> image_grids;
};
#pragma GCC diagnostic pop

// A log step. Every rank fires it at the same steps (the collective depends on it).
struct log_event {
  std::int64_t step = 0;                          // the optimizer step being logged
  std::optional<double> learning_rate;
  std::optional<double> grad_norm;
  // The trainer's own figures: unset is "not reported" (left out of the record when no rank sets it), a
  // set 0 is a measured 0 (emitted as 0). The record holds the maximum over the ranks that set it.
  std::optional<std::chrono::duration<double>> data_time;              // time spent waiting for data
  std::optional<std::chrono::duration<double>> forward_backward_time;  // time in forward + backward
  std::optional<std::int64_t> peak_memory_bytes;  // this rank's peak device memory in the interval
  // The allocator's reserved (cached) peak in the interval, e.g. LibTorch's
  // CUDACachingAllocator reserved_bytes peak: perf/mem_reserved_gib
  std::optional<std::int64_t> peak_reserved_memory_bytes;
};

}  // namespace FLOPMETER_EXPORT
