// plugin/accounting/log_reduction.h — internal: the per-log collective of a size that does not grow with the job.
//
// A rank's row (row_layout.h) holds its interval. Gathering every rank's row (the "table") lets each rank
// derive everything, the per-rank top-k included, but moves world_size x kRowFields doubles per rank per log:
// 41 MiB at 131,072 ranks. The record's headline figures need far less. Each is a sum over ranks, a maximum
// over ranks, or a count of the ranks that reported a figure, so each rank turns its own row into two short
// vectors (contribute) and the job reduces them with one SUM and one MAX all-reduce of kSumFields and
// kMaxFields doubles (a minimum travels as the maximum of its negation):
//   - SUM: the per-rank rates of derive() (tokens/s, TFLOP/s, the Megatron TFLOP/s, step time), the data-parallel
//     sums (counts, loss, label tokens, running totals) over the DP group of rank 0 (one rank per tp/cp/pp
//     replica: replicas counted once), the number of ranks that reported each figure, the number of ranks and
//     the sum of their ids (a group that is not the job shows here);
//   - MAX: the world maxima (memory, data and forward-backward time, the fastest rank's TFLOP/s, max loss), the
//     protocol's agreement figures (step and sequence number, minimum and maximum; each fingerprint field,
//     minimum and maximum), whether any rank left the warm-up, and the first rank whose row cannot be derived.
// reduced_record() forms the record from the two vectors with derive()'s formulas, in derive()'s order, without
// perf_topk/*: those need the table, gathered every topk_interval logs (throughput.cpp). In one process, summing
// the contributions in rank order gives every headline figure bit for bit as derive() gives it from the rows
// (tests/test_log_reduction.cpp); a real all-reduce sums in its own order (a last-bit difference at most).
//
// What the reduction cannot say on its own, the table says: which ranks' settings differ (the fingerprint's
// minimum and maximum show that some do, and in which setting) and the value of a corrupt row. The plugin then
// gathers the table at the next log (reduction_verdict::table_wanted).
//
// Thread-safety: pure functions and a plain struct.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "accounting/derive.h"
#include "accounting/row_layout.h"

namespace flopmeter::detail {

enum sum_field : std::size_t {
  sum_ranks,            // 1 per rank: the group's size as the ranks see it
  sum_rank_ids,         // the rank's id: 0 + 1 + ... + (world - 1) in a group that is the job
  sum_tps,              // tokens/s of each rank (real tokens / (tp*cp*pp) / its interval)
  sum_tflops,           // TFLOP/s of each rank (its FLOPs / (tp*cp*pp) / 1e12 / its interval)
  sum_megatron_tflops,  // the same by the Megatron constant (ranks with a positive finite figure)
  sum_hardware_tflops,  // the same with the recomputed forward (HFU)
  sum_step_time,        // each rank's interval / its micro-batches
  sum_step_ranks,       // ranks with a micro-batch (a step time)
  sum_mem_ranks,        // ranks that reported peak memory, reserved memory, data time, forward-backward time
  sum_reserved_ranks,
  sum_data_ranks,
  sum_forward_backward_ranks,
  sum_dp_real_tokens,  // the DP sums over rank 0's DP group
  sum_dp_device_tokens,
  sum_dp_loss,
  sum_dp_label_tokens,
  sum_dp_tokens_seen,
  sum_dp_samples_seen,
  sum_dp_label_tokens_seen,
  sum_dp_flops_seen_0,  // the DP sums of the running FLOPs' three limbs (flops_seen.h)
  sum_dp_flops_seen_1,
  sum_dp_flops_seen_2,
  kSumFields
};

// "Not reported" in a MAX field is -infinity, the maximum's identity.
enum max_field : std::size_t {
  max_memory,
  max_reserved_memory,
  max_data_seconds,
  max_data_pct,
  max_forward_backward_seconds,
  max_log_wait_ms,
  max_rank_tflops,           // the fastest rank's TFLOP/s (derive()'s MFU plausibility check)
  max_rank_hardware_tflops,  // the same with the recomputed forward (HFU plausibility)
  max_dp_loss,               // the highest mean loss of a DP rank with label tokens
  max_dp_tokens_seen,        // running totals: below 2^53 and >= 0 on every DP rank (exact in a row)
  max_dp_samples_seen,
  max_dp_label_tokens_seen,
  neg_min_dp_tokens_seen,
  neg_min_dp_samples_seen,
  neg_min_dp_label_tokens_seen,
  max_dp_flops_seen_limb,      // the largest and smallest FLOPs limb of a DP row: each in [0, 2^32) when exact
  neg_min_dp_flops_seen_limb,  // (a marker of flops_seen.h shows in the smallest)
  max_step,
  neg_min_step,
  max_sequence,
  neg_min_sequence,
  max_not_warm_up,  // 1 when a rank has seen a token, sample or micro-batch
  max_bad_row,      // -(4 r + why) of the first rank r whose row cannot be derived (derive()'s checks, in order)
  max_config_first,
  kMaxFields = max_config_first + 2 * (kRowConfigEnd - kRowConfigFirst)  // each field's maximum, then -minimum
};

// Why a row cannot be derived (max_bad_row), in derive()'s order of checks.
enum bad_row_kind : int { bad_interval = 0, bad_count = 1, count_beyond_exact = 2, rate_not_finite = 3 };

// What a rank's contribution depends on besides its row.
struct reduction_setup {
  regime_coefficients flop_coefficients;
  flop_scope scope = flop_scope::complete;
  std::int64_t tp = 1, cp = 1, pp = 1;
  bool in_dp_sums = true;  // this rank is in rank 0's DP group (layout.dp_group(0))
};

// This rank's contribution: `sums` (kSumFields) and `maxima` (kMaxFields) from its row (kRowFields, identity
// written). Every field is written.
void contribute(const reduction_setup& setup, const double* row, std::int64_t rank, double* sums, double* maxima);

// Adds `sums`/`maxima` of one rank into `total_sums`/`total_maxima` (the reduction a group runs; the simulator
// and the tests run it in one process). Start from zeros and -infinity (reduction_identity).
void reduce_into(const double* sums, const double* maxima, double* total_sums, double* total_maxima);
void reduction_identity(double* sums, double* maxima);

// The record from the reduced vectors: derive()'s figures in derive()'s order, without perf_topk/*. `world` is
// the job's size. Skips the interval (derived false, `why`) when a rank's row cannot be derived.
derive_result reduced_record(const derive_setup& setup, const double* sums, const double* maxima, std::int64_t world,
                             const derive_context& context);

// The settings in which the ranks differ, from the fingerprint's minima and maxima: "[parallel] tp 1 to 2,
// model hash ..."; "" when they agree.
std::string describe_reduced_differences(const double* maxima);

// Bytes one rank sends per log with each collective, for the simulator and METRICS.md.
inline constexpr std::size_t kReductionBytes =
    (static_cast<std::size_t>(kSumFields) + static_cast<std::size_t>(kMaxFields)) * sizeof(double);

}  // namespace flopmeter::detail
