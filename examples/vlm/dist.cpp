// The trainer's own Gloo group (see dist.h). flopmeter builds a separate group on MASTER_PORT + offset; the
// two never share a store key or a collective.
#include "dist.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
// ProcessGroupGloo.hpp needs Gloo's own headers (Debian: libgloo-dev) and USE_C10D_GLOO, which LibTorch's CMake
// config does not export. Without the headers the trainer still builds and runs as a single process.
#if __has_include(<gloo/algorithm.h>)
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#define VLM_HAVE_GLOO 1
#else
#define VLM_HAVE_GLOO 0
#endif

#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <vector>

// LibTorch 1.13 vs 2.x (ProcessGroupGloo is a Backend that must be wrapped in a ProcessGroup in 2.x): the same
// header-only helper flopmeter's own sources use.
#include "../../plugin/comm/c10d_compat.h"

namespace vlm {
namespace {

int env_int(const char* name, int lo, int hi) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') {
    throw std::runtime_error(std::string("WORLD_SIZE is set but ") + name + " is not (set RANK, WORLD_SIZE, "
                             "MASTER_ADDR and MASTER_PORT together, e.g. with examples/launch.sh)");
  }
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value < lo || value > hi) {
    throw std::runtime_error(std::string(name) + "='" + text + "' is not an integer in [" + std::to_string(lo) +
                             ", " + std::to_string(hi) + "]");
  }
  return static_cast<int>(value);
}

}  // namespace

dist_env read_dist_env() {
  dist_env env;
  const char* world = std::getenv("WORLD_SIZE");
  if (world == nullptr || *world == '\0') return env;
  env.distributed = true;
  env.world_size = env_int("WORLD_SIZE", 1, 1 << 20);
  env.rank = env_int("RANK", 0, env.world_size - 1);
  const char* addr = std::getenv("MASTER_ADDR");
  if (addr == nullptr || *addr == '\0') throw std::runtime_error("WORLD_SIZE is set but MASTER_ADDR is not");
  env.master_addr = addr;
  env.master_port = env_int("MASTER_PORT", 1, 65535);
  const char* local = std::getenv("LOCAL_RANK");
  env.local_rank = (local != nullptr && *local != '\0') ? env_int("LOCAL_RANK", 0, 1 << 20) : env.rank;
  return env;
}

struct process_group::state {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroup> group;
};

process_group::process_group(std::unique_ptr<state> s) : state_(std::move(s)) {}
process_group::~process_group() = default;

std::unique_ptr<process_group> process_group::create(const dist_env& env, std::chrono::milliseconds timeout) {
#if !VLM_HAVE_GLOO
  (void)timeout;
  throw std::runtime_error("rank " + std::to_string(env.rank) + ": this trainer was built without Gloo's headers "
                           "(Debian: libgloo-dev); run it as one process (no WORLD_SIZE)");
#else
  auto s = std::make_unique<state>();
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  try {
    c10d::TCPStoreOptions options;
    options.port = static_cast<std::uint16_t>(env.master_port);
    options.isServer = env.rank == 0;
    options.numWorkers = static_cast<std::size_t>(env.world_size);
    options.waitWorkers = true;
    options.timeout = timeout;
    s->store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
  } catch (const std::exception& e) {
    throw std::runtime_error("rank " + std::to_string(env.rank) +
                             (env.rank == 0 ? " could not serve the TCPStore at " : " could not reach the TCPStore at ") +
                             where + ": " + e.what());
  }
  try {
    auto gloo = c10d::ProcessGroupGloo::Options::create(timeout);
    if (const char* ifnames = std::getenv("GLOO_SOCKET_IFNAME"); ifnames != nullptr && *ifnames) {
      std::stringstream list(ifnames);
      std::string name;
      while (std::getline(list, name, ',')) {
        if (!name.empty()) gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
      }
    }
    if (gloo->devices.empty()) gloo->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    gloo->threads = 2;
    auto backend = c10::make_intrusive<c10d::ProcessGroupGloo>(s->store, env.rank, env.world_size, gloo);
    s->group = flopmeter::c10d_compat::as_process_group(s->store, env.rank, env.world_size, std::move(backend),
                                                        flopmeter::c10d_compat::kGloo, c10::DeviceType::CPU,
                                                        timeout);
  } catch (const std::exception& e) {
    throw std::runtime_error("rank " + std::to_string(env.rank) + " could not build the Gloo group (store " + where +
                             "): " + e.what());
  }
  return std::unique_ptr<process_group>(new process_group(std::move(s)));
#endif
}

void process_group::allreduce_sum(at::Tensor& tensor) {
  std::vector<at::Tensor> tensors{tensor};
  c10d::AllreduceOptions options;
  options.reduceOp = c10d::ReduceOp::SUM;
  state_->group->allreduce(tensors, options)->wait();
}

void process_group::broadcast(at::Tensor& tensor, int root) {
  std::vector<at::Tensor> tensors{tensor};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  state_->group->broadcast(tensors, options)->wait();
}

void process_group::barrier() { state_->group->barrier()->wait(); }

c10::intrusive_ptr<c10d::ProcessGroup> process_group::c10d_group() const { return state_->group; }
c10::intrusive_ptr<c10d::Store> process_group::store() const { return state_->store; }

c10::intrusive_ptr<c10d::ProcessGroup> make_local_gloo_group(std::chrono::milliseconds timeout) {
#if !VLM_HAVE_GLOO
  (void)timeout;
  throw std::runtime_error("this trainer was built without Gloo's headers (Debian: libgloo-dev): no local group");
#else
  c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::HashStore>();
  auto gloo = c10d::ProcessGroupGloo::Options::create(timeout);
  gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  gloo->threads = 1;
  auto backend = c10::make_intrusive<c10d::ProcessGroupGloo>(store, 0, 1, gloo);
  return flopmeter::c10d_compat::as_process_group(store, 0, 1, std::move(backend), flopmeter::c10d_compat::kGloo,
                                                  c10::DeviceType::CPU, timeout);
#endif
}

}  // namespace vlm
