// make_nccl_group (dist.h): the NCCL group for flopmeter's tensor path under --device cuda.
//
// ProcessGroupNCCL.hpp needs CUDA's and NCCL's headers and a LibTorch built with c10d NCCL. The build
// (examples/CMakeLists.txt) defines VLM_HAVE_NCCL=1 only when the LibTorch's torch_cuda target exports
// USE_C10D_NCCL and an nccl.h was found (a PyPI torch's own nvidia/nccl/include first); everywhere else —
// Debian's CPU LibTorch 1.13 among them — this file compiles to a function that says why there is none, and
// the trainer falls back to a Gloo group (counters on the CPU).
#include "dist.h"

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#ifndef VLM_HAVE_NCCL
#define VLM_HAVE_NCCL 0
#endif

#if VLM_HAVE_NCCL
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "../../plugin/comm/c10d_compat.h"
#endif

#include <stdexcept>
#include <string>

namespace vlm {

c10::intrusive_ptr<c10d::ProcessGroup> make_nccl_group(const dist_env& env, const process_group* trainer_group,
                                                       std::chrono::milliseconds timeout, std::string& why_not) {
#if !VLM_HAVE_NCCL
  (void)env;
  (void)trainer_group;
  (void)timeout;
  why_not = "this trainer was built without c10d NCCL (its LibTorch has no USE_C10D_NCCL, or nccl.h was not found)";
  return {};
#else
  why_not.clear();
  c10::intrusive_ptr<c10d::Store> store;
  if (trainer_group != nullptr) {
    // The trainer's TCPStore, under a prefix of our own: no key of the trainer's Gloo group is touched.
    store = c10::make_intrusive<c10d::PrefixStore>("flopmeter_nccl", trainer_group->store());
  } else if (env.world_size == 1) {
    store = c10::make_intrusive<c10d::HashStore>();
  } else {
    throw std::runtime_error("make_nccl_group: " + std::to_string(env.world_size) + " ranks but no trainer group");
  }
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, env.rank, env.world_size, options);
#if FLOPMETER_C10D_BACKEND_SPLIT
  return flopmeter::c10d_compat::as_process_group(store, env.rank, env.world_size, std::move(nccl),
                                                  c10d::ProcessGroup::BackendType::NCCL, c10::DeviceType::CUDA,
                                                  timeout);
#else
  return flopmeter::c10d_compat::as_process_group(store, env.rank, env.world_size, std::move(nccl), 0,
                                                  c10::DeviceType::CUDA, timeout);
#endif
#endif
}

}  // namespace vlm
