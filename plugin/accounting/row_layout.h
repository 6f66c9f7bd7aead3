// Internal: the layout of one rank's row: in the per-rank table (world_size rows of kRowFields doubles), and the
// input of an ordinary log's fixed-size reduction (log_reduction.h). The first kRowCountFields entries are the
// interval's batch_counts, so that the tensor path can add counts it accumulated on a device straight into the
// row before the all-reduce; FLOPs are formed from the gathered counts after the collective, identically for the
// host and the tensor path.
//
// Counts travel as doubles: exact up to 2^53 per rank and interval (9e15 tokens or pairs), far beyond any
// interval a rank can run, and beyond the running totals of any run.
#pragma once

#include <cstddef>
#include <cstdint>

#include "count/count_fields.h"
#include "flopmeter/flop_model.h"

namespace flopmeter::detail {

// A time or memory figure the trainer did not report (data, forward-backward time, peak memory): every reported
// value is >= 0, so a negative one in a row means "not reported", distinct from a reported 0.
constexpr double kNotReported = -1.0;

enum row_field : std::size_t {
  // batch_counts: entry i is kCountFields[i] (count/count_fields.h), named here for the code that reads one
  row_real_tokens = count_field_index(&batch_counts::real_tokens),
  row_padding_tokens = count_field_index(&batch_counts::padding_tokens),
  row_documents = count_field_index(&batch_counts::documents),
  row_causal_pairs = count_field_index(&batch_counts::causal_pairs),
  row_items = count_field_index(&batch_counts::items),
  row_patches = count_field_index(&batch_counts::patches),
  row_merged_tokens = count_field_index(&batch_counts::merged_tokens),
  row_vision_pairs_per_frame = count_field_index(&batch_counts::vision_pairs_per_frame),
  row_vision_pairs_whole = count_field_index(&batch_counts::vision_pairs_whole),
  row_window_pairs_0 = count_field_index(&batch_counts::window_pairs_0),
  row_window_pairs_1 = count_field_index(&batch_counts::window_pairs_1),
  row_vision_window_pairs = count_field_index(&batch_counts::vision_window_pairs),
  row_vision_cls_tokens = count_field_index(&batch_counts::vision_cls_tokens),
  row_image_block_pairs = count_field_index(&batch_counts::image_block_pairs),
  row_itemless_device_tokens = count_field_index(&batch_counts::itemless_device_tokens),
  row_itemless_causal_pairs = count_field_index(&batch_counts::itemless_causal_pairs),
  row_itemless_window_pairs_0 = count_field_index(&batch_counts::itemless_window_pairs_0),
  row_itemless_window_pairs_1 = count_field_index(&batch_counts::itemless_window_pairs_1),
  // the rest of the interval
  row_loss_sum = kCountFieldCount,
  row_label_tokens,
  row_microbatches,      // micro-batches run (rejected descriptions included: they ran)
  row_interval_seconds,  // this rank's own interval
  row_peak_memory_bytes,
  row_data_seconds,
  row_forward_backward_seconds,
  row_present,          // the log's sequence number: this rank's on_log calls so far (>= 1 in a filled row)
  row_device_rejected,  // micro-batches the tensor path rejected on the device (added there)
  row_step,             // the log's step (log_event::step): what identifies the log across ranks
  row_log_wait_ms,      // this rank's host wait for the previous log's collective (perf/log_wait_ms)
  // This rank's running totals since it started, every interval included (also those whose collective
  // failed or was skipped): train/tokens_seen and train/num_samples are their DP sums, so a lost interval
  // costs its rates, never the totals.
  row_tokens_seen,
  row_samples_seen,
  // What the Megatron per-token constant at each micro-batch's row length bills for this interval's micro-batches
  // (full-training form; perf/tflops_per_second_megatron). A double, not a count: an estimate, never checked
  // for exactness.
  row_megatron_flops,
  row_label_tokens_seen,           // label tokens, likewise (train/assistant_tokens_seen)
  row_peak_reserved_memory_bytes,  // the allocator's reserved peak; kNotReported when absent
  // This rank's running total of exact model FLOPs, every interval included like row_tokens_seen: an integer
  // of up to 96 bits in three limbs of 32 bits, least significant first (flops_seen.h). Each limb is a whole
  // number below 2^32, so the DP sum of each is exact in any order up to 2^21 ranks; train/flops_seen is
  // recombined from the three sums in 128-bit integers.
  row_flops_seen_0,
  row_flops_seen_1,
  row_flops_seen_2,
  // The configuration fingerprint (config_fingerprint.h): the same in every row of a job whose ranks loaded
  // the same settings. Whole numbers below 2^48, except tpi_multiplier.
  row_config_model_name_0,  // the model's name, 6 bytes per field (its first 18 bytes)
  row_config_model_name_1,
  row_config_model_name_2,
  row_config_model_hash,  // 48 bits of a hash of the model's name and coefficients
  row_config_scope,       // 1 + flop_scope
  row_config_tp,
  row_config_cp,
  row_config_pp,
  row_config_order,           // the rank order: 1 + 2 bits per dimension (tp 0, cp 1, dp 2, pp 3), first lowest
  row_config_tpi_multiplier,  // as configured
  row_config_training,        // what trains: 1 + frozen parts (vision 1, merger 2, text 4) + 8 x LoRA rank
  row_config_lora_targets,    // 1 + the LoRA targets as bits (training_regime's order)
  row_config_recompute,       // 1 + policy + 8 x vision + 16 x recompute_layers + 2^24 x recompute_every
  kRowFields
};

constexpr std::size_t kRowConfigFirst = row_config_model_name_0;
constexpr std::size_t kRowConfigEnd = row_config_recompute + 1;

constexpr std::size_t kRowCountFields = kCountFieldCount;

inline void counts_to_row(const batch_counts& n, double* row) {
  for_each_count_field([&](auto i) { row[i] = static_cast<double>(n.*kCountMember<decltype(i)::value>); });
}

// The counts of a row, from the doubles of the collective buffer or the int64 counters of the tensor path.
// A double must be a whole number in [0, 2^53) (derive() checks before it converts).
template <class T>
batch_counts counts_from_row(const T* row) {
  batch_counts n;
  for_each_count_field([&](auto i) { n.*kCountMember<decltype(i)::value> = static_cast<std::int64_t>(row[i]); });
  return n;
}

}  // namespace flopmeter::detail
