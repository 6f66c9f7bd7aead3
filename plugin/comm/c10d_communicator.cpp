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
      const auto deadline = steady_clock::now() + std::max(timeout, milliseconds(0));
      auto nap = std::chrono::microseconds(50);
      for (;;) {
        poll();
        if (status_ != collective_status::pending) return status_;
        const auto now = steady_clock::now();
        if (now >= deadline) return status_;
        std::this_thread::sleep_for(
            std::min<steady_clock::duration>(nap, deadline - now));
        nap = std::min(nap * 2, std::chrono::microseconds(2000));
      }
    } catch (...) {
      fail(describe(std::current_exception()));
    }
    return status_;
  }

  std::string error_message() const override { return error_; }

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
    error_ = backend_ + " all-reduce of " + std::to_string(count_) + " values failed: " + why;
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
        return std::make_unique<c10d_pending>(name_, std::move(work), std::move(host), nullptr, at::Tensor(),
                                              values, count);
      }

      // NCCL: host (pinned) -> current CUDA device on the current stream; ProcessGroupNCCL orders its own
      // stream after the current one.
      at::Tensor device = host.to(at::TensorOptions().device(at::kCUDA), /*non_blocking=*/true);
      if (contribute_) contribute_(device);
      std::vector<at::Tensor> tensors{device};
      c10::intrusive_ptr<c10d::Work> work = group_->allreduce(tensors, options);
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

 private:
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  detail::device_contribution contribute_;
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
  return std::make_shared<c10d_communicator>(std::move(group));
}

std::shared_ptr<communicator> detail::make_c10d_communicator_with(c10::intrusive_ptr<c10d::ProcessGroup> group,
                                                                  device_contribution contribute) {
  if (!group) throw error("make_c10d_communicator: the process group is null");
  return std::make_shared<c10d_communicator>(std::move(group), std::move(contribute));
}

}  // namespace flopmeter
