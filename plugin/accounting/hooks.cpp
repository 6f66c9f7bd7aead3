// The plugin registry. Firing holds the registry's mutex while it calls the plugins: that is what delivers
// events to a plugin one at a time and in firing order, keeps on_microbatch free of heap allocation (no
// copy of the list), and guarantees that once a registration's reset() returns, its plugin is not called
// again. A plugin that calls back into the same hooks object from inside a hook finds the mutex held by its
// own thread: every entry point first asks whether this thread is firing this object (a chain of frames on
// the stack, no allocation) and then answers without locking (hooks.h, "Re-entry").

#include "flopmeter/hooks.h"

#include <memory>
#include <utility>
#include <vector>

#include "flopmeter/error.h"

namespace flopmeter {
namespace {

// The hooks objects firing on this thread, innermost first.
struct firing_frame {
  const hooks* owner;
  const firing_frame* outer;
};
thread_local const firing_frame* t_firing = nullptr;

bool firing_on_this_thread(const hooks* owner) {
  for (const firing_frame* f = t_firing; f != nullptr; f = f->outer) {
    if (f->owner == owner) return true;
  }
  return false;
}

// Marks `owner` as firing on this thread for its lifetime (under owner's lock).
class firing_scope {
 public:
  explicit firing_scope(const hooks* owner) : frame_{owner, t_firing} { t_firing = &frame_; }
  ~firing_scope() { t_firing = frame_.outer; }
  firing_scope(const firing_scope&) = delete;
  firing_scope& operator=(const firing_scope&) = delete;

 private:
  firing_frame frame_;
};

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

registration hooks::add(std::shared_ptr<plugin> p) {
  if (!p) throw error("hooks: cannot register a null plugin");
  if (firing_on_this_thread(this)) {
    throw error(
        "hooks: add() called from inside a plugin's hook of the same hooks object; add the plugin after "
        "the event returns");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  const std::uint64_t id = next_id_++;
  plugins_.emplace_back(id, std::move(p));
  return registration(this, id);
}

void hooks::remove(std::uint64_t id) noexcept {
  if (firing_on_this_thread(this)) {
    // From inside a hook: the list is being walked (and the plugin may be the one running), so the entry is
    // only marked; the firing skips it and takes it out when it ends.
    for (auto& entry : plugins_) {
      if (entry.first == id) entry.first = kRemovedId;
    }
    return;
  }
  std::shared_ptr<plugin> removed;  // released after the lock, so a plugin's destructor runs unlocked
  {
    std::lock_guard<std::mutex> lock(mutex_);
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
  if (firing_on_this_thread(this)) {
    ++reentrant_;  // this thread holds the lock
    return;
  }
  std::vector<std::shared_ptr<plugin>> released;  // destroyed after the lock is released
  std::lock_guard<std::mutex> lock(mutex_);
  {
    const firing_scope firing(this);
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
  if (firing_on_this_thread(this)) return live();  // this thread holds the lock
  std::lock_guard<std::mutex> lock(mutex_);
  return live();
}

std::uint64_t hooks::swallowed_exceptions() const {
  if (firing_on_this_thread(this)) return swallowed_;
  std::lock_guard<std::mutex> lock(mutex_);
  return swallowed_;
}

std::uint64_t hooks::reentrant_calls() const {
  if (firing_on_this_thread(this)) return reentrant_;
  std::lock_guard<std::mutex> lock(mutex_);
  return reentrant_;
}

}  // namespace flopmeter
