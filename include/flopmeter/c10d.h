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
// Dead peers: see flopmeter/gloo_env.h (ignore SIGPIPE in a C++ trainer).
//
// WHICH GROUP: flopmeter needs one group over EVERY rank of the job (the world), not the data-parallel group.
// It derives the data-parallel, tensor-, context- and pipeline-parallel groups itself from the plugin
// config's [parallel] sizes and the rank order; each rank's row says what that rank ran. Handed the
// data-parallel group with tp = 2, it would see half the job and count half the tokens, and two ranks would
// write the same "{rank}" file. Whenever the job's size is known (WORLD_SIZE in the environment, or
// c10d_options::job_world_size), a group of another size is refused with a message saying what to pass.
//
// THE RECOMMENDED PATH: a group of flopmeter's own, built from what the trainer already has: its c10d Store
// and its rank (make_gloo_communicator below), or the launch environment (make_gloo_communicator_from_env,
// flopmeter/gloo_env.h). Sharing the trainer's own group works while every rank fires every on_log, but one
// rank that skips an on_log pairs flopmeter's all-reduce with the trainer's next collective on the others,
// and Gloo aborts the whole job; on its own group the same mistake costs flopmeter an interval, never the
// run. Use make_c10d_communicator with an existing world group only when the trainer cannot spare a store
// (an NCCL world group for the tensor path on GPU is the usual case).
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <memory>
#include <string>

#include "flopmeter/communicator.h"
#include "flopmeter/export.h"
#include "flopmeter/gloo_env.h"  // make_gloo_communicator_from_env, declared there without LibTorch types

namespace c10d {
class ProcessGroup;
class Store;
}  // namespace c10d

namespace flopmeter FLOPMETER_EXPORT {

// Checks on a group handed to flopmeter.
struct c10d_options {
  // The number of ranks in the whole job, when the trainer knows it. 0 (default): WORLD_SIZE from the
  // environment when set, otherwise not checked. A group whose size differs is refused (see WHICH GROUP).
  int job_world_size = 0;
  // How the ordinary log's fixed-size SUM and MAX run (flopmeter/communicator.h). automatic (default) on a
  // group handed in here: the backend's own all-reduce. log_depth (CPU groups only): about 2 log2(world)
  // rounds of point-to-point messages over this group (and log2(world) for the table's all-gather), tag
  // 0x464c4f50, on a thread of flopmeter's, which pair with nothing of the trainer's unless it uses that tag
  // on this group too.
  small_allreduce allreduce = small_allreduce::automatic;
};

// Wraps an existing c10d group over every rank of the job (see WHICH GROUP above).
// - Gloo (and any other CPU backend): the all-reduce runs on an owned CPU tensor of kDouble.
// - NCCL (getBackendName() == "nccl"): the values are copied into a pinned tensor, then to the current CUDA
//   device (non_blocking, on the current stream); after the all-reduce the current stream waits for NCCL
//   (Work::wait, which only orders streams unless NCCL_BLOCKING_WAIT=1), copies back into a pinned tensor
//   (non_blocking) and records an event. `wait` polls that event; no device or stream synchronisation.
// backend_name() is "c10d:" + the group's backend name, e.g. "c10d:gloo".
// Throws flopmeter::error if `group` is null, if its size is not the job's (c10d_options::job_world_size,
// else WORLD_SIZE when set), or for c10d_options::allreduce = log_depth on an NCCL group. With the log-depth
// collectives backend_name() ends in "+log_depth".
std::shared_ptr<communicator> make_c10d_communicator(c10::intrusive_ptr<c10d::ProcessGroup> group,
                                                     const c10d_options& options = {});

// Options of make_gloo_communicator.
struct gloo_group_options {
  // Bound on the whole call on every rank (the Gloo rendezvous over the store), and Gloo's timeout for each
  // later collective. Must be > 0. Default 60 s.
  std::chrono::milliseconds timeout = std::chrono::seconds(60);
  // flopmeter's keys in the trainer's store go under "<store_key_prefix>/group/<n>/", where n counts the calls
  // to make_gloo_communicator with this rank in this process: they never meet the trainer's keys. Default
  // "flopmeter".
  std::string store_key_prefix = "flopmeter";
  // Address Gloo binds to; empty (default): GLOO_SOCKET_IFNAME's interfaces if set, else this host's name.
  std::string gloo_hostname;
  // How the ordinary log's fixed-size SUM and MAX run (flopmeter/communicator.h). automatic (default):
  // the log-depth collectives from log_depth_min_ranks ranks on, Gloo's ring below.
  small_allreduce allreduce = small_allreduce::automatic;
};

// THE RECOMMENDED C++ PATH: flopmeter's own Gloo group over every rank of the job, rendezvousing through the
// trainer's c10d Store (its TCPStore, or any Store every rank shares). `rank` and `world_size` are the
// trainer's global rank and the job's size (its world group's getRank()/getSize(), or RANK/WORLD_SIZE).
// Every rank must call it, in the same order relative to its other calls of this function. Returns or throws
// within options.timeout on every rank, even when a peer dies during the rendezvous (flopmeter/gloo_env.h,
// "Bounded"). Throws flopmeter::error for a null store, rank outside [0, world_size), a world_size that
// differs from WORLD_SIZE when that is set, a failed or timed-out rendezvous, or a build without Gloo headers.
std::shared_ptr<communicator> make_gloo_communicator(c10::intrusive_ptr<c10d::Store> store, int rank,
                                                     int world_size, const gloo_group_options& options = {});

}  // namespace FLOPMETER_EXPORT
