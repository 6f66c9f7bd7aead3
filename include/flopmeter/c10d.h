// flopmeter/c10d.h — a `communicator` over a c10d ProcessGroup (Gloo on CPU, NCCL on GPU), for trainers
// that use LibTorch. Only available when flopmeter was built with LibTorch (FLOPMETER_HAVE_TORCH); the
// trainer must use the same LibTorch as flopmeter (1.13 or 2.x, built with the new C++ ABI).
// LibTorch 2.x: pass a c10d::ProcessGroup (what torch.distributed builds), not a bare backend: there
// ProcessGroupGloo and ProcessGroupNCCL are c10d::Backend objects; a C++ trainer that constructs one registers
// it on a ProcessGroup with setBackend(device type, backend type, backend) and setDefaultBackend (as
// plugin/comm/c10d_compat.h does for flopmeter's own groups).
//
// Ownership: the communicator shares ownership of the ProcessGroup (an intrusive_ptr, as c10d does). A
// `pending_collective` it returns owns a copy of the values (and the c10d Work), so the caller's buffer is
// read once in `start_allreduce_sum` and written once, when `wait` first returns `done`; destroying an
// unfinished pending never blocks and never writes to the caller's buffer afterwards (c10d keeps its own
// references to the tensors of a running collective).
// Thread-safety: like every communicator, one thread at a time; it need not be the creating thread. The
// group must not be used by other threads concurrently in a way that reorders collectives across ranks
// (c10d's own rule: every rank issues the group's collectives in the same order).
// Dead peers: Gloo sends with writev(), so a write to a peer that closed its connection raises SIGPIPE in
// this process. Python ignores SIGPIPE; a C++ trainer should too (std::signal(SIGPIPE, SIG_IGN)) so that a
// dead peer makes the collective `failed` instead of killing the trainer. flopmeter does not change signal
// dispositions itself.
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <memory>
#include <string>

#include "flopmeter/communicator.h"
#include "flopmeter/export.h"

namespace c10d {
class ProcessGroup;
}  // namespace c10d

namespace flopmeter FLOPMETER_EXPORT {

// Wraps an existing c10d group (usually the data-parallel group the trainer already has).
// - Gloo (and any other CPU backend): the all-reduce runs on an owned CPU tensor of kDouble.
// - NCCL (getBackendName() == "nccl"): the values are copied into a pinned tensor, then to the current CUDA
//   device (non_blocking, on the current stream); after the all-reduce the current stream waits for NCCL
//   (Work::wait, which only orders streams unless NCCL_BLOCKING_WAIT=1), copies back into a pinned tensor
//   (non_blocking) and records an event. `wait` polls that event; no device or stream synchronisation.
// backend_name() is "c10d:" + the group's backend name, e.g. "c10d:gloo".
// Throws flopmeter::error if `group` is null.
std::shared_ptr<communicator> make_c10d_communicator(c10::intrusive_ptr<c10d::ProcessGroup> group);

// Where make_gloo_communicator_from_env finds its peers. The defaults suit a trainer whose rank 0 already
// hosts a c10d TCPStore at MASTER_ADDR:MASTER_PORT (torchrun-style launches).
struct gloo_env_options {
  // Timeout for connecting to the store, for the Gloo rendezvous and for each collective. Default 60 s.
  std::chrono::milliseconds timeout = std::chrono::seconds(60);
  // false (default): every rank connects as a client to a TCPStore server that the trainer hosts at
  // MASTER_ADDR:MASTER_PORT + store_port_offset. true: the rank with RANK=0 starts that server itself (use
  // when the trainer hosts none there, or with a non-zero store_port_offset next to the trainer's store).
  bool start_store_server = false;
  // Added to MASTER_PORT; the sum must be a valid port (1..65535). Default 0.
  int store_port_offset = 0;
  // Every key flopmeter writes goes under "<store_key_prefix>/<n>/", where n counts the calls to
  // make_gloo_communicator_from_env in this process (so the n-th call on every rank meets the n-th call on
  // the others, and never the trainer's own keys). Default "flopmeter".
  std::string store_key_prefix = "flopmeter";
  // Address Gloo binds to. Empty (default): the interfaces named by GLOO_SOCKET_IFNAME (comma-separated)
  // if that variable is set, else the address this host's name resolves to (loopback as a fallback).
  std::string gloo_hostname;
};

// Builds a private Gloo group over the trainer's launch environment: RANK, WORLD_SIZE, MASTER_ADDR and
// MASTER_PORT must be set (as torchrun does). Throws flopmeter::error naming the variable when one is missing
// or malformed (RANK not in [0, WORLD_SIZE), a port out of range...), and when the store cannot be reached
// or the rendezvous fails within `options.timeout`. Every rank must call it, in the same order relative to
// its other calls of this function. Throws flopmeter::error if flopmeter was built without Gloo headers.
std::shared_ptr<communicator> make_gloo_communicator_from_env(const gloo_env_options& options);

// Same, with default options except the timeout.
std::shared_ptr<communicator> make_gloo_communicator_from_env(std::chrono::milliseconds timeout);

}  // namespace FLOPMETER_EXPORT
