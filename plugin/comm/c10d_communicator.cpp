// The c10d ProcessGroup adapter (see include/flopmeter/c10d.h); flopmeter's own Gloo groups are built in
// gloo_group.cpp. It builds against LibTorch 1.13 (Debian) and 2.x; what differs is in c10d_compat.h.
//
// wait(): in 1.13 and 2.x alike the base Work::wait(timeout) throws "Operation timed out!" on a timeout
// (leaving the collective running) and treats 0 as "no timeout" (blocks forever). For CPU backends wait() calls
// Work::wait only with a positive timeout and catches the throw; a zero timeout is one isCompleted() poll.
// For NCCL it polls isCompleted() and the copy-back event with short naps (Work::wait would only order
// streams). Either way a timeout leaves the collective running, and the next wait() picks it up.
#include "flopmeter/c10d.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

// ProcessGroupGloo.hpp compiles to nothing unless USE_C10D_GLOO is defined (the `torch` CMake target
// defines it; a LibTorch found otherwise may not) and needs Gloo's own headers (Debian: libgloo-dev).
// Without those headers the adapter still builds and only the Gloo factory throws.
#if __has_include(<gloo/algorithm.h>)
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#define FLOPMETER_C10D_HAVE_GLOO 1
#else
#define FLOPMETER_C10D_HAVE_GLOO 0
#endif

#include "flopmeter/error.h"
#include "comm/c10d_compat.h"
#include "comm/c10d_internal.h"
#include "comm/poll_backoff.h"

namespace flopmeter {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// The message of an exception without c10's multi-line backtrace.
std::string describe(const std::exception_ptr& e) {
  if (!e) return "unknown error";
  try {
    std::rethrow_exception(e);
  } catch (const c10::Error& err) {
    return err.what_without_backtrace();
  } catch (const std::exception& err) {
    return err.what();
  } catch (...) {
    return "unknown non-standard exception";
  }
}

class c10d_pending final : public pending_collective {
 public:
  // `result` is the tensor that holds the reduced values once `work` (and `d2h_done`, if any) completed.
  c10d_pending(std::string backend, c10::intrusive_ptr<c10d::Work> work, at::Tensor result,
               std::unique_ptr<c10::Event> d2h_done, at::Tensor device_tensor, double* out, std::size_t count)
      : backend_(std::move(backend)),
        work_(std::move(work)),
        result_(std::move(result)),
        d2h_done_(std::move(d2h_done)),
        device_tensor_(std::move(device_tensor)),
        out_(out),
        count_(count) {}

  // A collective over zero values: done at once, nothing to copy.
  explicit c10d_pending(std::string backend) : backend_(std::move(backend)), status_(collective_status::done) {}

  collective_status wait(milliseconds timeout) override {
    if (status_ != collective_status::pending) return status_;
    if (!d2h_done_ && timeout > milliseconds(0)) {
      // CPU backends (Gloo): block on the Work's own condition variable, which wakes the moment the
      // collective completes (polling with naps would add up to a nap of latency to every log). A timeout
      // here only throws "Operation timed out!" from the wait; the collective keeps running.
      try {
        work_->wait(timeout);
      } catch (...) {
        // timed out, or the collective failed: poll() tells which
      }
      try {
        poll();
      } catch (...) {
        fail(describe(std::current_exception()));
      }
      return status_;
    }
    try {
      detail::poll_with_backoff(timeout, [this] { poll(); },
                                [this] { return status_ != collective_status::pending; });
    } catch (...) {
      fail(describe(std::current_exception()));
    }
    return status_;
  }

  std::string error_message() const override { return error_; }

  // What the collective is, for error messages ("all-reduce", the default, or "all-gather").
  c10d_pending& named(std::string operation) {
    operation_ = std::move(operation);
    return *this;
  }

 private:
  // One non-blocking look at the collective; moves status_ to done or failed when it has finished.
  void poll() {
    if (!work_->isCompleted()) return;
    if (std::exception_ptr e = work_->exception()) {
      fail(describe(e));
      return;
    }
    if (d2h_done_ && !d2h_done_->query()) return;  // NCCL: the copy back to the host is still queued
    std::memcpy(out_, result_.data_ptr<double>(), count_ * sizeof(double));
    release();
    status_ = collective_status::done;
  }

  void fail(const std::string& why) {
    error_ = backend_ + " " + operation_ + " of " + std::to_string(count_) + " values failed: " + why;
    status_ = collective_status::failed;
    // Keep work_ and the tensors: a failed Gloo/NCCL collective may still reference them; they go with us.
  }

  void release() {
    work_.reset();
    d2h_done_.reset();
    result_ = at::Tensor();
    device_tensor_ = at::Tensor();
  }

