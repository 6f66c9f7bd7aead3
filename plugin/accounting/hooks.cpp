// The plugin registry. Firing holds the registry's mutex while it calls the plugins: that is what delivers
// events to a plugin one at a time and in firing order, keeps on_microbatch free of heap allocation (no
// copy of the list), and guarantees that once a registration's reset() returns, its plugin is not called
// again. The price: a plugin must not call back into the same hooks object from inside a hook.

#include "flopmeter/hooks.h"

#include <utility>

#include "flopmeter/error.h"

namespace flopmeter {

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
  std::lock_guard<std::mutex> lock(mutex_);
  const std::uint64_t id = next_id_++;
  plugins_.emplace_back(id, std::move(p));
  return registration(this, id);
}

void hooks::remove(std::uint64_t id) noexcept {
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

void hooks::on_microbatch(const microbatch_event& event) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& entry : plugins_) {
    try {
      entry.second->on_microbatch(event);
    } catch (...) {  // a plugin should not throw; one that does costs a count, not the run
      ++swallowed_;
    }
  }
}

void hooks::on_log(const log_event& event) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& entry : plugins_) {
    try {
      entry.second->on_log(event);
    } catch (...) {
      ++swallowed_;
    }
  }
}

void hooks::flush() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& entry : plugins_) {
    try {
      entry.second->flush();
    } catch (...) {
      ++swallowed_;
    }
  }
}

std::size_t hooks::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return plugins_.size();
}

std::uint64_t hooks::swallowed_exceptions() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return swallowed_;
}

}  // namespace flopmeter
