// The C ABI's record sink (record_slot.h).
#include "abi/record_slot.h"

#include "output/json_line.h"

namespace flopmeter::detail {

void record_slot::set_metrics_callback(flopmeter_metrics_callback callback, void* user) {
  std::lock_guard<std::mutex> lock(mutex_);
  metrics_callback_ = callback;
  metrics_user_ = user;
}

void record_slot::set_record_callback(flopmeter_record_callback callback, void* user) {
  std::lock_guard<std::mutex> lock(mutex_);
  record_callback_ = callback;
  record_user_ = user;
}

std::uint32_t record_slot::name_index(const std::string& name) {
  const auto [it, added] = index_.try_emplace(name, static_cast<std::uint32_t>(names_.size()));
  if (added) {
    names_.push_back(name);
    name_table_.push_back(names_.back().c_str());
  }
  return it->second;
}

void record_slot::write_(const metrics_record& record) {
  flopmeter_metrics_callback metrics_callback = nullptr;
  flopmeter_record_callback record_callback = nullptr;
  void* metrics_user = nullptr;
  void* record_user = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    metrics_callback = metrics_callback_;
    metrics_user = metrics_user_;
    record_callback = record_callback_;
    record_user = record_user_;
  }
  if (record_callback != nullptr) {
    record_names_.clear();
    record_values_.clear();
    for (const auto& [name, value] : record.values) {
      record_names_.push_back(name_index(name));
      record_values_.push_back(value);
    }
    flopmeter_record r{};
    r.struct_size = sizeof(flopmeter_record);
    r.step = record.step;
    r.num_values = record_values_.size();
    r.names = record_names_.data();
    r.values = record_values_.data();
    r.name_table = name_table_.data();
    r.num_names = name_table_.size();
    record_callback(record_user, &r);
  }
  if (metrics_callback != nullptr) metrics_callback(metrics_user, record.step, to_json_line(record).c_str());
}

}  // namespace flopmeter::detail
