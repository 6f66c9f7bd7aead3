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

#include <functional>
#include <vector>

namespace vlm {

inline constexpr const char* kRecomputeScope = "flopmeter_recompute";

// run(activations) under a checkpoint: `activations` are the tensors the block reads from upstream (its
// hidden states, or the q, k and v of an attention core), `params` the parameters it uses. Without grad mode,
// or when nothing among them requires a gradient (no backward will run through the block), it is run(...)
// itself.
torch::Tensor checkpoint(std::function<torch::Tensor(const std::vector<torch::Tensor>&)> run,
                         const std::vector<torch::Tensor>& activations, const std::vector<torch::Tensor>& params);

}  // namespace vlm
