// Hooks: RAII registration, moves, delivery order, swallowed exceptions, and concurrent firing.

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "flopmeter/error.h"
#include "flopmeter/hooks.h"
#include "support/returns_within.h"

namespace flopmeter {
namespace {

// Appends "<tag>:<event>" to a shared journal, so the order across plugins is visible too.
class recording_plugin : public plugin {
 public:
  recording_plugin(std::string tag, std::vector<std::string>* journal) : tag_(std::move(tag)), journal_(journal) {}
  void on_microbatch(const microbatch_event& event) noexcept override {
    journal_->push_back(tag_ + ":mb" + std::to_string(event.samples));
  }
  void on_log(const log_event& event) noexcept override {
    journal_->push_back(tag_ + ":log" + std::to_string(event.step));
  }
  void flush() noexcept override { journal_->push_back(tag_ + ":flush"); }

 private:
  std::string tag_;
  std::vector<std::string>* journal_;
};

// A misbehaving plugin: every hook throws.
class throwing_plugin : public plugin {
 public:
  void on_microbatch(const microbatch_event&) override { throw std::runtime_error("microbatch"); }
  void on_log(const log_event&) override { throw 42; }  // not even a std::exception
  void flush() override { throw error("flush"); }
};

microbatch_event microbatch(std::int64_t samples) {
  microbatch_event event;
  event.samples = samples;
  return event;
}

log_event log_at(std::int64_t step) {
  log_event event;
  event.step = step;
  return event;
}

TEST(Hooks, RegistrationUnregistersWhenDestroyed) {
  hooks h;
  std::vector<std::string> journal;
  {
    const registration r = h.add(std::make_shared<recording_plugin>("a", &journal));
    EXPECT_TRUE(r.active());
    EXPECT_EQ(h.size(), 1u);
    h.on_microbatch(microbatch(1));
  }
  EXPECT_EQ(h.size(), 0u);
  h.on_microbatch(microbatch(2));  // nobody listens any more
  EXPECT_EQ(journal, (std::vector<std::string>{"a:mb1"}));
}

TEST(Hooks, HooksShareOwnershipUntilReset) {
  hooks h;
  std::vector<std::string> journal;
  auto p = std::make_shared<recording_plugin>("a", &journal);
  const std::weak_ptr<recording_plugin> weak = p;
  registration r = h.add(std::move(p));
  EXPECT_FALSE(weak.expired());  // the hooks object keeps the plugin alive
  r.reset();
  EXPECT_FALSE(r.active());
  EXPECT_TRUE(weak.expired());
  r.reset();  // a second reset is harmless
  EXPECT_EQ(h.size(), 0u);
}

TEST(Hooks, MoveTransfersTheRegistration) {
  hooks h;
  std::vector<std::string> journal;
  registration a = h.add(std::make_shared<recording_plugin>("a", &journal));
  registration b(std::move(a));
  EXPECT_FALSE(a.active());  // NOLINT(bugprone-use-after-move): moved-from state is specified
  EXPECT_TRUE(b.active());
  EXPECT_EQ(h.size(), 1u);
  a.reset();  // resetting the moved-from handle must not unregister b's plugin
  EXPECT_EQ(h.size(), 1u);

  // Move-assigning onto an active handle unregisters what it held.
  registration c = h.add(std::make_shared<recording_plugin>("c", &journal));
  EXPECT_EQ(h.size(), 2u);
  c = std::move(b);
  EXPECT_EQ(h.size(), 1u);
  h.on_log(log_at(7));
  EXPECT_EQ(journal, (std::vector<std::string>{"a:log7"}));  // "a" survived, "c" is gone

  registration empty;
  EXPECT_FALSE(empty.active());
  c = std::move(empty);
  EXPECT_EQ(h.size(), 0u);
}

TEST(Hooks, EventsArriveInFiringOrderAndRegistrationOrder) {
  hooks h;
  std::vector<std::string> journal;
  const registration ra = h.add(std::make_shared<recording_plugin>("a", &journal));
  const registration rb = h.add(std::make_shared<recording_plugin>("b", &journal));
  h.on_microbatch(microbatch(1));
  h.on_microbatch(microbatch(2));
  h.on_log(log_at(10));
  h.flush();
  EXPECT_EQ(journal, (std::vector<std::string>{"a:mb1", "b:mb1", "a:mb2", "b:mb2", "a:log10", "b:log10",
                                               "a:flush", "b:flush"}));
  EXPECT_EQ(h.swallowed_exceptions(), 0u);
}

TEST(Hooks, RemovingOnePluginKeepsTheOthersInOrder) {
  hooks h;
  std::vector<std::string> journal;
  registration ra = h.add(std::make_shared<recording_plugin>("a", &journal));
  const registration rb = h.add(std::make_shared<recording_plugin>("b", &journal));
  const registration rc = h.add(std::make_shared<recording_plugin>("c", &journal));
  const registration rd = h.add(std::make_shared<recording_plugin>("d", &journal));
  ra.reset();  // the first: a swap-with-last removal would fire d before b
  h.on_log(log_at(1));
  EXPECT_EQ(journal, (std::vector<std::string>{"b:log1", "c:log1", "d:log1"}));
}

TEST(Hooks, ThrowingPluginIsSwallowedAndCounted) {
  hooks h;
  std::vector<std::string> journal;
  const registration bad = h.add(std::make_shared<throwing_plugin>());
  const registration good = h.add(std::make_shared<recording_plugin>("g", &journal));
  h.on_microbatch(microbatch(3));  // throws std::runtime_error
  h.on_log(log_at(4));             // throws an int
  h.flush();                       // throws flopmeter::error
  EXPECT_EQ(h.swallowed_exceptions(), 3u);
  // The plugin after the throwing one still got every event.
  EXPECT_EQ(journal, (std::vector<std::string>{"g:mb3", "g:log4", "g:flush"}));
}

TEST(Hooks, NullPluginIsRejected) {
  hooks h;
  EXPECT_THROW((void)h.add(nullptr), error);
  EXPECT_EQ(h.size(), 0u);
}

// Counts events without atomics and records whether two calls ever overlapped: hooks must deliver one at a
// time even when several threads fire.
class counting_plugin : public plugin {
 public:
  void on_microbatch(const microbatch_event& event) noexcept override {
    enter();
    samples_ += event.samples;  // plain, non-atomic: a data race if calls overlapped
    ++microbatches_;
    leave();
  }
  void on_log(const log_event&) noexcept override {
    enter();
    ++logs_;
    leave();
  }
  void flush() noexcept override {}