  std::string backend_;
  std::string operation_ = "all-reduce";
  c10::intrusive_ptr<c10d::Work> work_;
  at::Tensor result_;                      // CPU (pinned for NCCL) tensor with the reduced values
  std::unique_ptr<c10::Event> d2h_done_;   // NCCL only: recorded after the device-to-host copy
  at::Tensor device_tensor_;               // NCCL only: kept alive until done (the caching allocator
                                           // would also keep it safe; this only makes it obvious)
  double* out_ = nullptr;
  std::size_t count_ = 0;
  collective_status status_ = collective_status::pending;
  std::string error_;
};

class c10d_communicator final : public communicator {
 public:
  explicit c10d_communicator(c10::intrusive_ptr<c10d::ProcessGroup> group,
                             detail::device_contribution contribute = nullptr)
      : group_(std::move(group)),
        contribute_(std::move(contribute)),
        backend_(group_->getBackendName()),
        name_("c10d:" + backend_),
        is_nccl_(backend_ == "nccl"),
        rank_(group_->getRank()),
        world_size_(group_->getSize()) {}

  // A group whose last collective has not finished (a peer that died or hangs, e.g. stopped by SIGSTOP)
  // cannot be destroyed without blocking: ProcessGroupGloo's destructor joins its worker threads, which
  // wait inside the collective until Gloo's own timeout. When this communicator holds the last reference
  // (a group flopmeter built, as make_gloo_communicator_from_env does), that reference is abandoned
  // instead (a group the trainer still holds is only released: dropping a reference never blocks): the group and its threads stay allocated until the process exits, and destruction returns at
  // once. A finished group is destroyed normally.
  ~c10d_communicator() override {
    if (last_work_ && !last_work_->isCompleted() && group_.use_count() == 1) {
      (void)group_.release();
      (void)last_work_.release();
    }
  }
  c10d_communicator(const c10d_communicator&) = delete;
  c10d_communicator& operator=(const c10d_communicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string backend_name() const override { return name_; }

  std::unique_ptr<pending_collective> start_allreduce_sum(double* values, std::size_t count) override {
    // Every rank passes the same count, so skipping an empty collective is skipped everywhere.
    if (count == 0) return std::make_unique<c10d_pending>(name_);
    if (values == nullptr) throw error(name_ + ": start_allreduce_sum got a null buffer for " +
                                       std::to_string(count) + " values");
    if (count > static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max()) / sizeof(double)) {
      throw error(name_ + ": start_allreduce_sum count " + std::to_string(count) + " is too large");
    }
    try {
      const auto n = static_cast<std::int64_t>(count);
      const auto host_options = at::TensorOptions().dtype(at::kDouble).pinned_memory(is_nccl_);
      at::Tensor host = at::empty({n}, host_options);
      std::memcpy(host.data_ptr<double>(), values, count * sizeof(double));

      c10d::AllreduceOptions options;
      options.reduceOp = c10d::ReduceOp::SUM;
      if (!is_nccl_) {
        if (contribute_) contribute_(host);
        std::vector<at::Tensor> tensors{host};
        c10::intrusive_ptr<c10d::Work> work = group_->allreduce(tensors, options);
        last_work_ = work;
        return std::make_unique<c10d_pending>(name_, std::move(work), std::move(host), nullptr, at::Tensor(),
                                              values, count);
      }

      // NCCL: host (pinned) -> current CUDA device on the current stream; ProcessGroupNCCL orders its own
      // stream after the current one.
      at::Tensor device = host.to(at::TensorOptions().device(at::kCUDA), /*non_blocking=*/true);
      if (contribute_) contribute_(device);
      std::vector<at::Tensor> tensors{device};
      c10::intrusive_ptr<c10d::Work> work = group_->allreduce(tensors, options);
      last_work_ = work;
      // For NCCL, Work::wait makes the current stream wait for the all-reduce; the host does not block
      // (unless the trainer set NCCL_BLOCKING_WAIT=1).
      work->wait();
      at::Tensor back = at::empty({n}, host_options);
      back.copy_(device, /*non_blocking=*/true);
      auto d2h_done = std::make_unique<c10::Event>(c10::DeviceType::CUDA);
      const c10::impl::VirtualGuardImpl cuda(c10::DeviceType::CUDA);
      d2h_done->record(cuda.getStream(device.device()));
      return std::make_unique<c10d_pending>(name_, std::move(work), std::move(back), std::move(d2h_done),
                                            std::move(device), values, count);
    } catch (...) {
      throw error(name_ + ": could not start the all-reduce of " + std::to_string(count) +
                  " values: " + describe(std::current_exception()));
    }
  }

