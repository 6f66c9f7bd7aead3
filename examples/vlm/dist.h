// examples/vlm/dist.h — the trainer's data parallelism: a c10d ProcessGroupGloo over a TCPStore, from the
// torchrun-style environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; rank 0 serves the store at
// MASTER_PORT). With none of these variables set the trainer is a single process and needs no group.
//
// Ownership: a process_group owns its store and Gloo group. Errors: std::runtime_error naming the variable or
// the peer that failed. Thread-safety: one thread issues the collectives, in the same order on every rank.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <memory>
#include <string>

namespace vlm {

struct dist_env {
  bool distributed = false;  // WORLD_SIZE is set
  int rank = 0;
  int world_size = 1;
  std::string master_addr;
  int master_port = 0;
};

// Reads the environment. Throws std::runtime_error when WORLD_SIZE is set but another variable is missing or
// malformed; all unset means one process (distributed = false).
dist_env read_dist_env();

class process_group {
 public:
  // Connects to (rank 0: serves) the TCPStore at MASTER_ADDR:MASTER_PORT and builds the Gloo group.
  static std::unique_ptr<process_group> create(const dist_env& env, std::chrono::milliseconds timeout);
  ~process_group();

  void allreduce_sum(at::Tensor& tensor);              // in place, blocking
  void broadcast(at::Tensor& tensor, int root);        // in place, blocking
  void barrier();

 private:
  struct state;
  explicit process_group(std::unique_ptr<state> s);
  std::unique_ptr<state> state_;
};

}  // namespace vlm
