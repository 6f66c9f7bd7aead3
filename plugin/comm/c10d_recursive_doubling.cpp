// The ordinary log's SUM and MAX by recursive doubling over a c10d CPU group (recursive_doubling.h), for
// flopmeter's own Gloo groups (small_allreduce, flopmeter/communicator.h).
//
// One worker thread per communicator runs the collectives in the order they were started (every rank starts
// them in the same order, so the messages pair up by order: each pair of ranks exchanges over one Gloo slot,
// which delivers in order). start_allreduce_sum_max copies the values, queues the job and returns; the
// returned pending waits on the job's condition variable (no polling) and copies the result into the caller's
// buffer when it first reports done. Each message is a send and a recv of c10d's point-to-point API waited for
// with Work::wait(timeout), the group's timeout: a dead peer fails the job after that timeout, never hangs it.
// Every other collective (the table's all-gather, the barrier) goes to the wrapped communicator, i.e. to
// c10d's own algorithms; Gloo keeps point-to-point messages and collectives on separate slots, so both may be
// in flight at once.
//
// Destruction never blocks on a peer: an idle worker is joined; a busy one (waiting for a dead peer) is
// detached with shared ownership of what it uses, and lets go of it when its wait times out.
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "flopmeter/error.h"
#include "comm/c10d_internal.h"
#include "comm/recursive_doubling.h"

namespace flopmeter::detail {
namespace {

using std::chrono::milliseconds;

// The tag of flopmeter's point-to-point messages (Gloo keeps them apart from other tags' messages).
constexpr int kDoublingTag = 0x464c4f50 & 0x7fffffff;  // "FLOP"

// One reduction: its values (in place), its outcome.
struct doubling_job {
  std::vector<double> values;
  std::size_t sum_count = 0;
  std::size_t max_count = 0;
  std::mutex mutex;
  std::condition_variable finished_cv;
  collective_status status = collective_status::pending;
  std::string error;
};

// Messages over c10d's send/recv. Every Work that did not finish is kept (it references its tensor, which
// Gloo may still write into) until the worker ends.
class c10d_transport final : public doubling_transport {
 public:
  c10d_transport(c10::intrusive_ptr<c10d::ProcessGroup> group, milliseconds timeout,
                 std::vector<c10::intrusive_ptr<c10d::Work>>& unfinished)
      : group_(std::move(group)), timeout_(timeout), unfinished_(unfinished) {}

  void send(int peer, const double* values, std::size_t count) override {
    auto work = start_send(peer, values, count);
    finish(work);
  }
  void receive(int peer, double* values, std::size_t count) override {
    at::Tensor in;
    auto work = start_receive(peer, count, in);
    finish(work);
    std::memcpy(values, in.data_ptr<double>(), count * sizeof(double));
  }
  void exchange(int peer, const double* out, double* in, std::size_t count) override {
    at::Tensor incoming;
    auto sent = start_send(peer, out, count);
    auto received = start_receive(peer, count, incoming);
    finish(received);
    finish(sent);
    std::memcpy(in, incoming.data_ptr<double>(), count * sizeof(double));
  }

 private:
  c10::intrusive_ptr<c10d::Work> start_send(int peer, const double* values, std::size_t count) {
    at::Tensor out = at::empty({static_cast<std::int64_t>(count)}, at::TensorOptions().dtype(at::kDouble));
    std::memcpy(out.data_ptr<double>(), values, count * sizeof(double));
    std::vector<at::Tensor> tensors{out};
    return group_->send(tensors, peer, kDoublingTag);
  }
  c10::intrusive_ptr<c10d::Work> start_receive(int peer, std::size_t count, at::Tensor& into) {
    into = at::empty({static_cast<std::int64_t>(count)}, at::TensorOptions().dtype(at::kDouble));
    std::vector<at::Tensor> tensors{into};
    return group_->recv(tensors, peer, kDoublingTag);
  }
  // Waits for one message; throws when it failed or timed out (the Work is then kept, see above).
  void finish(const c10::intrusive_ptr<c10d::Work>& work) {
    try {
      work->wait(timeout_);
    } catch (...) {
      unfinished_.push_back(work);
      throw;
    }
  }

  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  milliseconds timeout_;
  std::vector<c10::intrusive_ptr<c10d::Work>>& unfinished_;
};

// What the worker thread uses: shared with the communicator, and kept by a detached worker.
struct doubling_worker_state {
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  milliseconds timeout{0};
  int rank = 0;
  int world = 1;
  std::mutex mutex;
  std::condition_variable work_cv;
  std::deque<std::shared_ptr<doubling_job>> queue;
  bool busy = false;
  bool stopping = false;
  std::vector<c10::intrusive_ptr<c10d::Work>> unfinished;
};

void finish_job(doubling_job& job, collective_status status, std::string error) {
  std::lock_guard<std::mutex> lock(job.mutex);
  job.status = status;
  job.error = std::move(error);
  job.finished_cv.notify_all();
}

void run_worker(const std::shared_ptr<doubling_worker_state>& state) {
  for (;;) {
    std::shared_ptr<doubling_job> job;
    {
      std::unique_lock<std::mutex> lock(state->mutex);
      state->busy = false;
      state->work_cv.wait(lock, [&] { return state->stopping || !state->queue.empty(); });
      if (state->stopping) break;
      job = std::move(state->queue.front());
      state->queue.pop_front();
      state->busy = true;
    }
    try {
      c10d_transport transport(state->group, state->timeout, state->unfinished);
      run_recursive_doubling(transport, state->rank, state->world, job->values.data(), job->sum_count, job->max_count);
      finish_job(*job, collective_status::done, "");
    } catch (...) {
      finish_job(*job, collective_status::failed, describe_exception(std::current_exception()));
    }
  }
}

class doubling_pending final : public pending_collective {
 public:
  doubling_pending(std::shared_ptr<doubling_job> job, double* out, std::string backend)
      : job_(std::move(job)), out_(out), backend_(std::move(backend)) {}