  // c10d's all-gather: each rank's row crosses the network once (an all-reduce of the whole buffer moves it
  // about twice). Gloo takes one output tensor per rank (views into one buffer here); NCCL a flat output
  // (_allgather_base). With a device contribution (the tensor path adds its device counts into this rank's
  // row of the whole buffer) the default — an all-reduce of the buffer — is kept.
  std::unique_ptr<pending_collective> start_allgather(const double* send, std::size_t count, double* recv) override {
    if (contribute_) return communicator::start_allgather(send, count, recv);
    if (count == 0) return std::make_unique<c10d_pending>(name_);
    if (send == nullptr || recv == nullptr) {
      throw error(name_ + ": start_allgather got a null buffer for " + std::to_string(count) + " values");
    }
    const auto world = static_cast<std::size_t>(world_size_);
    if (count > static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max()) / sizeof(double) / world) {
      throw error(name_ + ": start_allgather count " + std::to_string(count) + " is too large");
    }
    try {
      const auto n = static_cast<std::int64_t>(count);
      const auto total = static_cast<std::int64_t>(count * world);
      const auto host_options = at::TensorOptions().dtype(at::kDouble).pinned_memory(is_nccl_);
      at::Tensor host = at::empty({n}, host_options);
      std::memcpy(host.data_ptr<double>(), send, count * sizeof(double));
      c10d::AllgatherOptions options;
      if (!is_nccl_) {
        at::Tensor gathered = at::empty({total}, host_options);
        std::vector<std::vector<at::Tensor>> outputs(1);
        outputs[0].reserve(world);
        for (std::size_t r = 0; r < world; ++r) outputs[0].push_back(gathered.narrow(0, static_cast<std::int64_t>(r) * n, n));
        std::vector<at::Tensor> inputs{host};
        c10::intrusive_ptr<c10d::Work> work = group_->allgather(outputs, inputs, options);
        last_work_ = work;
        auto pending = std::make_unique<c10d_pending>(name_, std::move(work), std::move(gathered), nullptr,
                                                      at::Tensor(), recv, count * world);
        pending->named("all-gather");
        return pending;
      }
      at::Tensor device_in = host.to(at::TensorOptions().device(at::kCUDA), /*non_blocking=*/true);
      at::Tensor device_out = at::empty({total}, device_in.options());
      c10::intrusive_ptr<c10d::Work> work = group_->_allgather_base(device_out, device_in, options);
      last_work_ = work;
      work->wait();  // orders the current stream after the all-gather; the host does not block
      at::Tensor back = at::empty({total}, host_options);
      back.copy_(device_out, /*non_blocking=*/true);
      auto d2h_done = std::make_unique<c10::Event>(c10::DeviceType::CUDA);
      const c10::impl::VirtualGuardImpl cuda(c10::DeviceType::CUDA);
      d2h_done->record(cuda.getStream(device_out.device()));
      auto pending = std::make_unique<c10d_pending>(name_, std::move(work), std::move(back), std::move(d2h_done),
                                                    std::move(device_out), recv, count * world);
      pending->named("all-gather");
      return pending;
    } catch (...) {
      throw error(name_ + ": could not start the all-gather of " + std::to_string(count) + " values per rank: " +
                  describe(std::current_exception()));
    }
  }

 private:
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  c10::intrusive_ptr<c10d::Work> last_work_;  // the latest collective started (see the destructor)
  detail::device_contribution contribute_;
  std::string backend_;
  std::string name_;
  bool is_nccl_;
  int rank_;
  int world_size_;
};

#if FLOPMETER_C10D_HAVE_GLOO

std::string require_env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') {
    throw error(std::string("make_gloo_communicator_from_env: environment variable ") + name +
                " is not set (the launcher, e.g. torchrun, sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)");
  }
  return value;
}

// Parses all of `text` as a decimal integer in [lo, hi]; `what` names it in errors.
long long parse_integer(const std::string& what, const std::string& text, long long lo, long long hi,
                        const std::string& expectation) {
  long long value = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  const auto [end, ec] = std::from_chars(first, last, value);
  if (ec != std::errc() || end != last) {
    throw error("make_gloo_communicator_from_env: " + what + "='" + text + "' is not an integer");
  }
  if (value < lo || value > hi) {
    throw error("make_gloo_communicator_from_env: " + what + "=" + text + " is out of range (" + expectation +
                ")");
  }
  return value;
}

std::atomic<unsigned> gloo_env_generation{0};

#endif  // FLOPMETER_C10D_HAVE_GLOO

}  // namespace

