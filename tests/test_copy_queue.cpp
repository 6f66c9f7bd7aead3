// The tensor path's copy queue (tensor/copy_queue.h) on fake events: the order entries are counted in, what a
// poll and a drain count, back-pressure on a full queue, and a bounded wait for an event that fires late, out of
// order or never. A fake clock advances only when the queue sleeps, so the tests take no real time.
#include "tensor/copy_queue.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace flopmeter::detail {
namespace {

using clock_type = std::chrono::steady_clock;

// Fires once `polls` queries have been answered "no" (0: at once; never: < 0).
class fake_event final : public arrival_event {
 public:
  explicit fake_event(int polls_before_firing) : left_(polls_before_firing) {}
  bool fired() override {
    if (left_ < 0) return false;
    if (left_ == 0) return true;
    --left_;
    return false;
  }

 private:
  int left_;
};

struct harness {
  std::vector<int> counted;
  std::vector<int> given_up;
  std::vector<double> waits;
  clock_type::time_point now{};
  std::chrono::duration<double> slept{0};

  copy_queue<int> make(std::size_t capacity = 8, double wait_seconds = 1.0) {
    copy_queue_options o;
    o.capacity = capacity;
    o.wait = std::chrono::duration<double>(wait_seconds);
    o.now = [this] { return now; };
    o.sleep = [this](std::chrono::duration<double> d) {
      slept += d;
      now += std::chrono::duration_cast<clock_type::duration>(d);
    };
    return copy_queue<int>([this](int& id) { counted.push_back(id); },
                           [this](int& id, std::chrono::duration<double> w) {
                             given_up.push_back(id);
                             waits.push_back(w.count());
                           },
                           o);
  }
};

std::unique_ptr<arrival_event> fires_after(int polls) { return std::make_unique<fake_event>(polls); }
std::unique_ptr<arrival_event> never() { return std::make_unique<fake_event>(-1); }

TEST(copy_queue, a_poll_counts_the_arrived_head_in_order_and_stops_at_the_first_in_flight) {
  harness h;
  auto q = h.make();
  q.put(fires_after(0), 1);
  q.put(fires_after(0), 2);
  q.put(fires_after(5), 3);  // in flight
  q.put(fires_after(0), 4);  // arrived, behind one in flight: waits for the drain or its turn
  EXPECT_EQ(q.poll(), 2u);
  EXPECT_EQ(h.counted, (std::vector<int>{1, 2}));
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(h.slept.count(), 0.0);  // a poll never waits
}

TEST(copy_queue, a_drain_counts_every_entry_waiting_for_late_ones_and_counts_out_of_order_ones_meanwhile) {
  harness h;
  auto q = h.make();
  q.put(fires_after(3), 1);  // late: three polls say no
  q.put(fires_after(0), 2);  // arrived before the head: counted while the head is waited for
  q.put(fires_after(1), 3);
  EXPECT_EQ(q.drain(), 3u);
  EXPECT_EQ(q.size(), 0u);
  EXPECT_EQ(h.counted, (std::vector<int>{2, 3, 1}));
  EXPECT_TRUE(h.given_up.empty());
  EXPECT_GT(h.slept.count(), 0.0);
  EXPECT_LT(h.slept.count(), 1.0);  // well within the bound
}

TEST(copy_queue, an_event_that_never_fires_is_given_up_after_the_bound_and_never_waited_for_again) {
  harness h;
  auto q = h.make(8, 0.5);
  q.put(fires_after(0), 1);
  q.put(never(), 2);
  q.put(fires_after(2), 3);
  EXPECT_EQ(q.drain(), 2u);  // 1, then 3 (fired while 2 was waited for); 2 given up
  EXPECT_EQ(h.counted, (std::vector<int>{1, 3}));
  EXPECT_EQ(h.given_up, (std::vector<int>{2}));
  EXPECT_EQ(h.waits, (std::vector<double>{0.5}));
  EXPECT_EQ(q.given_up(), 1u);
  // The wait was bounded: the fake clock passed the 0.5 s bound by at most one pause (1 ms).
  EXPECT_GE(h.slept.count(), 0.5);
  EXPECT_LE(h.slept.count(), 0.5 + 1e-3);
  // Gone: the next drain has nothing to wait for.
  const auto before = h.slept;
  EXPECT_EQ(q.drain(), 0u);
  EXPECT_EQ(h.slept, before);
}

TEST(copy_queue, one_drain_waits_at_most_its_bound_in_all_however_many_never_fire) {
  harness h;
  auto q = h.make(8, 0.25);
  for (int i = 0; i < 5; ++i) q.put(never(), i);
  EXPECT_EQ(q.drain(), 0u);
  EXPECT_EQ(h.given_up, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_LE(h.slept.count(), 0.25 + 1e-3);  // one deadline for the whole drain, not one per entry
}

TEST(copy_queue, a_full_queue_counts_what_arrived_then_waits_for_its_oldest_before_taking_more) {
  harness h;
  auto q = h.make(2, 1.0);
  q.put(fires_after(4), 1);
  q.put(fires_after(0), 2);
  // Full: a poll counts nothing (the head is in flight), so the oldest is waited for; 2 is counted meanwhile.
  q.put(fires_after(0), 3);
  EXPECT_EQ(h.counted, (std::vector<int>{2, 1}));
  EXPECT_EQ(q.size(), 1u);
  EXPECT_GT(h.slept.count(), 0.0);
  // Full of arrived entries: the poll alone makes room, without a wait.
  q.put(fires_after(0), 4);
  const auto before = h.slept;
  q.put(fires_after(0), 5);
  EXPECT_EQ(h.slept, before);
  EXPECT_EQ(h.counted, (std::vector<int>{2, 1, 3, 4}));
  // Full with an oldest that never arrives: given up after the bound, then the new one is queued.
  auto r = h.make(1, 0.1);
  r.put(never(), 10);
  r.put(fires_after(0), 11);
  EXPECT_EQ(h.given_up, (std::vector<int>{10}));
  EXPECT_EQ(r.size(), 1u);
  EXPECT_EQ(r.poll(), 1u);
  EXPECT_EQ(h.counted.back(), 11);
}

}  // namespace
}  // namespace flopmeter::detail
