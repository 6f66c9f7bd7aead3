// The LibTorch tensor path: a micro-batch's tensors copied to the host and counted there by the host counter
// (see flopmeter/torch.h).
//
// On a device with events (CUDA), the index arrays are copied with non_blocking copies into pinned host memory
// on the tensors' current stream and a c10::Event is recorded after them; nothing waits. The copy queue
// (tensor/copy_queue.h) counts each entry once its event has fired: at the next hooks, and at on_log and flush
// for all of the interval's entries, waiting a bounded time for copies still in flight. c10::Event reaches the
// device through LibTorch's device guard, so this file needs no CUDA header and builds with a CPU-only LibTorch.
// CPU tensors are counted at once.
#include "flopmeter/torch.h"

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <atomic>
#include <cmath>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "comm/c10d_internal.h"
#include "flopmeter/c10d.h"
#include "flopmeter/error.h"
#include "accounting/owned_mutex.h"
#include "accounting/plugin_factory.h"  // check_layout_fits, make_emitting_sinks
#include "accounting/throughput_calls.h"
#include "tensor/copy_queue.h"

namespace flopmeter {
namespace {

// A micro-batch's arrays in host memory (pinned when copied from a device; complete once its event fired),
// and its host numbers.
struct host_batch {
  at::Tensor cu_seqlens;  // int64, or undefined
  at::Tensor positions;   // int64 or int32, or undefined
  at::Tensor grid_thw;    // int64 [items, 3], or undefined
  std::int64_t padding_tokens = 0;
  std::int64_t samples = 0;
  std::optional<double> loss_sum;
  std::optional<std::int64_t> label_tokens;
};

// The event recorded after a device's copies on its current stream.
class device_event final : public detail::arrival_event {
 public:
  explicit device_event(c10::Device device) : event_(device.type()) {
    const c10::impl::VirtualGuardImpl guard(device.type());
    event_.record(guard.getStream(device));
  }
  bool fired() override { return event_.query(); }

 private:
  c10::Event event_;
};

// `t` as `type` in host memory: a CPU tensor itself (converted and made contiguous when needed); a device
// tensor through a non_blocking copy into pinned memory (the conversion runs on the device first).
at::Tensor to_host(const at::Tensor& t, at::ScalarType type) {
  const at::Tensor source = t.scalar_type() == type ? t : t.to(type);
  if (source.is_cpu()) return source.contiguous();
  at::Tensor host = at::empty(source.sizes(), at::TensorOptions().dtype(type).pinned_memory(true));
  host.copy_(source, /*non_blocking=*/true);
  return host;
}

// The host-known facts of a tensor micro-batch, checked before anything is copied: throws flopmeter::error
// saying what is wrong. Returns the device of its tensors (CPU when it has none).
c10::Device check_tensors(const tensor_microbatch& b, bool has_vision) {
  const bool has_cu = b.cu_seqlens.defined() && b.cu_seqlens.numel() > 0;
  const bool has_positions = b.positions.defined() && b.positions.numel() > 0;
  const bool has_grids = b.grid_thw.defined() && b.grid_thw.numel() > 0;
  // A floating-point tensor would be truncated by the widening to int64 ([0, 2.5, 5] would count as [0, 2, 5]).
  const auto require_integers = [](const at::Tensor& t, const char* name) {
    if (!c10::isIntegralType(t.scalar_type(), /*includeBool=*/false)) {
      throw error(std::string(name) + " must have an integer dtype (got " +
                  std::string(c10::toString(t.scalar_type())) + ")");
    }
  };
  if (has_cu) require_integers(b.cu_seqlens, "cu_seqlens");
  if (has_positions) require_integers(b.positions, "positions");
  if (has_grids) require_integers(b.grid_thw, "grid_thw");
  if (has_cu && has_positions) throw error("a tensor micro-batch gives both cu_seqlens and positions");
  if (has_cu && b.cu_seqlens.dim() != 1) throw error("cu_seqlens must be 1-D");
  if (has_positions && b.positions.dim() != 1) throw error("positions must be 1-D");
  if (has_grids && (b.grid_thw.dim() != 2 || b.grid_thw.size(1) != 3)) {
    throw error("grid_thw must have shape [items, 3]");
  }
  if (has_grids && !has_vision) throw error("the batch has image grids but the model has no vision tower");
  if (b.padding_tokens < 0) throw error("padding_tokens must be >= 0 (got " + std::to_string(b.padding_tokens) + ")");
  if (b.samples < 0) throw error("samples must be >= 0 (got " + std::to_string(b.samples) + ")");
  const c10::Device device = has_cu          ? b.cu_seqlens.device()
                             : has_positions ? b.positions.device()
                             : has_grids     ? b.grid_thw.device()
                                             : c10::Device(c10::kCPU);
  if (has_grids && b.grid_thw.device() != device) {
    throw error("grid_thw is on " + b.grid_thw.device().str() + ", the batch's other tensor on " + device.str());
  }
  return device;
}

}  // namespace

class tensor_throughput::impl {
 public:
  impl(throughput_options options, c10::intrusive_ptr<c10d::ProcessGroup> group, c10::Device device,
       const c10d_options& checks)
      : has_vision_(geometry_of(options.model).has_vision),
        queue_([this](host_batch& b) { count(b); },
               [this](host_batch& b, std::chrono::duration<double> waited) { give_up(b, waited); }) {
    if (!group) throw error("tensor_throughput: the process group is null");
    (void)device;  // the batch tensors' device: every count is on the host, whichever it is
    detail::check_group_covers_job("tensor_throughput", group->getSize(), checks.job_world_size);
    plugin_ = throughput_plugin::create(std::move(options), make_c10d_communicator(std::move(group), checks));
  }

