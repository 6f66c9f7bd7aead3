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
#include <cstdint>
#include <cstring>
#include <limits>
#include <thread>
#include <utility>
#include <vector>

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "flopmeter/error.h"
#include "comm/c10d_internal.h"
#include "comm/poll_backoff.h"

namespace flopmeter {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// The message of an exception without c10's multi-line backtrace (gloo_group.cpp).
std::string describe(const std::exception_ptr& e) { return detail::describe_exception(e); }

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
  explicit c10d_communicator(c10::intrusive_ptr<c10d::ProcessGroup> group)
      : group_(std::move(group)),
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
    return start_allreduce(values, count, c10d::ReduceOp::SUM, "start_allreduce_sum");
  }

  // c10d's MAX all-reduce (Gloo and NCCL have one): count doubles each way, whatever the world.
  std::unique_ptr<pending_collective> start_allreduce_max(double* values, std::size_t count) override {
    return start_allreduce(values, count, c10d::ReduceOp::MAX, "start_allreduce_max");
  }

  std::unique_ptr<pending_collective> start_allreduce(double* values, std::size_t count, c10d::ReduceOp::RedOpType op,
                                                      const char* what) {
    // Every rank passes the same count, so skipping an empty collective is skipped everywhere.
    if (count == 0) return std::make_unique<c10d_pending>(name_);
    if (values == nullptr)
      throw error(name_ + ": " + what + " got a null buffer for " + std::to_string(count) + " values");
    if (count > static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max()) / sizeof(double)) {
      throw error(name_ + ": " + what + " count " + std::to_string(count) + " is too large");
    }
    try {
      const auto n = static_cast<std::int64_t>(count);
      const auto host_options = at::TensorOptions().dtype(at::kDouble).pinned_memory(is_nccl_);
      at::Tensor host = at::empty({n}, host_options);
      std::memcpy(host.data_ptr<double>(), values, count * sizeof(double));

      c10d::AllreduceOptions options;
      options.reduceOp = op;
      if (!is_nccl_) {
        std::vector<at::Tensor> tensors{host};
        c10::intrusive_ptr<c10d::Work> work = group_->allreduce(tensors, options);
        last_work_ = work;
        return std::make_unique<c10d_pending>(name_, std::move(work), std::move(host), nullptr, at::Tensor(),
                                              values, count);
      }

      // NCCL: host (pinned) -> current CUDA device on the current stream; ProcessGroupNCCL orders its own
      // stream after the current one.
      at::Tensor device = host.to(at::TensorOptions().device(at::kCUDA), /*non_blocking=*/true);
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
  // (_allgather_base).
  std::unique_ptr<pending_collective> start_allgather(const double* send, std::size_t count, double* recv) override {
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
  std::string backend_;
  std::string name_;
  bool is_nccl_;
  int rank_;
  int world_size_;
};

}  // namespace

std::shared_ptr<communicator> make_c10d_communicator(c10::intrusive_ptr<c10d::ProcessGroup> group,
                                                     const c10d_options& options) {
  if (!group) throw error("make_c10d_communicator: the process group is null");
  detail::check_group_covers_job("make_c10d_communicator", group->getSize(), options.job_world_size);
  const bool log_depth = detail::resolve_small_allreduce(options.allreduce, /*own_group=*/false, group->getSize(),
                                                         group->getBackendName(), "make_c10d_communicator");
  auto comm = std::make_shared<c10d_communicator>(group);
  if (!log_depth) return comm;
  return detail::with_log_depth(std::move(comm), std::move(group), milliseconds(0));
}

std::shared_ptr<communicator> detail::make_own_c10d_communicator(c10::intrusive_ptr<c10d::ProcessGroup> group,
                                                                 small_allreduce choice, milliseconds timeout,
                                                                 const std::string& who) {
  const bool log_depth =
      resolve_small_allreduce(choice, /*own_group=*/true, group->getSize(), group->getBackendName(), who);
  auto comm = std::make_shared<c10d_communicator>(group);
  if (!log_depth) return comm;
  return with_log_depth(std::move(comm), std::move(group), timeout);
}

}  // namespace flopmeter
