// plugin/comm/poll_backoff.h — internal: the wait loop of the adapters that can only poll their collective
// (NCCL through c10d, raw NCCL). Thread-safety: a function of its arguments.
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>

namespace flopmeter::detail {

// Calls `poll()` until `finished()` is true or `timeout` has passed (0: one poll). Between polls it naps,
// from 50 us doubling up to 2 ms: a collective that completes at once costs no nap, a slow one costs at most
// 2 ms of latency and no busy core. Exceptions from `poll` propagate.
template <class Poll, class Finished>
void poll_with_backoff(std::chrono::milliseconds timeout, Poll&& poll, Finished&& finished) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::max(timeout, std::chrono::milliseconds(0));
  auto nap = std::chrono::microseconds(50);
  for (;;) {
    poll();
    if (finished()) return;
    const auto now = clock::now();
    if (now >= deadline) return;
    std::this_thread::sleep_for(std::min<clock::duration>(nap, deadline - now));
    nap = std::min(nap * 2, std::chrono::microseconds(2000));
  }
}

}  // namespace flopmeter::detail
