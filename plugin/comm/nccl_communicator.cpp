// The raw NCCL adapter (see include/flopmeter/nccl.h): a SUM all-reduce or an all-gather of a few doubles
// on the trainer's ncclComm_t and stream, completed by polling a CUDA event. Never synchronises the device or a stream.
//
// CUDA records cudaErrorNotReady from cudaEventQuery (and recoverable errors such as a failed cudaMalloc)
// as the thread's "last error"; LibTorch checks cudaGetLastError() after its kernel launches, so every such
// result is cleared here (as PyTorch's own CUDAEvent::query does) before control returns to the trainer.
#include "flopmeter/nccl.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <utility>

#include "flopmeter/error.h"
#include "comm/poll_backoff.h"

namespace flopmeter {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// The text of a CUDA error; clears the thread's last-error slot (a no-op for sticky errors).
std::string cuda_error(cudaError_t status, const char* call) {
  (void)cudaGetLastError();
  return std::string(call) + ": " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")";
}

std::string nccl_error(ncclResult_t status, ncclComm_t comm, const char* call) {
  std::string text = std::string(call) + ": " + ncclGetErrorString(status);
  const char* last = comm != nullptr ? ncclGetLastError(comm) : nullptr;
  if (last != nullptr && *last != '\0') text += std::string(" (") + last + ")";
  return text;
}

// Makes `device` current for a scope and restores the previous device after.
class device_guard {
 public:
  explicit device_guard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      (void)cudaGetLastError();
      previous_ = -1;
    }
    if (previous_ != device) {
      const cudaError_t status = cudaSetDevice(device);
      if (status != cudaSuccess) throw error(cuda_error(status, "cudaSetDevice"));
      changed_ = true;
    }
  }
  ~device_guard() {
    if (changed_ && previous_ >= 0) (void)cudaSetDevice(previous_);
  }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;

 private:
  int previous_ = -1;
  bool changed_ = false;
};

// Everything the communicator and its pendings share; lives until the last of them goes away.
struct nccl_state {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int device = 0;
  cudaEvent_t done = nullptr;        // recorded after the device-to-host copy of each collective
  double* device_buffer = nullptr;   // cudaMalloc, `capacity` doubles
  double* staging = nullptr;         // cudaMallocHost (pinned), `capacity` doubles
  std::size_t capacity = 0;
  unsigned long long generation = 0;  // number of collectives enqueued so far

  nccl_state() = default;
  nccl_state(const nccl_state&) = delete;
  nccl_state& operator=(const nccl_state&) = delete;

  ~nccl_state() {
    try {
      device_guard guard(device);
      const cudaError_t idle = done != nullptr ? cudaEventQuery(done) : cudaSuccess;
      if (idle == cudaSuccess) {
        if (device_buffer != nullptr) (void)cudaFree(device_buffer);
        if (staging != nullptr) (void)cudaFreeHost(staging);
      }
      // else: a collective may still write into the buffers; leak them (see nccl.h).
      if (done != nullptr) (void)cudaEventDestroy(done);  // CUDA releases it once it has completed
      (void)cudaGetLastError();
    } catch (...) {
      // A destructor must not throw; the buffers are leaked.
    }
  }

  // Frees and reallocates both buffers when `count` does not fit. Only called while nothing is in flight.
  void reserve(std::size_t count) {
    if (count <= capacity) return;
    const std::size_t wanted = std::max<std::size_t>({count, 2 * capacity, 64});
    if (device_buffer != nullptr) (void)cudaFree(device_buffer);
    if (staging != nullptr) (void)cudaFreeHost(staging);
    device_buffer = nullptr;
    staging = nullptr;
    capacity = 0;
    void* device_memory = nullptr;
    cudaError_t status = cudaMalloc(&device_memory, wanted * sizeof(double));
    if (status != cudaSuccess) throw error(cuda_error(status, "cudaMalloc"));
    void* host_memory = nullptr;
    status = cudaMallocHost(&host_memory, wanted * sizeof(double));
    if (status != cudaSuccess) {
      (void)cudaFree(device_memory);
      throw error(cuda_error(status, "cudaMallocHost"));
    }
    device_buffer = static_cast<double*>(device_memory);
    staging = static_cast<double*>(host_memory);
    capacity = wanted;
  }
};

