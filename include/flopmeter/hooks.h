// flopmeter/hooks.h — the plugin interface and the registry a trainer fires its events into.
//
// A trainer owns one `hooks` object, registers plugins (the throughput plugin is the first) and calls
// `on_microbatch` for every micro-batch, `on_log` at each log step and `flush` once at the end.
// Ownership: `add` shares ownership of the plugin (shared_ptr) and returns a `registration`; destroying the
// registration (or calling reset()) unregisters the plugin. The hooks object must outlive registrations.
// Errors: hooks never throw into the training loop. A plugin's hook should not throw (an implementation may
// declare its overrides noexcept, as the throughput plugin does); the base hooks are deliberately not
// noexcept, so that `hooks` can catch anything a misbehaving plugin throws and count it
// (`swallowed_exceptions`) instead of the runtime calling std::terminate.
// Thread-safety: add/registration reset and firing may happen on different threads (an internal mutex
// guards the list and is held while plugins run); events to one plugin are delivered one at a time in the
// order they were fired, and once reset() returns the plugin is not called again.
// Re-entry: a plugin (or its sink) calling back into the same `hooks` object on the thread that is firing
// does not deadlock: a fired event is refused (delivered to nobody, counted in reentrant_calls()), reset()
// unregisters at once (the plugin is not called again, and is released when the firing ends), size() and
// the counters answer, and add() throws flopmeter::error. Other threads wait for the firing as usual.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "flopmeter/events.h"
#include "flopmeter/export.h"

namespace flopmeter FLOPMETER_EXPORT {

class plugin {
 public:
  virtual ~plugin() = default;
  // Not noexcept on purpose (see Errors above): overrides may add noexcept, and should not throw.
  virtual void on_microbatch(const microbatch_event& event) = 0;
  virtual void on_log(const log_event& event) = 0;
  // End of training: emit whatever is still deferred. Later events are ignored (and counted).
  virtual void flush() = 0;
};

class hooks;

namespace detail {
class owned_mutex;  // internal: a mutex that knows whether the calling thread holds it
}  // namespace detail

// RAII handle of one registration. Movable, not copyable.
class registration {
 public:
  registration() = default;
  registration(registration&& other) noexcept;
  registration& operator=(registration&& other) noexcept;
  registration(const registration&) = delete;
  registration& operator=(const registration&) = delete;
  ~registration();
  void reset() noexcept;  // unregisters now
  bool active() const noexcept { return owner_ != nullptr; }

 private:
  friend class hooks;
  registration(hooks* owner, std::uint64_t id) : owner_(owner), id_(id) {}
  hooks* owner_ = nullptr;
  std::uint64_t id_ = 0;
};

class hooks {
 public:
  hooks();
  ~hooks();
  hooks(const hooks&) = delete;
  hooks& operator=(const hooks&) = delete;

  [[nodiscard]] registration add(std::shared_ptr<plugin> p);

  void on_microbatch(const microbatch_event& event) noexcept;
  void on_log(const log_event& event) noexcept;
  void flush() noexcept;

  std::size_t size() const;
  std::uint64_t swallowed_exceptions() const;
  // Events fired from inside a plugin's hook of this object on the same thread, and refused (see Re-entry).
  std::uint64_t reentrant_calls() const;

 private:
  friend class registration;
  void remove(std::uint64_t id) noexcept;
  // Fires one event at every plugin (on_microbatch, on_log and flush share it): `call` is a captureless
  // function that forwards `event` to one plugin, so firing allocates nothing.
  void fire(void (*call)(plugin&, const void*), const void* event) noexcept;

  // Held while firing: a call that finds it held by its own thread comes from inside a plugin's hook.
  std::unique_ptr<detail::owned_mutex> mutex_;
  std::vector<std::pair<std::uint64_t, std::shared_ptr<plugin>>> plugins_;
  std::uint64_t next_id_ = 1;
  std::uint64_t swallowed_ = 0;
  std::uint64_t reentrant_ = 0;
};

}  // namespace FLOPMETER_EXPORT
