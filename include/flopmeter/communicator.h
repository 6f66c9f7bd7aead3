// flopmeter/communicator.h — the collectives flopmeter needs, behind an interface of its own.
//
// flopmeter issues a fixed number of fixed-size collectives per log: an in-place SUM and an in-place MAX
// all-reduce of a few dozen doubles (start_allreduce_sum, start_allreduce_max), whatever the job's size; and,
// every topk_interval_logs logs (every log in jobs of up to 256 ranks), an all-gather of one small row of
// doubles per rank (start_allgather), the per-rank table behind perf_topk/*. An adapter without an all-gather
// runs it as an in-place SUM all-reduce of the world x row buffer (the default start_allgather); one without
// a MAX runs that as an all-gather (the default start_allreduce_max). The c10d API changes between PyTorch
// releases and NCCL is a C library, so core code depends only
// on this interface; adapters live in their own files (c10d.h: a c10d ProcessGroup, Gloo or NCCL;
// nccl.h: a raw ncclComm_t plus a CUDA stream) and `local_communicator` serves a single process.
//
// Ownership: the start_* calls do not take the buffers; the caller keeps them alive and untouched until
// the returned `pending_collective` reports completion or is destroyed (destroying an unfinished one waits
// for the adapter to release the buffer, or abandons it safely if the adapter cannot).
// Thread-safety: a communicator is used by one thread at a time (the thread that calls on_log); adapters
// must not assume it is the thread that created them.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "flopmeter/export.h"

namespace flopmeter FLOPMETER_EXPORT {

// The most ranks a job may have (a per-log buffer is world x row doubles: 272 MiB at this bound). The C ABI's
// FLOPMETER_MAX_WORLD_SIZE is the same number (c_api.cpp checks that they agree).
inline constexpr int max_world_size = 1048576;

// How the collectives of a log (start_allreduce_sum_max, and the table's start_allgather) run over a c10d CPU
// group (Gloo). c10d's Gloo all-reduce and all-gather are rings: 2 (world - 1) and world - 1 message rounds,
// so their latency grows linearly with the job (about 13 s per log at 131,072 ranks at 50 us a round). The
// log-depth collectives run over point-to-point messages on a thread of flopmeter's own: the ordinary log's
// 71 doubles by recursive halving then recursive doubling, and beyond 1,024 ranks a binary tree over the ranks
// that share each element (17 rounds at 1,024 ranks, 52 at 131,072, + 2 when world is not a power of two),
// sending and receiving at most 1,176 B per rank whatever the job's size (a rank that folds a
// non-power-of-two world in sends 568 B more); the table by recursive doubling (log2 world rounds, + 2).
// METRICS.md, "The per-log collectives at scale", has the numbers.
enum class small_allreduce {
  // flopmeter's own Gloo groups (make_gloo_communicator, make_gloo_communicator_from_env): the log-depth
  // collectives from log_depth_min_ranks ranks on, the backend's below. A group the trainer passes
  // (make_c10d_communicator): the backend's (flopmeter sends nothing but collectives over it).
  automatic,
  backend,    // the backend's own all-reduce and all-gather (Gloo: rings)
  log_depth,  // always (CPU groups only: an NCCL group is refused; NCCL's own all-reduce is a tree)
};

// From this many ranks on `automatic` runs an own Gloo group's logs by the log-depth collectives. Below it the
// ring's 2 (world - 1) rounds are no more than theirs (world 2: 2 against 2; world 3: 4 against 4) and Gloo's
// own ring runs without flopmeter's thread hop. Measured: bench/gloo_per_log.py.
inline constexpr int log_depth_min_ranks = 4;

// The outcome of waiting on a collective.
enum class collective_status {
  done,     // the buffer holds the reduced values
  pending,  // not finished within the timeout given; wait again later
  failed,   // the collective failed (peer died, backend error); the buffer is not meaningful
};

class pending_collective {
 public:
  virtual ~pending_collective() = default;
  // Blocks at most `timeout` (0 = poll). On `failed`, `error_message()` says why.
  virtual collective_status wait(std::chrono::milliseconds timeout) = 0;
  virtual std::string error_message() const = 0;
};

class communicator {
 public:
  virtual ~communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Starts an in-place element-wise SUM over all ranks of `values[0..count)`. Every rank calls it at the
  // same point with the same count. May throw flopmeter::error if the collective cannot even be started.
  virtual std::unique_ptr<pending_collective> start_allreduce_sum(double* values, std::size_t count) = 0;
  // Starts an all-gather: once done, recv[r*count, (r+1)*count) holds rank r's send[0, count) on every rank
  // (recv holds world_size()*count values). Every rank calls it at the same point with the same count; the
  // caller keeps both buffers alive and untouched until the collective completes or is destroyed. An
  // adapter whose backend has an all-gather overrides this: it moves each rank's row once, where a ring
  // all-reduce of the whole buffer moves about twice the buffer. This default zeroes recv, puts `send` in
  // this rank's slot and sums recv over the ranks with start_allreduce_sum (every other slot is zero).
  virtual std::unique_ptr<pending_collective> start_allgather(const double* send, std::size_t count, double* recv) {
    const std::size_t world = static_cast<std::size_t>(world_size());
    std::fill(recv, recv + world * count, 0.0);
    std::copy(send, send + count, recv + static_cast<std::size_t>(rank()) * count);
    return start_allreduce_sum(recv, world * count);
  }
  // Starts an in-place element-wise MAX over all ranks of `values[0..count)` (a minimum travels as the
  // maximum of its negation). Every rank calls it at the same point with the same count; the caller keeps
  // `values` alive and untouched until the collective completes or is destroyed. An adapter whose backend has
  // a MAX all-reduce overrides this (c10d, NCCL: log2(world) rounds, count doubles each way per rank). This
  // default gathers every rank's values with start_allgather into a buffer of its own (world x count
  // doubles) and writes their maximum into `values` once the gather is done (in wait()).
  virtual std::unique_ptr<pending_collective> start_allreduce_max(double* values, std::size_t count);
  // Starts both reductions of an ordinary log on one buffer: an in-place SUM of values[0, sum_count) and an
  // in-place MAX of values[sum_count, sum_count + max_count); done when both are. The default starts
  // start_allreduce_sum and then start_allreduce_max; an adapter that runs one collective at a time (NCCL)
  // overrides it to issue both as one group.
  virtual std::unique_ptr<pending_collective> start_allreduce_sum_max(double* values, std::size_t sum_count,
                                                                      std::size_t max_count);
  // A short name for logs ("local", "c10d:gloo", "nccl").
  virtual std::string backend_name() const = 0;
};

// A single-process "group" of one rank: the sum is the identity and completes at once.
std::shared_ptr<communicator> make_local_communicator();

}  // namespace FLOPMETER_EXPORT
