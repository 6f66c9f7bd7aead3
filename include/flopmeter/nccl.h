// flopmeter/nccl.h — a `communicator` over a raw NCCL communicator and a CUDA stream, for trainers that
// drive NCCL themselves. Only available when flopmeter was built with CUDA and NCCL (FLOPMETER_HAVE_NCCL).
// This header declares NCCL's and CUDA's handle types itself, so it needs neither nccl.h nor CUDA headers.
//
// What it does per collective, all enqueued on `stream` (no device or stream synchronisation, ever):
//   caller's doubles -> pinned host staging (memcpy) -> device buffer (cudaMemcpyAsync H2D)
//   -> ncclAllReduce(ncclFloat64, ncclSum, in place) -> pinned staging (cudaMemcpyAsync D2H) -> event.
// `wait(timeout)` polls that event (cudaEventQuery) and ncclCommGetAsyncError until done, failed or timeout,
// sleeping briefly between polls; on `done` it copies the staging buffer into the caller's buffer, which is
// written at no other time. CUDA/NCCL errors while waiting give `failed` with the error string (NCCL async
// errors are sticky: the trainer has to abort its communicator; flopmeter never aborts it). Errors while
// enqueueing throw flopmeter::error from start_allreduce_sum.
//
// Ownership: `comm` and `stream` stay the trainer's; both must outlive the communicator and every pending
// it returned. The device buffer (cudaMalloc) and the pinned staging buffer (cudaMallocHost) are allocated
// at the first collective on the communicator's device (ncclCommCuDevice) and grown, never shrunk, when a
// larger count arrives (growth frees the old buffers, which CUDA may implement with a device-wide wait; the
// count is normally constant, so that happens at most once). They are freed when the last of the
// communicator and its pendings goes away, unless a collective is still in flight then: then they are
// deliberately leaked (a few bytes) rather than freed under a running kernel.
// Only one collective may be in flight per communicator: start_allreduce_sum throws flopmeter::error while
// the previous one has not completed on the device (flopmeter's plugin waits for done/failed before it
// starts the next one, so this never fires there).
// Thread-safety: one thread at a time, like every communicator; the CUDA device current on the calling
// thread is restored before each call returns.
#pragma once

#include <memory>

#include "flopmeter/communicator.h"
#include "flopmeter/export.h"

typedef struct ncclComm* ncclComm_t;     // as in nccl.h
typedef struct CUstream_st* cudaStream_t;  // as in CUDA's driver_types.h

namespace flopmeter FLOPMETER_EXPORT {

// `rank` and `world_size` are what rank()/world_size() report (NCCL's own view: ncclCommUserRank/Count);
// throws flopmeter::error if comm is null, if they disagree with ncclCommUserRank/Count, or if the
// completion event cannot be created. A null `stream` means CUDA's legacy default stream. backend_name() is
// "nccl". With a non-blocking NCCL communicator, start_allreduce_sum waits (polling
// ncclCommGetAsyncError) until NCCL has enqueued the kernel, never for the collective itself.
std::shared_ptr<communicator> make_nccl_communicator(ncclComm_t comm, cudaStream_t stream, int rank,
                                                     int world_size);

}  // namespace FLOPMETER_EXPORT
