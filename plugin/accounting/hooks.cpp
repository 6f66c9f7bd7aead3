// The plugin registry. Firing holds the registry's mutex while it calls the plugins: that is what delivers
// events to a plugin one at a time and in firing order, keeps on_microbatch free of heap allocation (no
// copy of the list), and guarantees that once a registration's reset() returns, its plugin is not called
// again. A plugin that calls back into the same hooks object from inside a hook finds the mutex held by its
// own thread: every entry point first asks the mutex whether this thread holds it (owned_mutex.h, the one
// re-entry check of the library; no allocation) and then answers without locking (hooks.h, "Re-entry").

#include "flopmeter/hooks.h"

#include <memory>
#include <utility>
#include <vector>

#include "flopmeter/error.h"
#include "accounting/owned_mutex.h"

namespace flopmeter {
namespace {

// An entry reset() from inside a firing keeps its place with id 0 (no longer called) until the firing ends;
// then it is taken out into `released`, which the caller destroys after unlocking.
constexpr std::uint64_t kRemovedId = 0;

using plugin_list = std::vector<std::pair<std::uint64_t, std::shared_ptr<plugin>>>;

void take_out_removed(plugin_list& plugins, std::vector<std::shared_ptr<plugin>>& released) {
  for (auto it = plugins.begin(); it != plugins.end();) {
    if (it->first == kRemovedId) {
      try {
        released.push_back(std::move(it->second));
      } catch (...) {
        it->second.reset();  // out of memory: released here, under the lock, rather than not at all
      }
      it = plugins.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace

registration::registration(registration&& other) noexcept : owner_(other.owner_), id_(other.id_) {
  other.owner_ = nullptr;
  other.id_ = 0;
}

registration& registration::operator=(registration&& other) noexcept {
  if (this != &other) {
    reset();
    owner_ = other.owner_;
    id_ = other.id_;
    other.owner_ = nullptr;
    other.id_ = 0;
  }
  return *this;
}

registration::~registration() { reset(); }

void registration::reset() noexcept {
  if (owner_ != nullptr) owner_->remove(id_);
  owner_ = nullptr;
  id_ = 0;
}

hooks::hooks() : mutex_(std::make_unique<detail::owned_mutex>()) {}
hooks::~hooks() = default;

registration hooks::add(std::shared_ptr<plugin> p) {
  if (!p) throw error("hooks: cannot register a null plugin");
  if (mutex_->held_by_this_thread()) {
    throw error(
        "hooks: add() called from inside a plugin's hook of the same hooks object; add the plugin after "
        "the event returns");
  }
  const detail::owned_lock lock(*mutex_);
  const std::uint64_t id = next_id_++;
  plugins_.emplace_back(id, std::move(p));
  return registration(this, id);
}

void hooks::remove(std::uint64_t id) noexcept {
  if (mutex_->held_by_this_thread()) {
    // From inside a hook: the list is being walked (and the plugin may be the one running), so the entry is
    // only marked; the firing skips it and takes it out when it ends.
    for (auto& entry : plugins_) {
      if (entry.first == id) entry.first = kRemovedId;
    }
    return;
  }
  std::shared_ptr<plugin> removed;  // released after the lock, so a plugin's destructor runs unlocked
  {
    const detail::owned_lock lock(*mutex_);
    for (auto it = plugins_.begin(); it != plugins_.end(); ++it) {
      if (it->first == id) {
        removed = std::move(it->second);
        plugins_.erase(it);  // keeps the order of the others: registration order is firing order
        break;
      }
    }
  }
}

// Calls `call(plugin)` on every registered plugin in registration order, under the lock (one event at a time,
// in order). A call from inside a plugin's hook on this thread is refused and counted (the lock is this
// thread's already); a plugin that throws costs a count, not the run; plugins removed while firing are
// destroyed after the lock is released.
void hooks::fire(void (*call)(plugin&, const void*), const void* event) noexcept {
  if (mutex_->held_by_this_thread()) {
    ++reentrant_;  // this thread holds the lock
    return;
  }
  std::vector<std::shared_ptr<plugin>> released;  // destroyed after the lock is released
  const detail::owned_lock lock(*mutex_);
  {
    for (auto& entry : plugins_) {
      if (entry.first == kRemovedId) continue;
      try {
        call(*entry.second, event);
      } catch (...) {  // a plugin should not throw; one that does costs a count, not the run
        ++swallowed_;
      }
    }
  }
  take_out_removed(plugins_, released);
}

void hooks::on_microbatch(const microbatch_event& event) noexcept {
  fire([](plugin& p, const void* e) { p.on_microbatch(*static_cast<const microbatch_event*>(e)); }, &event);
}

void hooks::on_log(const log_event& event) noexcept {
  fire([](plugin& p, const void* e) { p.on_log(*static_cast<const log_event*>(e)); }, &event);
}

void hooks::flush() noexcept {
  fire([](plugin& p, const void*) { p.flush(); }, nullptr);
}

std::size_t hooks::size() const {
  const auto live = [this] {
    std::size_t n = 0;
    for (const auto& entry : plugins_) n += entry.first != kRemovedId ? 1 : 0;
    return n;
  };
  if (mutex_->held_by_this_thread()) return live();  // this thread holds the lock
  const detail::owned_lock lock(*mutex_);
  return live();
}

std::uint64_t hooks::swallowed_exceptions() const {
  if (mutex_->held_by_this_thread()) return swallowed_;
  const detail::owned_lock lock(*mutex_);
  return swallowed_;
}

std::uint64_t hooks::reentrant_calls() const {
  if (mutex_->held_by_this_thread()) return reentrant_;
  const detail::owned_lock lock(*mutex_);
  return reentrant_;
}

}  // namespace flopmeter
