// plugin/accounting/owned_mutex.h — internal: a mutex that knows whether the calling thread holds it.
//
// The plugins hold their mutex while they call out to code they do not own: the sinks (a C metrics callback
// among them), the trainer's logger, the clock, the communicator. If that code calls back into the same
// plugin on the same thread, locking again would deadlock the training loop (a std::mutex locked twice by one
// thread never returns). Every entry point asks held_by_this_thread() first and, when true, does not lock: it
// refuses the call (counted in health().reentrant_calls), or, for health(), reads the counters directly —
// safe, since this thread holds the lock and so nobody else can change them.
//
// Why the holder's id may be read relaxed: a thread only ever finds its own id in holder_ if it stored it
// itself and has not cleared it yet (it clears it before unlocking); no other thread stores that id. By
// read-coherence a thread sees its own latest store or a later one, so the answer is exact for the caller.
// Thread-safety: lock/unlock as std::mutex (BasicLockable: use it with std::lock_guard); held_by_this_thread()
// from any thread at any time.
#pragma once

#include <atomic>
#include <mutex>
#include <thread>

namespace flopmeter::detail {

class owned_mutex {
 public:
  void lock() {
    mutex_.lock();
    holder_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  }
  void unlock() {
    holder_.store(std::thread::id(), std::memory_order_relaxed);
    mutex_.unlock();
  }
  // True while the calling thread holds the lock (it is inside one of the owner's call-outs).
  bool held_by_this_thread() const noexcept {
    return holder_.load(std::memory_order_relaxed) == std::this_thread::get_id();
  }

 private:
  std::mutex mutex_;
  std::atomic<std::thread::id> holder_{};
};

}  // namespace flopmeter::detail
