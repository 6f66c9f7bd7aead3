// Activation checkpointing for the example VLM; see checkpoint.h.
#include "checkpoint.h"

#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>
#include <torch/autograd.h>
#include <torch/custom_class.h>

#include <cstddef>
#include <cstdint>
#include <utility>

namespace vlm {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The block's forward, kept by the checkpoint's autograd node until its backward (a capsule in saved_data).
struct block_forward : torch::CustomClassHolder {
  explicit block_forward(std::function<torch::Tensor(const std::vector<torch::Tensor>&)> f) : run(std::move(f)) {}
  std::function<torch::Tensor(const std::vector<torch::Tensor>&)> run;
};

struct checkpoint_function : torch::autograd::Function<checkpoint_function> {
  // inputs: the activations, then the parameters.
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs, std::int64_t activations,
                               c10::intrusive_ptr<block_forward> block) {
    ctx->save_for_backward(inputs.vec());
    ctx->saved_data["activations"] = activations;
    ctx->saved_data["block"] = c10::IValue::make_capsule(block);
    // Autograd is off here: the block keeps no activation.
    return {block->run(std::vector<torch::Tensor>(inputs.begin(), inputs.begin() + activations))};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list inputs = ctx->get_saved_variables();
    const auto activations = static_cast<std::size_t>(ctx->saved_data["activations"].toInt());
    const auto block = c10::static_intrusive_pointer_cast<block_forward>(ctx->saved_data["block"].toCapsule());
    // Fresh leaves for the activations, so the second forward builds its own graph from them.
    std::vector<torch::Tensor> fresh;
    for (std::size_t i = 0; i < activations; ++i) {
      fresh.push_back(inputs[i].detach().requires_grad_(inputs[i].requires_grad()));
    }
    torch::Tensor output;
    {
      torch::AutoGradMode enable(true);
      RECORD_USER_SCOPE(kRecomputeScope);
      output = block->run(fresh);
    }
    variable_list grads(inputs.size() + 2);  // + the two non-tensor arguments of forward
    std::vector<torch::Tensor> wanted;
    std::vector<std::size_t> where;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const torch::Tensor& x = i < activations ? fresh[i] : inputs[i];
      if (x.requires_grad()) {
        wanted.push_back(x);
        where.push_back(i);
      }
    }
    if (wanted.empty() || !output.requires_grad()) return grads;
    const variable_list got = torch::autograd::grad({output}, wanted, {grad_outputs[0]}, /*retain_graph=*/false,
                                                    /*create_graph=*/false, /*allow_unused=*/true);
    for (std::size_t j = 0; j < got.size(); ++j) grads[where[j]] = got[j];
    return grads;
  }
};

}  // namespace

torch::Tensor checkpoint(std::function<torch::Tensor(const std::vector<torch::Tensor>&)> run,
                         const std::vector<torch::Tensor>& activations, const std::vector<torch::Tensor>& params) {
  bool any = false;
  for (const auto* list : {&activations, &params}) {
    for (const torch::Tensor& t : *list) any = any || (t.defined() && t.requires_grad());
  }
  if (!torch::GradMode::is_enabled() || !any) return run(activations);
  std::vector<torch::Tensor> inputs = activations;
  for (const torch::Tensor& p : params) {
    if (p.defined()) inputs.push_back(p);
  }
  return checkpoint_function::apply(at::TensorList(inputs), static_cast<std::int64_t>(activations.size()),
                                    c10::make_intrusive<block_forward>(std::move(run)))[0];
}

}  // namespace vlm
