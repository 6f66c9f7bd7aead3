// tests/gloo_harness.h — runs N real c10d ProcessGroupGloo ranks as threads of one test process.
//
// The pattern of c10d's own ProcessGroupGlooTest: every rank gets its own ProcessGroupGloo over one shared
// in-process c10d::HashStore, bound to 127.0.0.1, so the collectives go through Gloo's real TCP transport
// (on LibTorch 2.x the Gloo backend is wrapped in a c10d::ProcessGroup, plugin/comm/c10d_compat.h).
// `run_gloo_ranks` constructs the groups (the Gloo rendezvous is itself collective, so all ranks construct
// concurrently), waits until every rank has its group, then calls `body(rank, group)` on each rank's thread.
// The body receives the only reference the harness keeps, so it may drop it to simulate a dead peer.
//
// Errors: an exception escaping a body (or a group's construction) is rethrown by run_gloo_ranks after all
// threads joined, as std::runtime_error naming the rank. GoogleTest assertions inside a body are recorded
// by GoogleTest itself (it is thread-safe on POSIX); an ASSERT_* only ends that rank's body. A run that has
// not finished within `deadline` aborts the process with a message naming the ranks still running, so a
// hung collective fails the test instead of hanging ctest.
// Side effect: SIGPIPE is ignored process-wide from the first call on (see run_gloo_ranks).
// Thread-safety: run_gloo_ranks may be called from any thread; concurrent runs use separate stores.
#pragma once

#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1  // the `torch` CMake target defines it; ProcessGroupGloo.hpp is empty without it
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "../plugin/comm/c10d_compat.h"  // LibTorch 2.x: ProcessGroupGloo is a Backend, wrapped in a ProcessGroup

namespace flopmeter_test {

struct gloo_run_options {
  // Gloo's timeout for the rendezvous and for each collective (ProcessGroupGloo::Options::timeout).
  std::chrono::milliseconds group_timeout = std::chrono::seconds(5);
  // The whole run, construction included; past it the process aborts with a message. Default 60 s.
  std::chrono::milliseconds deadline = std::chrono::seconds(60);
  // Gloo worker threads per rank. Default 1.
  int threads_per_rank = 1;
  // true (default): destroy the groups only after every body returned. false: hand the body the only
  // reference to its rank's group.
  bool keep_groups_until_all_done = true;
  // The store the groups rendezvous over (the "trainer's store"); null (default): a fresh HashStore.
  c10::intrusive_ptr<c10d::Store> store;
};

using gloo_rank_body = std::function<void(int rank, c10::intrusive_ptr<c10d::ProcessGroup> group)>;

inline std::string describe_exception(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const c10::Error& err) {
    return err.what_without_backtrace();
  } catch (const std::exception& err) {
    return err.what();
  } catch (...) {
    return "unknown non-standard exception";
  }
}

inline void run_gloo_ranks(int world, const gloo_rank_body& body, const gloo_run_options& options = {}) {
  if (world < 1) throw std::invalid_argument("run_gloo_ranks: world must be >= 1");
  // Gloo writes with writev(): a write to a peer that has closed its socket raises SIGPIPE, which would kill
  // the whole test process instead of failing one collective. Ignore it, as the Python interpreter does.
  std::signal(SIGPIPE, SIG_IGN);
  c10::intrusive_ptr<c10d::Store> store = options.store;
  if (!store) store = c10::make_intrusive<c10d::HashStore>();

  std::mutex mutex;
  std::condition_variable cv;
  int constructed = 0;  // ranks that have their group, or failed to get one
  bool construction_failed = false;
  std::vector<bool> finished(static_cast<std::size_t>(world), false);
  int finished_count = 0;
  int bodies_done = 0;
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(world));

  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(world));
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      const auto r = static_cast<std::size_t>(rank);
      try {
        c10::intrusive_ptr<c10d::ProcessGroup> group;
        try {
          auto gloo_options = c10d::ProcessGroupGloo::Options::create(options.group_timeout);
          gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
          gloo_options->threads = options.threads_per_rank;
          auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, gloo_options);
          group = flopmeter::c10d_compat::as_process_group(store, rank, world, std::move(gloo),
                                                           flopmeter::c10d_compat::kGloo, c10::DeviceType::CPU,
                                                           options.group_timeout);
        } catch (...) {
          std::lock_guard<std::mutex> lock(mutex);
          construction_failed = true;
          ++constructed;
          ++bodies_done;
          cv.notify_all();
          throw;
        }
        bool go = false;
        {
          std::unique_lock<std::mutex> lock(mutex);
          ++constructed;
          cv.notify_all();
          cv.wait(lock, [&] { return constructed == world; });
          go = !construction_failed;
        }
        if (go) {
          try {
            if (options.keep_groups_until_all_done) {
              body(rank, group);
            } else {
              body(rank, std::move(group));
            }
          } catch (...) {
            errors[r] = std::current_exception();
          }
        }
        std::unique_lock<std::mutex> lock(mutex);
        ++bodies_done;
        cv.notify_all();
        cv.wait(lock, [&] { return bodies_done == world; });
        // `group` (if still held) is destroyed here, after every body returned.
      } catch (...) {
        if (!errors[r]) errors[r] = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mutex);
      finished[r] = true;
      ++finished_count;
      cv.notify_all();
    });
  }

  {
    std::unique_lock<std::mutex> lock(mutex);
    if (!cv.wait_for(lock, options.deadline, [&] { return finished_count == world; })) {
      std::string running;
      for (int rank = 0; rank < world; ++rank) {
        if (!finished[static_cast<std::size_t>(rank)]) running += " " + std::to_string(rank);
      }
      std::fprintf(stderr, "run_gloo_ranks: ranks still running after %lld ms:%s; aborting\n",
                   static_cast<long long>(options.deadline.count()), running.c_str());
      std::fflush(stderr);
      std::abort();
    }
  }
  for (auto& thread : threads) thread.join();

  for (int rank = 0; rank < world; ++rank) {
    if (const auto& e = errors[static_cast<std::size_t>(rank)]) {
      throw std::runtime_error("run_gloo_ranks: rank " + std::to_string(rank) + " of " + std::to_string(world) +
                               " threw: " + describe_exception(e));
    }
  }
}

}  // namespace flopmeter_test