  std::int64_t samples_ = 0;
  std::int64_t microbatches_ = 0;
  std::int64_t logs_ = 0;
  std::atomic<bool> overlapped_{false};

 private:
  void enter() {
    if (inside_.exchange(true)) overlapped_ = true;
  }
  void leave() { inside_ = false; }
  std::atomic<bool> inside_{false};
};

TEST(Hooks, ConcurrentFiringIsSerialisedPerPlugin) {
  hooks h;
  auto counter = std::make_shared<counting_plugin>();
  const registration r = h.add(counter);
  constexpr int kPerThread = 20000;
  std::atomic<bool> stop{false};

  // Two threads fire; a third keeps adding and removing another plugin meanwhile.
  std::thread churn([&] {
    while (!stop) {
      registration temporary = h.add(std::make_shared<counting_plugin>());
      temporary.reset();
    }
  });
  std::thread first([&] {
    for (int i = 0; i < kPerThread; ++i) h.on_microbatch(microbatch(1));
  });
  std::thread second([&] {
    for (int i = 0; i < kPerThread; ++i) {
      h.on_microbatch(microbatch(2));
      if (i % 100 == 0) h.on_log(log_at(i));
    }
  });
  first.join();
  second.join();
  stop = true;
  churn.join();

  // 20000 micro-batches of 1 sample and 20000 of 2: 2 * 20000 events, 3 * 20000 samples; one log per 100.
  EXPECT_EQ(counter->microbatches_, 2 * kPerThread);
  EXPECT_EQ(counter->samples_, 3 * kPerThread);
  EXPECT_EQ(counter->logs_, kPerThread / 100);
  EXPECT_FALSE(counter->overlapped_);
  EXPECT_EQ(h.size(), 1u);
  EXPECT_EQ(h.swallowed_exceptions(), 0u);
}

// A plugin that, at its first on_log, calls back into the hooks object that is firing it (as a sink of a
// throughput plugin might): fires all three events, reads size(), tries add() and unregisters `victim`.
class calling_back_plugin : public plugin {
 public:
  hooks* owner = nullptr;
  registration* victim = nullptr;
  std::size_t size_before_reset = 0, size_after_reset = 0;
  std::uint64_t reentrant_seen = 0;
  bool add_threw = false;
  int logs = 0;

  void on_microbatch(const microbatch_event&) noexcept override {}
  void on_log(const log_event&) noexcept override {
    if (++logs != 1) return;
    owner->on_microbatch(microbatch(7));
    owner->on_log(log_at(99));
    owner->flush();
    reentrant_seen = owner->reentrant_calls();
    size_before_reset = owner->size();
    try {
      (void)owner->add(std::make_shared<throwing_plugin>());
    } catch (const error&) {
      add_threw = true;
    }
    victim->reset();
    size_after_reset = owner->size();
  }
  void flush() noexcept override {}
};

TEST(Hooks, APluginCallingBackIntoItsHooksIsAnsweredNotDeadlocked) {
  hooks h;
  std::vector<std::string> journal;
  auto caller = std::make_shared<calling_back_plugin>();
  const registration first = h.add(caller);
  registration second = h.add(std::make_shared<recording_plugin>("b", &journal));
  caller->owner = &h;
  caller->victim = &second;
  testing::returns_within(std::chrono::seconds(10), "hooks fired from inside a hook", [&] { h.on_log(log_at(1)); });
  // The three events fired from inside were refused: delivered to nobody (b's journal stays empty).
  EXPECT_EQ(caller->reentrant_seen, 3u);
  EXPECT_EQ(h.reentrant_calls(), 3u);
  EXPECT_TRUE(caller->add_threw);
  // Two plugins, then b unregistered from inside: it is not called again, not even by the firing under way
  // (it came after the caller), and it is gone once that firing ends.
  EXPECT_EQ(caller->size_before_reset, 2u);
  EXPECT_EQ(caller->size_after_reset, 1u);
  EXPECT_FALSE(second.active());
  EXPECT_EQ(h.size(), 1u);
  h.on_log(log_at(2));
  h.flush();
  EXPECT_TRUE(journal.empty()) << journal.front();
  EXPECT_EQ(caller->logs, 2);
  EXPECT_EQ(h.swallowed_exceptions(), 0u);
}

}  // namespace
}  // namespace flopmeter
