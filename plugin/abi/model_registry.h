// plugin/abi/model_registry.h — internal (not installed): what a flopmeter_model handle names, and the registry
// of live model handles (c_api_model.cpp).
// Thread-safety: a model_state is immutable once registered; the registry is behind a mutex of its own.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "flopmeter/c_api.h"
#include "flopmeter/flop_model.h"
#include "flopmeter/model_spec.h"
#include "output/model_report.h"

namespace flopmeter::detail {

struct model_state {
  model_spec spec;
  training_regime regime;
  regime_coefficients coeffs;
  vision_geometry geometry;
  // The reports' entries made at registration (c_api_values.h): their keys and texts live as long as the
  // handle. The estimate's are those of zero counts in each scope (FLOPMETER_SCOPE_* as the index): an
  // estimate's keys and texts depend on the model, its regime and the scope only.
  report_entries coefficients_report;
  report_entries estimate_reports[2];

  // The coefficients of one micro-batch's counts: those of a batch without images or videos when it has none
  // (they differ only for a frozen decoder under a training vision side; training_regime in flop_model.h).
  const coefficients& of(const batch_counts& n) const {
    return n.items == 0 ? coeffs.without_items : coeffs.with_items;
  }
};

class model_registry {
 public:
  static model_registry& instance() {
    static model_registry* registry = new model_registry();  // never destroyed, as the plugin registry
    return *registry;
  }
  flopmeter_model* add(std::shared_ptr<const model_state> state) {
    std::lock_guard<std::mutex> lock(mutex_);
    next_ += 16;  // never 0 and never reused
    live_.emplace(next_, std::move(state));
    return reinterpret_cast<flopmeter_model*>(next_);
  }
  std::shared_ptr<const model_state> find(const flopmeter_model* handle) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = live_.find(reinterpret_cast<std::uintptr_t>(handle));
    return it == live_.end() ? nullptr : it->second;
  }
  bool remove(const flopmeter_model* handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_.erase(reinterpret_cast<std::uintptr_t>(handle)) == 1;
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::uintptr_t, std::shared_ptr<const model_state>> live_;
  std::uintptr_t next_ = 0x2000;
};

}  // namespace flopmeter::detail
