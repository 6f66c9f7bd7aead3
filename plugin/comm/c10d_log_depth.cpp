// The ordinary log's SUM and MAX (recursive halving then doubling) and the per-rank table's all-gather
// (recursive doubling) over a c10d CPU group (log_depth.h), for flopmeter's own Gloo groups
// (small_allreduce::log_depth, flopmeter/communicator.h).
//
// One worker thread per communicator runs the collectives in the order they were started (every rank starts
// them in the same order, so the messages pair up by order: each pair of ranks exchanges over one Gloo slot,
// which delivers in order). start_allreduce_sum_max and start_allgather copy their input, queue the job and
// return; the returned pending waits on the job's condition variable (no polling) and copies the result into
// the caller's buffer when it first reports done. Each message is a send and a recv of c10d's point-to-point
// API waited for with Work::wait(timeout), the group's timeout: a dead peer fails the job after that timeout,
// never hangs it. Every other collective (a lone SUM or MAX, the barrier) goes to the wrapped communicator,
// i.e. to c10d's own algorithms; Gloo keeps point-to-point messages and collectives on separate slots, so
// both may be in flight at once.
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
#include "comm/log_depth.h"

namespace flopmeter::detail {
namespace {

using std::chrono::milliseconds;

// The tag of flopmeter's point-to-point messages (Gloo keeps them apart from other tags' messages).
constexpr int kLogDepthTag = 0x464c4f50 & 0x7fffffff;  // "FLOP"

// One collective: its buffer (the values reduced in place, or the gathered table), its outcome.
struct log_depth_job {
  enum class kind { allreduce_sum_max, allgather };
  kind what = kind::allreduce_sum_max;
  std::vector<double> values;  // allgather: world x count, this rank's block filled
  std::size_t sum_count = 0;   // allreduce_sum_max: the SUM part; allgather: count (per rank)
  std::size_t max_count = 0;
  std::mutex mutex;
  std::condition_variable finished_cv;
  collective_status status = collective_status::pending;
  std::string error;
};

// Messages over c10d's send/recv. Every Work that did not finish is kept (it references its tensor, which
// Gloo may still write into) until the worker ends.
class c10d_transport final : public log_depth_transport {
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
  void exchange(int peer, const double* out, std::size_t out_count, double* in, std::size_t in_count) override {
    at::Tensor incoming;
    auto sent = start_send(peer, out, out_count);
    auto received = start_receive(peer, in_count, incoming);
    finish(received);
    finish(sent);
    std::memcpy(in, incoming.data_ptr<double>(), in_count * sizeof(double));
  }

 private:
  c10::intrusive_ptr<c10d::Work> start_send(int peer, const double* values, std::size_t count) {
    at::Tensor out = at::empty({static_cast<std::int64_t>(count)}, at::TensorOptions().dtype(at::kDouble));
    std::memcpy(out.data_ptr<double>(), values, count * sizeof(double));
    std::vector<at::Tensor> tensors{out};
    return group_->send(tensors, peer, kLogDepthTag);
  }
  c10::intrusive_ptr<c10d::Work> start_receive(int peer, std::size_t count, at::Tensor& into) {
    into = at::empty({static_cast<std::int64_t>(count)}, at::TensorOptions().dtype(at::kDouble));
    std::vector<at::Tensor> tensors{into};
    return group_->recv(tensors, peer, kLogDepthTag);
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
struct log_depth_worker_state {
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  milliseconds timeout{0};
  int rank = 0;
  int world = 1;
  std::mutex mutex;
  std::condition_variable work_cv;
  std::deque<std::shared_ptr<log_depth_job>> queue;
  bool busy = false;
  bool stopping = false;
  std::vector<c10::intrusive_ptr<c10d::Work>> unfinished;
};

void finish_job(log_depth_job& job, collective_status status, std::string error) {
  std::lock_guard<std::mutex> lock(job.mutex);
  job.status = status;
  job.error = std::move(error);
  job.finished_cv.notify_all();
}

void run_worker(const std::shared_ptr<log_depth_worker_state>& state) {
  for (;;) {
    std::shared_ptr<log_depth_job> job;
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
      if (job->what == log_depth_job::kind::allgather) {
        // The buffer already holds this rank's block (start_allgather): the steps fill the others.
        run_log_depth_steps(transport, log_depth_allgather_schedule(state->rank, state->world, job->sum_count),
                            job->values.data(), 0);
      } else {
        run_log_depth_allreduce(transport, state->rank, state->world, job->values.data(), job->sum_count,
                                job->max_count);
      }
      finish_job(*job, collective_status::done, "");
    } catch (...) {
      finish_job(*job, collective_status::failed, describe_exception(std::current_exception()));
    }
  }
}

class log_depth_pending final : public pending_collective {
 public:
  log_depth_pending(std::shared_ptr<log_depth_job> job, double* out, std::string backend)
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
    if (job_->what == log_depth_job::kind::allgather) {
      return backend_ + " log-depth all-gather of " + std::to_string(job_->sum_count) +
             " values per rank failed: " + job_->error;
    }
    return backend_ + " log-depth all-reduce of " + std::to_string(job_->values.size()) +
           " values failed: " + job_->error;
  }

