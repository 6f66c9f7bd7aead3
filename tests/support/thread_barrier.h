// A reusable barrier for N threads (C++17 has no std::barrier): the ranks of a simulated job meet at it once
// per step, as a real job's ranks meet at the gradient all-reduce.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace flopmeter::testing {

class thread_barrier {
 public:
  explicit thread_barrier(int parties) : parties_(parties) {}

  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    const std::uint64_t generation = generation_;
    if (++arrived_ == parties_) {
      arrived_ = 0;
      ++generation_;
      all_arrived_.notify_all();
      return;
    }
    all_arrived_.wait(lock, [&] { return generation_ != generation; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable all_arrived_;
  int parties_;
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
};

}  // namespace flopmeter::testing