class nccl_pending final : public pending_collective {
 public:
  nccl_pending(std::shared_ptr<nccl_state> state, unsigned long long generation, double* out, std::size_t count,
               const char* operation)
      : state_(std::move(state)), generation_(generation), out_(out), count_(count), operation_(operation) {}

  // A collective over zero values: done at once.
  nccl_pending() : status_(collective_status::done) {}

  collective_status wait(milliseconds timeout) override {
    if (status_ != collective_status::pending) return status_;
    try {
      detail::poll_with_backoff(timeout, [this] { poll(); },
                                [this] { return status_ != collective_status::pending; });
    } catch (const std::exception& e) {
      fail(e.what());
    } catch (...) {
      fail("unknown exception while waiting");
    }
    if (status_ != collective_status::pending) state_.reset();
    return status_;
  }

  std::string error_message() const override { return error_; }

 private:
  void poll() {
    if (state_->generation != generation_) {
      // Only reachable when this pending was left unfinished and a later collective reused the buffers.
      fail("a later collective reused the buffers before this one was waited on");
      return;
    }
    const cudaError_t status = cudaEventQuery(state_->done);
    if (status == cudaSuccess) {
      std::memcpy(out_, state_->staging, count_ * sizeof(double));
      status_ = collective_status::done;
      return;
    }
    if (status != cudaErrorNotReady) {
      fail(cuda_error(status, "cudaEventQuery"));
      return;
    }
    (void)cudaGetLastError();  // cudaErrorNotReady is not an error; do not leave it for the trainer
    ncclResult_t async = ncclSuccess;
    const ncclResult_t queried = ncclCommGetAsyncError(state_->comm, &async);
    if (queried != ncclSuccess) {
      fail(nccl_error(queried, state_->comm, "ncclCommGetAsyncError"));
    } else if (async != ncclSuccess && async != ncclInProgress) {
      fail(nccl_error(async, state_->comm, "NCCL asynchronous error"));
    }
  }

  void fail(const std::string& why) {
    error_ = std::string("nccl ") + operation_ + " of " + std::to_string(count_) + " values failed: " + why;
    status_ = collective_status::failed;
  }

  std::shared_ptr<nccl_state> state_;
  unsigned long long generation_ = 0;
  double* out_ = nullptr;
  std::size_t count_ = 0;
  const char* operation_ = "all-reduce";  // for error messages
  collective_status status_ = collective_status::pending;
  std::string error_;
};

class nccl_communicator final : public communicator {
 public:
  nccl_communicator(std::shared_ptr<nccl_state> state, int rank, int world_size)
      : state_(std::move(state)), rank_(rank), world_size_(world_size) {}

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string backend_name() const override { return "nccl"; }

  std::unique_ptr<pending_collective> start_allreduce_sum(double* values, std::size_t count) override {
    // Every rank passes the same count, so an empty collective is skipped on every rank.
    if (count == 0) return std::make_unique<nccl_pending>();
    if (values == nullptr) {
      throw error("start_allreduce_sum got a null buffer for " + std::to_string(count) + " values");
    }
    return enqueue(values, count, 0, values, count, "ncclAllReduce", "all-reduce", [count](nccl_state& s) {
      return ncclAllReduce(s.device_buffer, s.device_buffer, count, ncclFloat64, ncclSum, s.comm, s.stream);
    });
  }

  std::unique_ptr<pending_collective> start_allreduce_max(double* values, std::size_t count) override {
    if (count == 0) return std::make_unique<nccl_pending>();
    if (values == nullptr) {
      throw error("start_allreduce_max got a null buffer for " + std::to_string(count) + " values");
    }
    return enqueue(values, count, 0, values, count, "ncclAllReduce", "all-reduce", [count](nccl_state& s) {
      return ncclAllReduce(s.device_buffer, s.device_buffer, count, ncclFloat64, ncclMax, s.comm, s.stream);
    });
  }

