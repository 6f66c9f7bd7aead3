// plugin/tensor/copy_queue.h — internal: micro-batches whose index arrays are being copied from a device to
// the host, counted by the host counter once their copy has arrived. No LibTorch here: the tensor path
// (torch_path.cpp) gives it device events, the tests fake events that fire late, out of order or never.
//
// When entries are counted (the Python package's _device_queue.py keeps the same rules):
// - poll(), at every hook: the entries at the head whose event has fired, in order; the first one still in
//   flight stops it (one query when nothing has arrived: copies on one stream arrive in order);
// - drain(), at on_log and flush: every entry, since all belong to the interval that ends. An entry still in
//   flight is waited for by polling its event (fired() and a short sleep), so the wait is bounded: what has
//   not arrived `wait` after the drain began is given up (give_up: the caller counts a micro-batch that ran,
//   without counts) and never waited for again. An event that never fires costs one bounded wait, not a hang;
// - put() on a full queue (capacity entries): first counts what has arrived, then waits for the oldest entry
//   as a drain does (bounded likewise), so a host far ahead of its device waits for it there.
// Thread-safety: none; the tensor path calls it under its lock.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <utility>

namespace flopmeter::detail {

// Whether the copies recorded before it have arrived. fired() never blocks.
class arrival_event {
 public:
  virtual ~arrival_event() = default;
  virtual bool fired() = 0;
};

struct copy_queue_options {
  std::size_t capacity = 1024;                                    // entries held before put() waits for the oldest
  std::chrono::duration<double> wait = std::chrono::seconds(60);  // a drain's bound on copies in flight
  // The clock and the pause between polls (tests replace them to run without real time).
  std::function<std::chrono::steady_clock::time_point()> now = [] { return std::chrono::steady_clock::now(); };
  std::function<void(std::chrono::duration<double>)> sleep = [](std::chrono::duration<double> d) {
    std::this_thread::sleep_for(d);
  };
};

template <class Payload>
class copy_queue {
 public:
  using count_fn = std::function<void(Payload&)>;
  using give_up_fn = std::function<void(Payload&, std::chrono::duration<double> waited)>;

  copy_queue(count_fn count, give_up_fn give_up, copy_queue_options options = {})
      : count_(std::move(count)), give_up_(std::move(give_up)), options_(std::move(options)) {
    if (options_.capacity == 0) options_.capacity = 1;
  }

  std::size_t size() const { return entries_.size(); }
  std::size_t given_up() const { return given_up_; }

  void put(std::unique_ptr<arrival_event> event, Payload payload) {
    if (entries_.size() >= options_.capacity) {
      poll();
      if (entries_.size() >= options_.capacity) settle_oldest(options_.now() + wait_duration());
    }
    entries_.push_back(entry{std::move(event), std::move(payload)});
  }

  // Counts the entries at the head whose event has fired; returns how many.
  std::size_t poll() {
    std::size_t counted = 0;
    while (!entries_.empty() && entries_.front().event->fired()) {
      entry e = std::move(entries_.front());
      entries_.pop_front();
      count_(e.payload);
      ++counted;
    }
    return counted;
  }

  // Counts every entry, waiting up to options.wait in all for those in flight and giving up the rest; returns
  // how many were counted. Empty afterwards.
  std::size_t drain() {
    std::size_t counted = 0;
    const auto deadline = options_.now() + wait_duration();
    while (!entries_.empty()) counted += settle_oldest(deadline);
    return counted;
  }

 private:
  struct entry {
    std::unique_ptr<arrival_event> event;
    Payload payload;
  };

  std::chrono::steady_clock::duration wait_duration() const {
    return std::chrono::duration_cast<std::chrono::steady_clock::duration>(options_.wait);
  }

  // The oldest entry counted once its event fires, or given up when the deadline passes first; entries behind
  // it whose events fired (out of order) are counted meanwhile. Returns how many were counted.
  std::size_t settle_oldest(std::chrono::steady_clock::time_point deadline) {
    std::size_t counted = 0;
    std::chrono::duration<double> pause = std::chrono::microseconds(20);
    while (!entries_.front().event->fired()) {
      counted += count_fired_behind_head();
      if (options_.now() >= deadline) {
        entry e = std::move(entries_.front());
        entries_.pop_front();
        ++given_up_;
        give_up_(e.payload, options_.wait);
        return counted;
      }
      options_.sleep(pause);
      pause = std::min<std::chrono::duration<double>>(2 * pause, std::chrono::milliseconds(1));
    }
    entry e = std::move(entries_.front());
    entries_.pop_front();
    count_(e.payload);
    return counted + 1;
  }

  std::size_t count_fired_behind_head() {
    std::size_t counted = 0;
    for (auto it = entries_.begin() + 1; it != entries_.end();) {
      if (it->event->fired()) {
        entry e = std::move(*it);
        it = entries_.erase(it);
        count_(e.payload);
        ++counted;
      } else {
        ++it;
      }
    }
    return counted;
  }

  count_fn count_;
  give_up_fn give_up_;
  copy_queue_options options_;
  std::deque<entry> entries_;
  std::size_t given_up_ = 0;
};

}  // namespace flopmeter::detail