  void on_microbatch(const tensor_microbatch& batch) noexcept {
    if (refused_reentrant(microbatch_event{})) return;
    std::lock_guard<detail::owned_mutex> lock(mutex_);
    try {
      queue_.poll();
      const c10::Device device = check_tensors(batch, has_vision_);
      host_batch b;
      if (batch.cu_seqlens.defined() && batch.cu_seqlens.numel() > 0)
        b.cu_seqlens = to_host(batch.cu_seqlens, at::kLong);
      if (batch.positions.defined() && batch.positions.numel() > 0) {
        const at::ScalarType type = batch.positions.scalar_type() == at::kInt ? at::kInt : at::kLong;
        b.positions = to_host(batch.positions, type);
      }
      if (batch.grid_thw.defined() && batch.grid_thw.numel() > 0) b.grid_thw = to_host(batch.grid_thw, at::kLong);
      b.padding_tokens = batch.padding_tokens;
      b.samples = batch.samples;
      b.loss_sum = batch.loss_sum;
      b.label_tokens = batch.label_tokens;
      if (device.is_cpu()) {
        count(b);
      } else {
        queue_.put(std::make_unique<device_event>(device), std::move(b));
        queue_.poll();
      }
    } catch (const std::exception& e) {
      detail::throughput_calls::record_refused_microbatch(*plugin_, e.what());
    }
  }

  void on_microbatch(const microbatch_event& event) noexcept {
    if (refused_reentrant(event)) return;
    std::lock_guard<detail::owned_mutex> lock(mutex_);
    queue_.poll();
    plugin_->on_microbatch(event);
  }

  void on_log(const log_event& event) noexcept {
    if (refused_reentrant(event)) return;
    std::lock_guard<detail::owned_mutex> lock(mutex_);
    drain();  // the interval's micro-batches, before it ends
    plugin_->on_log(event);
  }

  void flush() noexcept {
    if (refused_reentrant(std::nullopt)) return;
    std::lock_guard<detail::owned_mutex> lock(mutex_);
    drain();
    plugin_->flush();
  }

  throughput_plugin& plugin() { return *plugin_; }

  // The plugin's counters, with the re-entrant calls refused here before reaching it. Safe from inside a
  // call-out: the plugin's health() does not lock there, and this one never takes mutex_.
  throughput_health health() const {
    throughput_health h = plugin_->health();
    h.reentrant_calls += refused_here_.load(std::memory_order_relaxed);
    return h;
  }

 private:
  // A hook called on the thread that holds mutex_, i.e. from inside one of our call-outs (the plugin's sinks,
  // logger, clock or collective, all of which run under it): locking again would deadlock. Refused: when the
  // plugin is the one calling out (the usual case: a sink calling back), the hook goes to it, which refuses,
  // counts and logs it (throughput.h, "Re-entry"); otherwise it is counted here, not logged.
  template <class Event>
  bool refused_reentrant(const Event& event) noexcept {
    if (!mutex_.held_by_this_thread()) return false;
    if (detail::throughput_calls::in_callout(*plugin_)) {
      if constexpr (std::is_same_v<Event, microbatch_event>) {
        plugin_->on_microbatch(event);
      } else if constexpr (std::is_same_v<Event, log_event>) {
        plugin_->on_log(event);
      } else {
        plugin_->flush();
      }
    } else {
      refused_here_.fetch_add(1, std::memory_order_relaxed);
    }
    return true;
  }