  // An ordinary log's SUM and MAX as one NCCL group on one buffer: one collective in flight, as this
  // communicator allows, and one launch.
  std::unique_ptr<pending_collective> start_allreduce_sum_max(double* values, std::size_t sums,
                                                              std::size_t maxima) override {
    const std::size_t count = sums + maxima;
    if (count == 0) return std::make_unique<nccl_pending>();
    if (values == nullptr) {
      throw error("start_allreduce_sum_max got a null buffer for " + std::to_string(count) + " values");
    }
    return enqueue(
        values, count, 0, values, count, "ncclAllReduce (SUM and MAX)", "all-reduce", [sums, maxima](nccl_state& s) {
          ncclResult_t status = ncclGroupStart();
          if (status != ncclSuccess) return status;
          if (sums > 0) {
            status = ncclAllReduce(s.device_buffer, s.device_buffer, sums, ncclFloat64, ncclSum, s.comm, s.stream);
          }
          if (status == ncclSuccess && maxima > 0) {
            status = ncclAllReduce(s.device_buffer + sums, s.device_buffer + sums, maxima, ncclFloat64, ncclMax, s.comm,
                                   s.stream);
          }
          const ncclResult_t ended = ncclGroupEnd();
          return status != ncclSuccess ? status : ended;
        });
  }

  // ncclAllGather, in place: this rank's row goes to its slot of the device buffer, which then receives
  // every rank's row (each row crosses the network once, where the all-reduce moves about twice the buffer).
  std::unique_ptr<pending_collective> start_allgather(const double* send, std::size_t count, double* recv) override {
    if (count == 0) return std::make_unique<nccl_pending>();
    if (send == nullptr || recv == nullptr) {
      throw error("start_allgather got a null buffer for " + std::to_string(count) + " values");
    }
    const auto world = static_cast<std::size_t>(world_size_);
    if (count > std::numeric_limits<std::size_t>::max() / sizeof(double) / world) {
      throw error("start_allgather count " + std::to_string(count) + " is too large");
    }
    const std::size_t offset = static_cast<std::size_t>(rank_) * count;
    return enqueue(send, count, offset, recv, count * world, "ncclAllGather", "all-gather", [count, offset](nccl_state& s) {
      return ncclAllGather(s.device_buffer + offset, s.device_buffer, count, ncclFloat64, s.comm, s.stream);
    });
  }

 private:
  // Copies in[0, in_count) to the device buffer at `offset`, runs `collective` on the stream, copies the
  // buffer's first out_count values back to the pinned staging buffer and records the done event; the
  // returned pending copies them to `out` once the event has completed. Never blocks on the device.
  template <class Collective>
  std::unique_ptr<pending_collective> enqueue(const double* in, std::size_t in_count, std::size_t offset, double* out,
                                              std::size_t out_count, const char* what, const char* operation,
                                              Collective collective) {
    nccl_state& s = *state_;
    device_guard guard(s.device);
    const cudaError_t previous = cudaEventQuery(s.done);
    if (previous == cudaErrorNotReady) {
      (void)cudaGetLastError();
      throw error(
          "an NCCL collective was started while the previous one is still in flight "
          "(one at a time per communicator)");
    }
    if (previous != cudaSuccess) throw error(cuda_error(previous, "cudaEventQuery"));
    ncclResult_t async = ncclSuccess;
    ncclResult_t status = ncclCommGetAsyncError(s.comm, &async);
    if (status != ncclSuccess) throw error(nccl_error(status, s.comm, "ncclCommGetAsyncError"));
    if (async != ncclSuccess && async != ncclInProgress) {
      throw error("the NCCL communicator has an asynchronous error: " +
                  nccl_error(async, s.comm, "ncclCommGetAsyncError"));
    }
    s.reserve(std::max(out_count, offset + in_count));
    std::memcpy(s.staging + offset, in, in_count * sizeof(double));
    ++s.generation;  // from here on, pendings of earlier collectives no longer own the staging buffer
    cudaError_t cuda_status = cudaMemcpyAsync(s.device_buffer + offset, s.staging + offset, in_count * sizeof(double),
                                              cudaMemcpyHostToDevice, s.stream);
    if (cuda_status != cudaSuccess) throw error(cuda_error(cuda_status, "cudaMemcpyAsync H2D"));
    status = collective(s);
    if (status == ncclInProgress) status = wait_until_enqueued(s);
    if (status != ncclSuccess) {
      record_done_or_ignore(s);  // keeps "in flight" honest: the H2D copy may still read the staging buffer
      throw error(nccl_error(status, s.comm, what));
    }
    cuda_status = cudaMemcpyAsync(s.staging, s.device_buffer, out_count * sizeof(double), cudaMemcpyDeviceToHost,
                                  s.stream);
    if (cuda_status != cudaSuccess) {
      const std::string why = cuda_error(cuda_status, "cudaMemcpyAsync D2H");
      record_done_or_ignore(s);
      throw error(why);
    }
    cuda_status = cudaEventRecord(s.done, s.stream);
    if (cuda_status != cudaSuccess) throw error(cuda_error(cuda_status, "cudaEventRecord"));
    return std::make_unique<nccl_pending>(state_, s.generation, out, out_count, operation);
  }

