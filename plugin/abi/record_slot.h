// plugin/abi/record_slot.h — internal (not installed): the sink through which a C ABI plugin hands its records
// to the trainer's callbacks: flopmeter_record_callback (the values with indices into the plugin's names
// table, c_api_values.h) and the deprecated flopmeter_metrics_callback (the JSONL line).
// Thread-safety: set_* and write() may be called from any thread; the callbacks are called outside the slot's
// lock (a callback may set the callbacks again), and records are written one at a time by the plugin.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "flopmeter/c_api.h"
#include "flopmeter/sinks.h"

namespace flopmeter::detail {

class record_slot final : public sink {
 public:
  void set_metrics_callback(flopmeter_metrics_callback callback, void* user);
  void set_record_callback(flopmeter_record_callback callback, void* user);

 protected:
  void write_(const metrics_record& record) override;

 private:
  // The index of `name` in the names table, appended when new.
  std::uint32_t name_index(const std::string& name);

  std::mutex mutex_;  // the callbacks
  flopmeter_metrics_callback metrics_callback_ = nullptr;
  void* metrics_user_ = nullptr;
  flopmeter_record_callback record_callback_ = nullptr;
  void* record_user_ = nullptr;

  // Touched only by write_(), which the sink's own lock serialises.
  std::deque<std::string> names_;  // stable addresses: the strings live as long as the slot
  std::vector<const char*> name_table_;
  std::unordered_map<std::string, std::uint32_t> index_;
  std::vector<std::uint32_t> record_names_;
  std::vector<double> record_values_;
};

}  // namespace flopmeter::detail
