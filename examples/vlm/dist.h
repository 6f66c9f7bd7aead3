// examples/vlm/dist.h — the trainer's data parallelism: a c10d ProcessGroupGloo over a TCPStore, from the
// torchrun-style environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; rank 0 serves the store at
// MASTER_PORT). With none of these variables set the trainer is a single process and needs no group.
//
// Ownership: a process_group owns its store and Gloo group. Errors: std::runtime_error naming the variable or
// the peer that failed. Thread-safety: one thread issues the collectives, in the same order on every rank.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <memory>
#include <string>

namespace c10d {
class ProcessGroup;
class Store;
}  // namespace c10d

namespace vlm {

struct dist_env {
  bool distributed = false;  // WORLD_SIZE is set
  int rank = 0;
  int world_size = 1;
  std::string master_addr;
  int master_port = 0;
  int local_rank = 0;        // LOCAL_RANK if set, else RANK: which GPU this rank uses with --device cuda
};

// Reads the environment. Throws std::runtime_error when WORLD_SIZE is set but another variable is missing or
// malformed; all unset means one process (distributed = false).
dist_env read_dist_env();

class process_group {
 public:
  // Connects to (rank 0: serves) the TCPStore at MASTER_ADDR:MASTER_PORT and builds the Gloo group.
  static std::unique_ptr<process_group> create(const dist_env& env, std::chrono::milliseconds timeout);
  ~process_group();

  void allreduce_sum(at::Tensor& tensor);              // in place, blocking (CPU tensors)
  void broadcast(at::Tensor& tensor, int root);        // in place, blocking (CPU tensors)
  void barrier();

  // The c10d objects, for flopmeter's tensor path (LibTorch 2.x: a ProcessGroup holding the Gloo backend).
  c10::intrusive_ptr<c10d::ProcessGroup> c10d_group() const;
  c10::intrusive_ptr<c10d::Store> store() const;

 private:
  struct state;
  explicit process_group(std::unique_ptr<state> s);
  std::unique_ptr<state> state_;
};

// The group flopmeter's tensor path all-reduces over when the model runs on CUDA (--device cuda): its counters
// then stay on the GPU. An NCCL group over the trainer's TCPStore (keys under "flopmeter_nccl/"), or, for one
// process without a trainer group, over an in-process store; the current CUDA device must be set first.
// Returns null and says why in `why_not` when this build has no NCCL group to offer (a LibTorch without c10d
// NCCL, or no nccl.h at build time: vlm/nccl_group.cpp is then compiled without it).
c10::intrusive_ptr<c10d::ProcessGroup> make_nccl_group(const dist_env& env, const process_group* trainer_group,
                                                       std::chrono::milliseconds timeout, std::string& why_not);

// A one-rank Gloo group over an in-process store (a single process that has no trainer group). Throws
// std::runtime_error when the trainer was built without Gloo's headers.
c10::intrusive_ptr<c10d::ProcessGroup> make_local_gloo_group(std::chrono::milliseconds timeout);

}  // namespace vlm
