// The communicator over a trainer's all-reduce callbacks (c_callback_communicator.h).
#include "comm/c_callback_communicator.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "flopmeter/error.h"

namespace flopmeter::detail {
namespace {

// One collective the trainer's start_allreduce_sum started: waits through its `wait`, releases the handle
// through its `release` when destroyed (finished or not).
class c_pending final : public pending_collective {
 public:
  c_pending(const callback_collective& comm, void* handle) : comm_(comm), handle_(handle) {}
  ~c_pending() override {
    if (comm_.release != nullptr) comm_.release(comm_.user, handle_);
  }
  c_pending(const c_pending&) = delete;
  c_pending& operator=(const c_pending&) = delete;

  collective_status wait(std::chrono::milliseconds timeout) override {
    const int status = comm_.wait(comm_.user, handle_, static_cast<int64_t>(timeout.count()));
    if (status == 0) return collective_status::done;
    if (status == 1) return collective_status::pending;
    message_ = "the trainer's all-reduce callback reported failure (" + std::to_string(status) + ")";
    return collective_status::failed;
  }
  std::string error_message() const override { return message_; }

 private:
  callback_collective comm_;
  void* handle_;
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

 private:
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