  // Non-blocking communicators: ncclAllReduce may return ncclInProgress while NCCL enqueues the kernel; the
  // stream must not get more work before it has. Polls the communicator's state (not the collective).
  static ncclResult_t wait_until_enqueued(nccl_state& s) {
    const auto deadline = steady_clock::now() + std::chrono::seconds(60);
    for (;;) {
      ncclResult_t async = ncclSuccess;
      const ncclResult_t queried = ncclCommGetAsyncError(s.comm, &async);
      if (queried != ncclSuccess) return queried;
      if (async != ncclInProgress) return async;
      if (steady_clock::now() >= deadline) return ncclInProgress;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  static void record_done_or_ignore(nccl_state& s) {
    if (cudaEventRecord(s.done, s.stream) != cudaSuccess) (void)cudaGetLastError();
  }

  std::shared_ptr<nccl_state> state_;
  int rank_;
  int world_size_;
};

}  // namespace

std::shared_ptr<communicator> make_nccl_communicator(ncclComm_t comm, cudaStream_t stream, int rank,
                                                     int world_size) {
  if (comm == nullptr) throw error("make_nccl_communicator: the NCCL communicator is null");
  int nccl_rank = -1;
  int nccl_count = -1;
  int device = -1;
  ncclResult_t status = ncclCommUserRank(comm, &nccl_rank);
  if (status == ncclSuccess) status = ncclCommCount(comm, &nccl_count);
  if (status == ncclSuccess) status = ncclCommCuDevice(comm, &device);
  if (status != ncclSuccess) {
    throw error("make_nccl_communicator: " + nccl_error(status, comm, "querying the communicator"));
  }
  if (nccl_rank != rank || nccl_count != world_size) {
    throw error("make_nccl_communicator: rank " + std::to_string(rank) + " of " + std::to_string(world_size) +
                " disagrees with the NCCL communicator (rank " + std::to_string(nccl_rank) + " of " +
                std::to_string(nccl_count) + ")");
  }

  auto state = std::make_shared<nccl_state>();
  state->comm = comm;
  state->stream = stream;
  state->device = device;
  device_guard guard(device);
  const cudaError_t cuda_status = cudaEventCreateWithFlags(&state->done, cudaEventDisableTiming);
  if (cuda_status != cudaSuccess) {
    state->done = nullptr;
    throw error("make_nccl_communicator: " + cuda_error(cuda_status, "cudaEventCreateWithFlags"));
  }
  return std::make_shared<nccl_communicator>(std::move(state), rank, world_size);
}

}  // namespace flopmeter