 private:
  std::shared_ptr<log_depth_job> job_;
  double* out_;
  std::string backend_;
  bool copied_ = false;
};

class log_depth_communicator final : public communicator {
 public:
  log_depth_communicator(std::shared_ptr<communicator> inner, c10::intrusive_ptr<c10d::ProcessGroup> group,
                         milliseconds timeout)
      : inner_(std::move(inner)), state_(std::make_shared<log_depth_worker_state>()) {
    state_->group = std::move(group);
    state_->timeout = timeout;
    state_->rank = inner_->rank();
    state_->world = inner_->world_size();
    auto state = state_;
    worker_ = std::thread([state] { run_worker(state); });
  }
  ~log_depth_communicator() override {
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
  log_depth_communicator(const log_depth_communicator&) = delete;
  log_depth_communicator& operator=(const log_depth_communicator&) = delete;

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  std::string backend_name() const override { return inner_->backend_name() + "+log_depth"; }

  std::unique_ptr<pending_collective> start_allreduce_sum(double* values, std::size_t count) override {
    return inner_->start_allreduce_sum(values, count);
  }
  std::unique_ptr<pending_collective> start_allreduce_max(double* values, std::size_t count) override {
    return inner_->start_allreduce_max(values, count);
  }
  // The table: recursive doubling over blocks, log2(world) rounds (+ 2), instead of c10d's ring.
  std::unique_ptr<pending_collective> start_allgather(const double* send, std::size_t count, double* recv) override {
    if ((send == nullptr || recv == nullptr) && count > 0) {
      throw error(backend_name() + ": start_allgather got a null buffer");
    }
    const std::size_t world = static_cast<std::size_t>(world_size());
    auto job = std::make_shared<log_depth_job>();
    job->what = log_depth_job::kind::allgather;
    job->values.assign(world * count, 0.0);
    if (count > 0)
      std::memcpy(job->values.data() + static_cast<std::size_t>(rank()) * count, send, count * sizeof(double));
    job->sum_count = count;
    return queue(std::move(job), recv);
  }

  // One pass for both parts: the SUM of values[0, sum_count) and the MAX of the max_count after it.
  std::unique_ptr<pending_collective> start_allreduce_sum_max(double* values, std::size_t sum_count,
                                                              std::size_t max_count) override {
    if (values == nullptr && sum_count + max_count > 0) {
      throw error(backend_name() + ": start_allreduce_sum_max got a null buffer");
    }
    auto job = std::make_shared<log_depth_job>();
    job->values.assign(values, values + sum_count + max_count);
    job->sum_count = sum_count;
    job->max_count = max_count;
    return queue(std::move(job), values);
  }

 private:
  // Hands `job` to the worker (done at once when it moves nothing: every rank passes the same counts) and
  // returns its pending, which copies the result into `out`.
  std::unique_ptr<pending_collective> queue(std::shared_ptr<log_depth_job> job, double* out) {
    if (job->values.empty()) {
      job->status = collective_status::done;
    } else {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->queue.push_back(job);
      state_->work_cv.notify_all();
    }
    return std::make_unique<log_depth_pending>(std::move(job), out, backend_name());
  }

  std::shared_ptr<communicator> inner_;
  std::shared_ptr<log_depth_worker_state> state_;
  std::thread worker_;
};

}  // namespace

bool resolve_small_allreduce(small_allreduce choice, bool own_group, int world, const std::string& backend,
                             const std::string& who) {
  const bool cpu = backend != "nccl";
  switch (choice) {
    case small_allreduce::backend: return false;
    case small_allreduce::log_depth:
      if (!cpu) {
        throw error(who + ": small_allreduce::log_depth needs a CPU group (Gloo); the group's backend is '" + backend +
                    "', whose own all-reduce is already logarithmic (pass small_allreduce::backend)");
      }
      return world > 1;
    case small_allreduce::automatic: return own_group && cpu && world >= log_depth_min_ranks;
  }
  return false;
}

std::shared_ptr<communicator> with_log_depth(std::shared_ptr<communicator> inner,
                                             c10::intrusive_ptr<c10d::ProcessGroup> group, milliseconds timeout) {
  return std::make_shared<log_depth_communicator>(std::move(inner), std::move(group), timeout);
}

}  // namespace flopmeter::detail
