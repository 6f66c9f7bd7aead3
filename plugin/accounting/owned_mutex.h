// plugin/accounting/owned_mutex.h — internal: a mutex that knows whether the calling thread holds it: the
// one way flopmeter detects re-entry (the throughput plugin, the tensor path and the hooks registry use it).
//
// The owners hold their mutex while they call out to code they do not own: the sinks (a C metrics callback
// among them), the trainer's logger, the clock, the communicator, the registered plugins. If that code calls
// back into the same owner on the same thread, locking again would deadlock the training loop (a std::mutex
// locked twice by one thread never returns). Every entry point asks held_by_this_thread() first and, when
// true, does not lock: it refuses the call (counted, e.g. in health().reentrant_calls), or, for a read such
// as health(), calls assume_held() and reads the counters directly — safe, since this thread holds the lock
// and so nobody else can change them.
//
// Why the holder's id may be read relaxed: a thread only ever finds its own id in holder_ if it stored it
// itself and has not cleared it yet (it clears it before unlocking); no other thread stores that id. By
// read-coherence a thread sees its own latest store or a later one, so the answer is exact for the caller.
// Thread-safety: lock/unlock as std::mutex (use it with owned_lock, which Clang's -Wthread-safety follows);
// held_by_this_thread() from any thread at any time. Annotated as a capability (thread_annotations.h).
// Every member is inline: inside libflopmeter.so they stay hidden (VISIBILITY_INLINES_HIDDEN), though hooks.h
// names the type.
#pragma once

#include <atomic>
#include <mutex>
#include <thread>

#include "accounting/thread_annotations.h"

namespace flopmeter::detail {

class FLOPMETER_CAPABILITY("mutex") owned_mutex {
 public:
  void lock() FLOPMETER_ACQUIRE() {
    mutex_.lock();
    holder_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  }
  void unlock() FLOPMETER_RELEASE() {
    holder_.store(std::thread::id(), std::memory_order_relaxed);
    mutex_.unlock();
  }
  // True while the calling thread holds the lock (it is inside one of the owner's call-outs).
  bool held_by_this_thread() const noexcept {
    return holder_.load(std::memory_order_relaxed) == std::this_thread::get_id();
  }
  // Tells the thread-safety analysis that the calling thread holds the lock; call it only where
  // held_by_this_thread() said so.
  void assume_held() const noexcept FLOPMETER_ASSERT_CAPABILITY(this) {}

 private:
  std::mutex mutex_;
  std::atomic<std::thread::id> holder_{};
};

// std::lock_guard for an owned_mutex, visible to the analysis (libstdc++'s lock_guard is not annotated).
class FLOPMETER_SCOPED_CAPABILITY owned_lock {
 public:
  explicit owned_lock(owned_mutex& mutex) FLOPMETER_ACQUIRE(mutex) : mutex_(mutex) { mutex_.lock(); }
  ~owned_lock() FLOPMETER_RELEASE() { mutex_.unlock(); }
  owned_lock(const owned_lock&) = delete;
  owned_lock& operator=(const owned_lock&) = delete;

 private:
  owned_mutex& mutex_;
};

}  // namespace flopmeter::detail
