// The communicator over a trainer's all-reduce callbacks (c_callback_communicator.h).
#include "comm/c_callback_communicator.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "flopmeter/error.h"

namespace flopmeter::detail {
namespace {

// One collective the trainer's callbacks started: waits through its `wait`, releases the handle through its
// `release` when destroyed (finished or not), unless the handle came from `start` and a wait finished it.
class c_pending final : public pending_collective {
 public:
  c_pending(const callback_collective& comm, void* handle, bool released_by_wait = false)
      : comm_(comm), handle_(handle), released_by_wait_(released_by_wait) {}
  ~c_pending() override {
    if (!finished_ && comm_.release != nullptr) comm_.release(comm_.user, handle_);
  }
  c_pending(const c_pending&) = delete;
  c_pending& operator=(const c_pending&) = delete;

  collective_status wait(std::chrono::milliseconds timeout) override {
    if (finished_) return message_.empty() ? collective_status::done : collective_status::failed;
    const int status = comm_.wait(comm_.user, handle_, static_cast<int64_t>(timeout.count()));
    finished_ = released_by_wait_ && status != 1;  // the trainer released the handle with this answer
    if (status == 0) return collective_status::done;
    if (status == 1) return collective_status::pending;
    message_ = "the trainer's all-reduce callback reported failure (" + std::to_string(status) + ")";
    return collective_status::failed;
  }
  std::string error_message() const override { return message_; }

 private:
  callback_collective comm_;
  void* handle_;
  bool released_by_wait_;
  bool finished_ = false;
  std::string message_;
};

class c_communicator final : public communicator {
 public:
  explicit c_communicator(const callback_collective& comm) : comm_(comm) {}
  int rank() const override { return comm_.rank; }
  int world_size() const override { return comm_.world_size; }
  std::string backend_name() const override { return "c-callbacks"; }
  std::unique_ptr<pending_collective> start_allreduce_sum(double* values, std::size_t count) override {
    void* handle = comm_.start_allreduce_sum(comm_.user, values, count);
    if (handle == nullptr) throw error("the trainer's all-reduce callback could not start the collective");
    return std::make_unique<c_pending>(comm_, handle);
  }
  std::unique_ptr<pending_collective> start_allreduce_max(double* values, std::size_t count) override {
    if (comm_.start_allreduce_max == nullptr) return communicator::start_allreduce_max(values, count);
    void* handle = comm_.start_allreduce_max(comm_.user, values, count);
    if (handle == nullptr) throw error("the trainer's MAX all-reduce callback could not start the collective");
    return std::make_unique<c_pending>(comm_, handle);
  }
  std::unique_ptr<pending_collective> start_allreduce_sum_max(double* values, std::size_t sum_count,
                                                              std::size_t max_count) override {
    if (!comm_.start) return communicator::start_allreduce_sum_max(values, sum_count, max_count);
    collective_request request;
    request.what = collective_request::kind::sum_max;
    request.values = values;
    request.count = sum_count + max_count;
    request.sum_count = sum_count;
    return start(request);
  }
  std::unique_ptr<pending_collective> start_allgather(const double* send, std::size_t count, double* recv) override {
    if (!comm_.start) return communicator::start_allgather(send, count, recv);
    const std::size_t world = static_cast<std::size_t>(comm_.world_size);
    std::fill(recv, recv + world * count, 0.0);  // zeros but this rank's slot: a SUM of it is the gather too
    std::copy(send, send + count, recv + static_cast<std::size_t>(comm_.rank) * count);
    collective_request request;
    request.what = collective_request::kind::allgather;
    request.values = recv;
    request.count = count;
    request.send = send;
    return start(request);
  }

 private:
  std::unique_ptr<pending_collective> start(const collective_request& request) {
    void* handle = comm_.start(request);
    if (handle == nullptr) throw error("the trainer's collective callback could not start the collective");
    return std::make_unique<c_pending>(comm_, handle, /*released_by_wait=*/true);
  }

  callback_collective comm_;
};

}  // namespace

std::shared_ptr<communicator> make_callback_communicator(const callback_collective& comm, const char* what) {
  const std::string name = what;
  if (comm.start_allreduce_sum == nullptr || comm.wait == nullptr || comm.release == nullptr) {
    throw error(name + ": start_allreduce_sum, wait and release must all be set");
  }
  if (comm.world_size > max_world_size) {
    throw error(name + ": world_size " + std::to_string(comm.world_size) + " exceeds " +
                std::to_string(max_world_size) + " ranks, the largest flopmeter supports (FLOPMETER_MAX_WORLD_SIZE)");
  }
  if (comm.world_size < 1) {  // before the rank: "rank 0 is outside [0, 0)" would blame the wrong field
    throw error(name + ": world_size must be >= 1, got " + std::to_string(comm.world_size));
  }
  if (comm.rank < 0 || comm.rank >= comm.world_size) {
    throw error(name + ": rank " + std::to_string(comm.rank) + " is outside [0, " + std::to_string(comm.world_size) +
                ")");
  }
  return std::make_shared<c_communicator>(comm);
}

}  // namespace flopmeter::detail
