// An in-process stand-in for a process group: N communicators whose SUM all-reduces meet in memory.
// Used by the plugin's unit tests to run many ranks deterministically in one thread (or several), to count
// collectives, and to inject failures. Real multi-rank tests use Gloo (tests/gloo_harness.h).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "flopmeter/communicator.h"

namespace flopmeter::testing {

class fake_group : public std::enable_shared_from_this<fake_group> {
 public:
  explicit fake_group(int world_size) : world_(world_size), next_(static_cast<std::size_t>(world_size), 0) {}

  std::shared_ptr<communicator> rank(int r);

  // Collectives started, per rank and in total.
  std::int64_t started(int r) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return next_[static_cast<std::size_t>(r)];
  }
  // The index-th collective (0-based, counted per rank) fails on every rank.
  void fail_collective(std::int64_t index) {
    std::lock_guard<std::mutex> lock(mutex_);
    failing_.insert(index);
  }
  // Rank r never joins collectives from `index` on (a dead or hung peer).
  void stall_rank_from(int r, std::int64_t index) {
    std::lock_guard<std::mutex> lock(mutex_);
    stalled_[r] = index;
  }
  // A stalled rank catches up (a slow peer, not a dead one): it joins, in order, every collective it held
  // back, with the values it started them with, and joins later ones at once. Like a real backend, the
  // collectives are matched by their index, so nothing is paired out of order.
  void resume_rank(int r) {
    std::lock_guard<std::mutex> lock(mutex_);
    stalled_.erase(r);
    for (const auto& held : held_[r]) add(held.first, held.second.data(), held.second.size());
    held_.erase(r);
  }

 private:
  friend class fake_communicator;
  friend class fake_pending;
  struct collective {
    std::vector<double> sum;
    int joined = 0;
  };

  // Adds `values` to collective `index`; returns false if the rank is stalled (its values are held back
  // until resume_rank).
  bool join(int r, std::int64_t index, const double* values, std::size_t count) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto stalled = stalled_.find(r);
    if (stalled != stalled_.end() && index >= stalled->second) {
      held_[r].emplace_back(index, std::vector<double>(values, values + count));
      return false;
    }
    add(index, values, count);
    return true;
  }

  void add(std::int64_t index, const double* values, std::size_t count) {  // mutex_ held
    collective& c = collectives_[index];
    if (c.sum.empty()) c.sum.assign(count, 0.0);
    for (std::size_t i = 0; i < count; ++i) c.sum[i] += values[i];
    ++c.joined;
    done_.notify_all();
  }

  int world_;
  mutable std::mutex mutex_;
  std::condition_variable done_;
  std::vector<std::int64_t> next_;
  std::map<std::int64_t, collective> collectives_;
  std::set<std::int64_t> failing_;
  std::map<int, std::int64_t> stalled_;
  std::map<int, std::vector<std::pair<std::int64_t, std::vector<double>>>> held_;  // stalled ranks' values
};

class fake_pending : public pending_collective {
 public:
  fake_pending(std::shared_ptr<fake_group> group, std::int64_t index, double* values, std::size_t count)
      : group_(std::move(group)), index_(index), values_(values), count_(count) {}

  collective_status wait(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(group_->mutex_);
    if (group_->failing_.count(index_) != 0) {
      message_ = "injected failure of collective " + std::to_string(index_);
      return collective_status::failed;
    }
    const bool complete = group_->done_.wait_for(lock, timeout, [&] {
      return group_->collectives_[index_].joined == group_->world_;
    });
    if (!complete) return collective_status::pending;
    const auto& sum = group_->collectives_[index_].sum;
    for (std::size_t i = 0; i < count_; ++i) values_[i] = sum[i];
    return collective_status::done;
  }
  std::string error_message() const override { return message_; }

 private:
  std::shared_ptr<fake_group> group_;
  std::int64_t index_;
  double* values_;
  std::size_t count_;
  std::string message_;
};

class fake_communicator : public communicator {
 public:
  fake_communicator(std::shared_ptr<fake_group> group, int r) : group_(std::move(group)), rank_(r) {}
  int rank() const override { return rank_; }
  int world_size() const override { return group_->world_; }
  std::string backend_name() const override { return "fake"; }
  std::unique_ptr<pending_collective> start_allreduce_sum(double* values, std::size_t count) override {
    std::int64_t index = 0;
    {
      std::lock_guard<std::mutex> lock(group_->mutex_);
      index = group_->next_[static_cast<std::size_t>(rank_)]++;
    }
    group_->join(rank_, index, values, count);
    return std::make_unique<fake_pending>(group_, index, values, count);
  }

 private:
  std::shared_ptr<fake_group> group_;
  int rank_;
};

inline std::shared_ptr<communicator> fake_group::rank(int r) {
  return std::make_shared<fake_communicator>(shared_from_this(), r);
}

}  // namespace flopmeter::testing
