// flopmeter through its tensor path; see tensor_meter.h.
#include "tensor_meter.h"

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <chrono>
#include <stdexcept>
#include <utility>

#include "flopmeter/error.h"
#include "flopmeter/torch.h"

namespace vlm {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

}  // namespace

std::unique_ptr<tensor_meter> tensor_meter::create(const std::string& plugin_config,
                                                   c10::intrusive_ptr<c10d::ProcessGroup> group, c10::Device device) {
  if (!group) throw std::runtime_error("tensor_meter: no process group");
  const auto start = clock_type::now();
  std::unique_ptr<tensor_meter> m(new tensor_meter());
  m->description_ = "tensor path over c10d:" + group->getBackendName() + ", counters on " + device.str();
  try {
    // The library's own path from a plugin file: its [sinks] (console, JSONL, TensorBoard, "{rank}") and every
    // setting, exactly as the C ABI path reads the same file. Its errors already name the file.
    m->meter_ = flopmeter::create_tensor_throughput(plugin_config, std::move(group), device);
  } catch (const flopmeter::error& e) {
    throw std::runtime_error(e.what());
  }
  m->setup_seconds_ = seconds_since(start);
  return m;
}

void tensor_meter::on_microbatch(const flopmeter::tensor_microbatch& batch) {
  const auto start = clock_type::now();
  meter_->on_microbatch(batch);
  event_seconds_ += seconds_since(start);
  ++event_calls_;
}

void tensor_meter::on_log(const flopmeter::log_event& log) {
  const auto start = clock_type::now();
  meter_->on_log(log);
  event_seconds_ += seconds_since(start);
  ++event_calls_;
}

void tensor_meter::flush() {
  const auto start = clock_type::now();
  meter_->flush();
  event_seconds_ += seconds_since(start);
  ++event_calls_;
}

flopmeter_health_counters tensor_meter::health() const {
  const flopmeter::throughput_health h = meter_->health();
  flopmeter_health_counters out{};
  out.struct_size = sizeof(out);
  out.bad_microbatches = h.bad_microbatches;
  out.failed_collectives = h.failed_collectives;
  out.skipped_intervals = h.skipped_intervals;
  out.events_after_flush = h.events_after_flush;
  out.collectives_started = h.collectives_started;
  out.out_of_step_intervals = h.out_of_step_intervals;
  out.dropped_records = h.dropped_records;
  out.reentrant_calls = h.reentrant_calls;
  return out;
}

}  // namespace vlm
