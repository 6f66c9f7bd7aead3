// examples/vlm/checkpoint.h — activation checkpointing for the example VLM (the trainer's --recompute).
//
// LibTorch has no torch.utils.checkpoint, so this is its reentrant form, written out: the block's forward runs
// under no-grad (no activation is kept), the checkpoint's autograd node keeps only the block's inputs, and in
// the backward it runs the block's forward again with grad, then back-propagates through that second forward
// into the inputs and the block's parameters. The block's parameters are inputs of the node, so its backward
// runs whenever anything in the block trains (torch's reentrant checkpoint needs an input that requires a
// gradient for that; PEFT users call enable_input_require_grads()).
//
// The forward run again is inside a RecordFunction user scope named kRecomputeScope, so a profiler observer
// (tests/test_example_flops.cpp) can tell recomputed forward work from the first forward and the backward.
//
// Thread-safety: like the model, one forward/backward at a time.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "flopmeter/flop_model.h"

namespace vlm {

inline constexpr const char* kRecomputeScope = "flopmeter_recompute";

// run(activations) under a checkpoint: `activations` are the tensors the block reads from upstream (its
// hidden states, or the q, k and v of an attention core), `params` the parameters it uses. Without grad mode,
// or when nothing among them requires a gradient (no backward will run through the block), it is run(...)
// itself.
// `policy`: what the recompute pass runs again (full: everything; full_early_stop: all but the block's final GEMM;
// op: every second matmul, see product_linear). The products it does not run again return the output their
// first pass kept, joined to the autograd graph with their own backward (a saved product).
torch::Tensor checkpoint(std::function<torch::Tensor(const std::vector<torch::Tensor>&)> run,
                         const std::vector<torch::Tensor>& activations, const std::vector<torch::Tensor>& params,
                         flopmeter::recompute_policy policy = flopmeter::recompute_policy::full);

// ---- the products of a block (what the per-op policies choose among) -------------------------------------
// Every GEMM of a block goes through product_linear (F::linear(x, weight, bias)) or product_matmul (a @ b,
// LoRA's adapters), numbered in forward order from 1 per block pass (the op policy's numbering); the matmuls
// of an attention core go through core_matmul (not numbered: the attention kernel is saved). Outside a
// checkpointed block they are plain F::linear / torch::matmul. `last`: the block's final GEMM (only the
// residual add reads it: torch's early stop does not run it again).
torch::Tensor product_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                             bool last = false);
torch::Tensor product_matmul(const torch::Tensor& a, const torch::Tensor& b, bool last = false);
torch::Tensor core_matmul(const torch::Tensor& a, const torch::Tensor& b);
// The op numbering of the block pass running (0 outside one), and setting it back: the MoE experts are one
// grouped matmul each (gate, up, down) whatever the number of experts that run.
std::int64_t product_position();
void set_product_position(std::int64_t position);

// The innermost category scope open on this thread ("flopmeter_cat:..."): a saved product's backward runs in
// it. category_guard pushes one for its lifetime (VLM_FLOP_SCOPE does).
class category_guard {
 public:
  explicit category_guard(std::string category);
  ~category_guard();
  category_guard(const category_guard&) = delete;
  category_guard& operator=(const category_guard&) = delete;
};

}  // namespace vlm
