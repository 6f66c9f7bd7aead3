// A watchdog for tests of calls that used to deadlock: runs `body` on a thread of its own and ends the test
// binary (exit code 1, with a message on stderr) if it has not returned within `limit`, so that a regression
// fails ctest instead of hanging it. A thread stuck on a mutex cannot be cancelled; exiting is the only way on.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <thread>
#include <utility>

namespace flopmeter::testing {

template <class Body>
void returns_within(std::chrono::seconds limit, const char* what, Body body) {
  std::packaged_task<void()> task(std::move(body));
  std::future<void> done = task.get_future();
  std::thread runner(std::move(task));
  if (done.wait_for(limit) != std::future_status::ready) {
    std::fprintf(stderr, "FAILED: %s did not return within %lld s: it deadlocked\n", what,
                 static_cast<long long>(limit.count()));
    std::fflush(stderr);
    std::_Exit(1);
  }
  runner.join();
  done.get();  // rethrows what the body threw
}

}  // namespace flopmeter::testing
