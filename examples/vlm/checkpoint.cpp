// Activation checkpointing for the example VLM; see checkpoint.h.
#include "checkpoint.h"

#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>
#include <torch/autograd.h>
#include <torch/custom_class.h>

#include <torch/nn/functional.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace vlm {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using flopmeter::recompute_policy;

thread_local std::vector<std::string> categories;  // category_guard's stack

// One pass of a checkpointed block's forward: the first (no-grad: keeps the outputs of the products the policy
// saves) or the recompute pass (returns them instead of running those products again).
struct block_pass {
  recompute_policy policy;
  bool again;
  std::vector<torch::Tensor>* saved;
  std::size_t cursor = 0;
  std::int64_t position = 0;
};
thread_local block_pass* current = nullptr;

struct pass_scope {
  explicit pass_scope(block_pass* pass) : outer(current) { current = pass; }
  ~pass_scope() { current = outer; }
  pass_scope(const pass_scope&) = delete;
  pass_scope& operator=(const pass_scope&) = delete;
  block_pass* outer;
};

// The block's forward and the outputs its first pass kept, held by the checkpoint's autograd node until its
// backward (a capsule in saved_data).
struct block_forward : torch::CustomClassHolder {
  block_forward(std::function<torch::Tensor(const std::vector<torch::Tensor>&)> f, recompute_policy p)
      : run(std::move(f)), policy(p) {}
  std::function<torch::Tensor(const std::vector<torch::Tensor>&)> run;
  recompute_policy policy;
  std::vector<torch::Tensor> saved;
};

// A saved product: its output is the one the first pass kept; its backward computes the gradients its inputs
// need, as autograd's own MmBackward / BmmBackward would (the same GEMMs), in the category it ran in.
struct saved_product : torch::autograd::Function<saved_product> {
  // linear: y = a weight^T (+ bias), b = weight; otherwise y = a @ b. bias may be undefined.
  // `output` (an IValue: not an input of the node) is the kept output.
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& a, const torch::Tensor& b,
                               const c10::optional<torch::Tensor>& bias, const c10::IValue& output, bool linear) {
    ctx->save_for_backward({a, b});
    ctx->saved_data["linear"] = linear;
    ctx->saved_data["bias"] = bias.has_value();
    ctx->saved_data["category"] = categories.empty() ? std::string() : categories.back();
    return {output.toTensor()};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list ab = ctx->get_saved_variables();
    const torch::Tensor &a = ab[0], &b = ab[1], &g = grad_outputs[0];
    const bool linear = ctx->saved_data["linear"].toBool();
    const std::string category = ctx->saved_data["category"].toStringRef();
    RECORD_USER_SCOPE(category);
    variable_list grads(5);
    if (linear) {  // a [T, in], b = weight [out, in], g [T, out]
      if (ctx->needs_input_grad(0)) grads[0] = torch::matmul(g, b);
      if (ctx->needs_input_grad(1)) grads[1] = torch::matmul(g.t(), a);
      if (ctx->saved_data["bias"].toBool() && ctx->needs_input_grad(2)) grads[2] = g.sum(0);
    } else {
      if (ctx->needs_input_grad(0)) grads[0] = torch::matmul(g, b.transpose(-1, -2));
      if (ctx->needs_input_grad(1)) grads[1] = torch::matmul(a.transpose(-1, -2), g);
    }
    return grads;
  }
};

// Whether the product at `position` is saved (not run again) under `policy`; `core`: an attention core matmul.
bool is_saved(recompute_policy policy, std::int64_t position, bool last, bool core) {
  switch (policy) {
    case recompute_policy::full_early_stop: return !core && last;
    case recompute_policy::op: return core || position % 2 == 1 || last;
    default: return false;
  }
}

torch::Tensor product(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& bias, bool last, bool core,
                      bool linear) {
  const auto run = [&] { return linear ? torch::nn::functional::linear(a, b, bias) : torch::matmul(a, b); };
  block_pass* pass = current;
  if (pass == nullptr) return run();
  if (!core) ++pass->position;
  if (!is_saved(pass->policy, pass->position, last, core)) return run();
  if (!pass->again) {
    torch::Tensor y = run();
    pass->saved->push_back(y);
    return y;
  }
  torch::Tensor kept = pass->saved->at(pass->cursor++);
  const c10::optional<torch::Tensor> optional_bias =
      bias.defined() ? c10::optional<torch::Tensor>(bias) : c10::optional<torch::Tensor>();
  return saved_product::apply(a, b, optional_bias, c10::IValue(kept), linear)[0];
}

struct checkpoint_function : torch::autograd::Function<checkpoint_function> {
  // inputs: the activations, then the parameters.
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs, std::int64_t activations,
                               c10::intrusive_ptr<block_forward> block) {
    ctx->save_for_backward(inputs.vec());
    ctx->saved_data["activations"] = activations;
    ctx->saved_data["block"] = c10::IValue::make_capsule(block);
    // Autograd is off here: the block keeps no activation (but the outputs of the products its policy saves).
    block_pass first{block->policy, false, &block->saved};
    const pass_scope scope(&first);
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
      block_pass again{block->policy, true, &block->saved};
      const pass_scope scope(&again);
      output = block->run(fresh);
    }
    block->saved.clear();
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
                         const std::vector<torch::Tensor>& activations, const std::vector<torch::Tensor>& params,
                         recompute_policy policy) {
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
                                    c10::make_intrusive<block_forward>(std::move(run), policy))[0];
}

torch::Tensor product_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                             bool last) {
  return product(x, weight, bias, last, false, true);
}
torch::Tensor product_matmul(const torch::Tensor& a, const torch::Tensor& b, bool last) {
  return product(a, b, torch::Tensor(), last, false, false);
}
torch::Tensor core_matmul(const torch::Tensor& a, const torch::Tensor& b) {
  return product(a, b, torch::Tensor(), false, true, false);
}
std::int64_t product_position() { return current == nullptr ? 0 : current->position; }
void set_product_position(std::int64_t position) {
  if (current != nullptr) current->position = position;
}

category_guard::category_guard(std::string category) { categories.push_back(std::move(category)); }
category_guard::~category_guard() { categories.pop_back(); }

}  // namespace vlm