std::shared_ptr<communicator> make_c10d_communicator(c10::intrusive_ptr<c10d::ProcessGroup> group) {
  if (!group) throw error("make_c10d_communicator: the process group is null");
  return std::make_shared<c10d_communicator>(std::move(group));
}

std::shared_ptr<communicator> detail::make_c10d_communicator_with(c10::intrusive_ptr<c10d::ProcessGroup> group,
                                                                  device_contribution contribute) {
  if (!group) throw error("make_c10d_communicator: the process group is null");
  return std::make_shared<c10d_communicator>(std::move(group), std::move(contribute));
}

std::shared_ptr<communicator> make_gloo_communicator_from_env(std::chrono::milliseconds timeout) {
  gloo_env_options options;
  options.timeout = timeout;
  return make_gloo_communicator_from_env(options);
}

std::shared_ptr<communicator> make_gloo_communicator_from_env(const gloo_env_options& options) {
#if FLOPMETER_C10D_HAVE_GLOO
  if (options.timeout <= milliseconds(0)) {
    throw error("make_gloo_communicator_from_env: timeout must be > 0 ms, got " +
                std::to_string(options.timeout.count()));
  }
  const long long world = parse_integer("WORLD_SIZE", require_env("WORLD_SIZE"), 1,
                                        std::numeric_limits<int>::max(), "must be >= 1");
  const long long rank = parse_integer("RANK", require_env("RANK"), 0, world - 1,
                                       "must be in [0, WORLD_SIZE) = [0, " + std::to_string(world) + ")");
  const std::string address = require_env("MASTER_ADDR");
  const long long base_port = parse_integer("MASTER_PORT", require_env("MASTER_PORT"), 1, 65535,
                                            "must be in [1, 65535]");
  const long long port = base_port + options.store_port_offset;
  if (port < 1 || port > 65535) {
    throw error("make_gloo_communicator_from_env: MASTER_PORT=" + std::to_string(base_port) +
                " + store_port_offset=" + std::to_string(options.store_port_offset) + " = " +
                std::to_string(port) + " is not a valid port (1..65535)");
  }
  const bool serve = options.start_store_server && rank == 0;
  const std::string where = address + ":" + std::to_string(port);

  c10::intrusive_ptr<c10d::Store> tcp;
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<std::uint16_t>(port);
    store_options.isServer = serve;
    // No worker counting: it would add to the trainer's own "init/" key when its server is the one we use.
    // The Gloo rendezvous below waits for every rank anyway.
    store_options.numWorkers = c10::nullopt;
    store_options.waitWorkers = false;
    store_options.timeout = options.timeout;
    tcp = c10::make_intrusive<c10d::TCPStore>(address, store_options);
  } catch (...) {
    throw error("make_gloo_communicator_from_env: rank " + std::to_string(rank) +
                (serve ? " could not start a TCPStore server at " : " could not reach the TCPStore at ") + where +
                (serve ? "" : " (does the trainer host one there? otherwise set start_store_server)") + ": " +
                describe(std::current_exception()));
  }

  const unsigned generation = gloo_env_generation.fetch_add(1);
  const std::string prefix = options.store_key_prefix + "/" + std::to_string(generation);
  try {
    auto store = c10::make_intrusive<c10d::PrefixStore>(prefix, tcp);
    auto gloo_options = c10d::ProcessGroupGloo::Options::create(options.timeout);
    if (!options.gloo_hostname.empty()) {
      gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(options.gloo_hostname));
    } else if (const char* ifnames = std::getenv("GLOO_SOCKET_IFNAME"); ifnames != nullptr && *ifnames) {
      std::stringstream list(ifnames);
      std::string name;
      while (std::getline(list, name, ',')) {
        if (!name.empty()) {
          gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
        }
      }
    }
    if (gloo_options->devices.empty()) {
      gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
    gloo_options->threads = 1;  // one small collective per log
    auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store, static_cast<int>(rank), static_cast<int>(world),
                                                            gloo_options);
    return make_c10d_communicator(c10d_compat::as_process_group(store, static_cast<int>(rank),
                                                                static_cast<int>(world), std::move(gloo),
                                                                c10d_compat::kGloo, c10::DeviceType::CPU,
                                                                options.timeout));
  } catch (...) {
    throw error("make_gloo_communicator_from_env: rank " + std::to_string(rank) + " of " +
                std::to_string(world) + " could not set up the Gloo group (store " + where + ", keys '" + prefix +
                "/'): " + describe(std::current_exception()));
  }
#else
  (void)options;
  throw error(
      "make_gloo_communicator_from_env: flopmeter was built without Gloo's headers (Debian: libgloo-dev); "
      "pass a ProcessGroup to make_c10d_communicator instead");
#endif
}

}  // namespace flopmeter