  void drain() noexcept {
    try {
      queue_.drain();
    } catch (const std::exception& e) {
      detail::throughput_calls::record_refused_microbatch(*plugin_, e.what());
    }
  }

  // The host counter, on arrays now in host memory: the same call, counts and refusals as a host micro-batch.
  void count(host_batch& b) {
    std::vector<image_grid> grids;
    if (b.grid_thw.defined()) {
      const at::Tensor g = b.grid_thw.contiguous();
      const std::int64_t* v = g.data_ptr<std::int64_t>();
      for (std::int64_t i = 0; i < g.size(0); ++i) grids.push_back(image_grid{v[3 * i], v[3 * i + 1], v[3 * i + 2]});
    }
    microbatch_event e;
    if (b.cu_seqlens.defined()) {
      e.cu_seqlens = {b.cu_seqlens.data_ptr<std::int64_t>(), static_cast<std::size_t>(b.cu_seqlens.numel())};
    }
    if (b.positions.defined() && b.positions.scalar_type() == at::kInt) {
      e.positions_int32 = {b.positions.data_ptr<std::int32_t>(), static_cast<std::size_t>(b.positions.numel())};
    } else if (b.positions.defined()) {
      e.positions = {b.positions.data_ptr<std::int64_t>(), static_cast<std::size_t>(b.positions.numel())};
    }
    e.grid_thw = grids;
    e.padding_tokens = b.padding_tokens;
    e.samples = b.samples;
    e.loss_sum = b.loss_sum;
    e.label_tokens = b.label_tokens;
    plugin_->on_microbatch(e);
  }

  void give_up(host_batch&, std::chrono::duration<double> waited) {
    const std::string why = "its copy to the host did not arrive within " + std::to_string(waited.count()) + " s";
    detail::throughput_calls::record_refused_microbatch(*plugin_, why.c_str());
  }

  bool has_vision_;
  std::shared_ptr<throughput_plugin> plugin_;
  detail::copy_queue<host_batch> queue_;
  detail::owned_mutex mutex_;  // held_by_this_thread(): inside one of our call-outs (see refused_reentrant)
  std::atomic<std::uint64_t> refused_here_{0};
};

std::shared_ptr<tensor_throughput> tensor_throughput::create(throughput_options options,
                                                             c10::intrusive_ptr<c10d::ProcessGroup> group,
                                                             c10::Device device, const c10d_options& checks) {
  return std::shared_ptr<tensor_throughput>(
      new tensor_throughput(std::make_unique<impl>(std::move(options), std::move(group), device, checks)));
}

std::shared_ptr<tensor_throughput> create_tensor_throughput(const std::string& config_path,
                                                            c10::intrusive_ptr<c10d::ProcessGroup> group,
                                                            c10::Device device, std::shared_ptr<spdlog::logger> logger,
                                                            std::vector<std::shared_ptr<sink>> extra_sinks,
                                                            const c10d_options& checks) {
  if (!group) throw error("create_tensor_throughput: the process group is null");
  detail::plugin_file file = detail::load_plugin_file(config_path);
  try {
    detail::check_layout_fits(file, group->getSize());
    std::vector<std::shared_ptr<sink>> sinks =
        detail::make_emitting_sinks(file, group->getRank(), group->getSize(), logger);
    throughput_options options = std::move(file.config.options);
    options.logger = logger;
    options.sinks = std::move(sinks);
    for (auto& s : extra_sinks) options.sinks.push_back(std::move(s));
    return tensor_throughput::create(std::move(options), std::move(group), device, checks);
  } catch (const error& e) {
    throw e.in_file(config_path);
  }
}

tensor_throughput::tensor_throughput(std::unique_ptr<impl> state) : impl_(std::move(state)) {}
tensor_throughput::~tensor_throughput() = default;

void tensor_throughput::on_microbatch(const tensor_microbatch& batch) noexcept { impl_->on_microbatch(batch); }
void tensor_throughput::on_microbatch(const microbatch_event& event) noexcept { impl_->on_microbatch(event); }
void tensor_throughput::on_log(const log_event& event) noexcept { impl_->on_log(event); }
void tensor_throughput::flush() noexcept { impl_->flush(); }
throughput_plugin& tensor_throughput::plugin() { return impl_->plugin(); }
throughput_health tensor_throughput::health() const { return impl_->health(); }

}  // namespace flopmeter
