// The communicator's defaults (flopmeter/communicator.h): a MAX all-reduce over the all-gather, for adapters
// whose backend has none (a trainer's callbacks that only sum), and the SUM and MAX of an ordinary log as two
// collectives waited for together.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "flopmeter/communicator.h"

namespace flopmeter {
namespace {

// The gather in flight, its buffer, and where the maximum goes once it is done.
class max_over_gather final : public pending_collective {
 public:
  max_over_gather(double* values, std::size_t count, std::size_t world)
      : values_(values), count_(count), gathered_(world * count) {}

  void start(communicator& comm) { gather_ = comm.start_allgather(values_, count_, gathered_.data()); }

  collective_status wait(std::chrono::milliseconds timeout) override {
    if (!gather_) return collective_status::done;
    const collective_status status = gather_->wait(timeout);
    if (status != collective_status::done) return status;
    if (!folded_) {
      folded_ = true;
      const std::size_t world = count_ == 0 ? 0 : gathered_.size() / count_;
      for (std::size_t i = 0; i < count_; ++i) {
        double m = gathered_[i];
        // NaN wins: a broken value must not vanish in the maximum.
        for (std::size_t r = 1; r < world && !std::isnan(m); ++r) {
          const double v = gathered_[r * count_ + i];
          if (std::isnan(v) || v > m) m = v;
        }
        values_[i] = m;
      }
    }
    return collective_status::done;
  }
  std::string error_message() const override { return gather_ ? gather_->error_message() : std::string(); }

 private:
  double* values_;
  std::size_t count_;
  std::vector<double> gathered_;
  std::unique_ptr<pending_collective> gather_;
  bool folded_ = false;
};

// Two collectives waited for as one: done when both are, failed when either failed.
class both_collectives final : public pending_collective {
 public:
  both_collectives(std::unique_ptr<pending_collective> first, std::unique_ptr<pending_collective> second)
      : first_(std::move(first)), second_(std::move(second)) {}

  collective_status wait(std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    const collective_status a = first_->wait(timeout);
    if (a == collective_status::failed) {
      failed_ = first_.get();
      return a;
    }
    // The second gets what is left of the timeout (0 after the first used it all: a poll).
    const auto left =
        std::max(std::chrono::milliseconds(0),
                 std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()));
    const collective_status b = second_->wait(left);
    if (b == collective_status::failed) failed_ = second_.get();
    if (b == collective_status::failed || a == collective_status::pending)
      return b == collective_status::failed ? b : a;
    return b;
  }
  std::string error_message() const override { return failed_ ? failed_->error_message() : std::string(); }

 private:
  std::unique_ptr<pending_collective> first_, second_;
  const pending_collective* failed_ = nullptr;
};

}  // namespace

std::unique_ptr<pending_collective> communicator::start_allreduce_sum_max(double* values, std::size_t sum_count,
                                                                          std::size_t max_count) {
  auto sums = start_allreduce_sum(values, sum_count);
  auto maxima = start_allreduce_max(values + sum_count, max_count);
  return std::make_unique<both_collectives>(std::move(sums), std::move(maxima));
}

std::unique_ptr<pending_collective> communicator::start_allreduce_max(double* values, std::size_t count) {
  auto pending = std::make_unique<max_over_gather>(values, count, static_cast<std::size_t>(world_size()));
  pending->start(*this);
  return pending;
}

}  // namespace flopmeter