  collective_status wait(milliseconds timeout) override {
    if (copied_) return collective_status::done;
    std::unique_lock<std::mutex> lock(job_->mutex);
    job_->finished_cv.wait_for(lock, timeout, [&] { return job_->status != collective_status::pending; });
    if (job_->status == collective_status::done) {
      if (!job_->values.empty()) std::memcpy(out_, job_->values.data(), job_->values.size() * sizeof(double));
      copied_ = true;
    }
    return job_->status;
  }
  std::string error_message() const override {
    std::lock_guard<std::mutex> lock(job_->mutex);
    if (job_->status != collective_status::failed) return "";
    return backend_ + " recursive-doubling all-reduce of " + std::to_string(job_->values.size()) +
           " values failed: " + job_->error;
  }

 private:
  std::shared_ptr<doubling_job> job_;
  double* out_;
  std::string backend_;
  bool copied_ = false;
};

class recursive_doubling_communicator final : public communicator {
 public:
  recursive_doubling_communicator(std::shared_ptr<communicator> inner, c10::intrusive_ptr<c10d::ProcessGroup> group,
                                  milliseconds timeout)
      : inner_(std::move(inner)), state_(std::make_shared<doubling_worker_state>()) {
    state_->group = std::move(group);
    state_->timeout = timeout;
    state_->rank = inner_->rank();
    state_->world = inner_->world_size();
    auto state = state_;
    worker_ = std::thread([state] { run_worker(state); });
  }
  ~recursive_doubling_communicator() override {
    bool busy = false;
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->stopping = true;
      busy = state_->busy;
      state_->work_cv.notify_all();
    }
    // Idle: it ends at once. Busy (a message to a peer that does not answer): it ends when that message's
    // wait times out, with its own reference to the group and the unfinished messages.
    if (busy) {
      worker_.detach();
    } else {
      worker_.join();
    }
  }
  recursive_doubling_communicator(const recursive_doubling_communicator&) = delete;
  recursive_doubling_communicator& operator=(const recursive_doubling_communicator&) = delete;

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  std::string backend_name() const override { return inner_->backend_name() + "+doubling"; }

  std::unique_ptr<pending_collective> start_allreduce_sum(double* values, std::size_t count) override {
    return inner_->start_allreduce_sum(values, count);
  }
  std::unique_ptr<pending_collective> start_allreduce_max(double* values, std::size_t count) override {
    return inner_->start_allreduce_max(values, count);
  }
  std::unique_ptr<pending_collective> start_allgather(const double* send, std::size_t count, double* recv) override {
    return inner_->start_allgather(send, count, recv);
  }

  // One pass for both parts: the SUM of values[0, sum_count) and the MAX of the max_count after it.
  std::unique_ptr<pending_collective> start_allreduce_sum_max(double* values, std::size_t sum_count,
                                                              std::size_t max_count) override {
    if (values == nullptr && sum_count + max_count > 0) {
      throw error(backend_name() + ": start_allreduce_sum_max got a null buffer");
    }
    auto job = std::make_shared<doubling_job>();
    job->values.assign(values, values + sum_count + max_count);
    job->sum_count = sum_count;
    job->max_count = max_count;
    if (sum_count + max_count == 0) {  // nothing to send on any rank (every rank passes the same counts)
      job->status = collective_status::done;
      return std::make_unique<doubling_pending>(std::move(job), values, backend_name());
    }
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->queue.push_back(job);
      state_->work_cv.notify_all();
    }
    return std::make_unique<doubling_pending>(std::move(job), values, backend_name());
  }

 private:
  std::shared_ptr<communicator> inner_;
  std::shared_ptr<doubling_worker_state> state_;
  std::thread worker_;
};

}  // namespace

bool resolve_small_allreduce(small_allreduce choice, bool own_group, int world, const std::string& backend,
                             const std::string& who) {
  const bool cpu = backend != "nccl";
  switch (choice) {
    case small_allreduce::backend: return false;
    case small_allreduce::recursive_doubling:
      if (!cpu) {
        throw error(who + ": small_allreduce::recursive_doubling needs a CPU group (Gloo); the group's backend is '" +
                    backend + "', whose own all-reduce is already logarithmic (pass small_allreduce::backend)");
      }
      return world > 1;
    case small_allreduce::automatic: return own_group && cpu && world >= recursive_doubling_min_ranks;
  }
  return false;
}

std::shared_ptr<communicator> with_recursive_doubling(std::shared_ptr<communicator> inner,
                                                      c10::intrusive_ptr<c10d::ProcessGroup> group,
                                                      milliseconds timeout) {
  return std::make_shared<recursive_doubling_communicator>(std::move(inner), std::move(group), timeout);
}

}  // namespace flopmeter::detail
