// The C ABI: a thin, exception-proof shell over the C++ throughput plugin. This file marshals only: C structs
// to events and back, outcomes to return codes, handles to plugins. What a call does (counting, refusing after
// flush or from inside a callback) the plugin decides (accounting/throughput_calls.h); the trainer's
// flopmeter_comm callbacks are a communicator like any other (comm/c_callback_communicator.h).
//
// Handles: a flopmeter_plugin* is never dereferenced. Its value is a number from a counter that never
// repeats, looked up among the live plugins (a registry behind one mutex) on every call, so a handle that
// was destroyed, or never created, is refused with FLOPMETER_E_INVALID_HANDLE instead of being a
// use-after-free. A call holds a shared_ptr to the plugin while it runs: destroy on another thread removes the
// name at once, and the plugin is freed when the last call on it returns.
//
// Re-entry: the metrics callback (and the trainer's flopmeter_comm callbacks) run on the thread that called
// on_log, flush or destroy, while the plugin holds its lock. A call on the same plugin from there is answered
// without locking (throughput.h, "Re-entry"): health works; on_microbatch, on_log, flush and destroy return
// FLOPMETER_E_REENTRANT and are counted in reentrant_calls. destroy is refused because the plugin is on the
// stack below the callback; the trainer destroys it after the outer call returns.
#include "flopmeter/c_api.h"

#include <spdlog/logger.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "flopmeter/communicator.h"
#include "flopmeter/error.h"
#include "flopmeter/throughput.h"
#include "flopmeter/gloo_env.h"
#include "abi/abi_common.h"
#include "abi/abi_logger.h"
#include "abi/record_slot.h"
#include "accounting/derive.h"
#include "accounting/plugin_factory.h"
#include "accounting/throughput_calls.h"
#include "accounting/throughput_config.h"
#include "count/count_fields.h"
#include "comm/c_callback_communicator.h"
#include "output/logging.h"

static_assert(FLOPMETER_MAX_WORLD_SIZE == flopmeter::max_world_size, "c_api.h and communicator.h must agree");

namespace {

// The trainer's flopmeter_comm, checked for its version (struct_size) and copied into the comm floor's
// callback_collective (the same callbacks; their types are checked to be flopmeter_comm's); NULL: one process.
// flopmeter_comm in its first version (up to release), with start_allreduce_max and with start (0.3).
constexpr std::size_t kCommV1Size = offsetof(flopmeter_comm, release) + sizeof(void*);
constexpr std::size_t kCommMaxSize = offsetof(flopmeter_comm, start_allreduce_max) + sizeof(void*);
constexpr std::size_t kCommStartSize = offsetof(flopmeter_comm, start) + sizeof(void*);

std::shared_ptr<flopmeter::communicator> communicator_from(const flopmeter_comm* comm) {
  if (comm == nullptr) return flopmeter::make_local_communicator();
  if (comm->struct_size < kCommV1Size) {
    throw flopmeter::error("flopmeter_comm.struct_size is " + std::to_string(comm->struct_size) + ", below " +
                           std::to_string(kCommV1Size) + " (set it to sizeof(flopmeter_comm))");
  }
  flopmeter::detail::callback_collective callbacks;
  static_assert(std::is_same_v<decltype(callbacks.start_allreduce_sum), decltype(comm->start_allreduce_sum)> &&
                    std::is_same_v<decltype(callbacks.wait), decltype(comm->wait)> &&
                    std::is_same_v<decltype(callbacks.release), decltype(comm->release)>,
                "callback_collective's callbacks are flopmeter_comm's");
  callbacks.rank = comm->rank;
  callbacks.world_size = comm->world_size;
  callbacks.user = comm->user;
  callbacks.start_allreduce_sum = comm->start_allreduce_sum;
  callbacks.wait = comm->wait;
  callbacks.release = comm->release;
  static_assert(std::is_same_v<decltype(callbacks.start_allreduce_max), decltype(comm->start_allreduce_max)>,
                "callback_collective's callbacks are flopmeter_comm's");
  if (comm->struct_size >= kCommMaxSize) callbacks.start_allreduce_max = comm->start_allreduce_max;
  if (comm->struct_size >= kCommStartSize && comm->start != nullptr) {
    callbacks.start = [start = comm->start, user = comm->user](const flopmeter::detail::collective_request& r) {
      flopmeter_collective request{};
      request.struct_size = sizeof(request);
      request.kind = r.what == flopmeter::detail::collective_request::kind::sum_max ? FLOPMETER_COLLECTIVE_SUM_MAX
                                                                                    : FLOPMETER_COLLECTIVE_ALLGATHER;
      request.values = r.values;
      request.count = r.count;
      request.sum_count = r.sum_count;
      request.send = r.send;
      return start(user, &request);
    };
  }
  return flopmeter::detail::make_callback_communicator(callbacks, "flopmeter_comm");
}

using flopmeter::detail::hook_result;
using flopmeter::detail::microbatch_result;
using flopmeter::detail::throughput_calls;

// The smallest struct_size accepted for each struct: the end of its last field in its first version.
constexpr std::size_t kLogV1Size = offsetof(flopmeter_log, peak_memory_bytes) + sizeof(int64_t);
constexpr std::size_t kLogReservedMemorySize = offsetof(flopmeter_log, peak_reserved_memory_bytes) + sizeof(int64_t);
constexpr std::size_t kHealthV2Size = offsetof(flopmeter_health_counters, rejected_logs) + sizeof(uint64_t);

// What one handle names: the plugin, its callback slot, the logger they share, and the C ABI's own counters
// of the structs it refused before they reached the plugin (everything else, flushes and re-entry included,
// the plugin decides and counts: throughput_calls).
struct plugin_state {
  std::shared_ptr<flopmeter::throughput_plugin> plugin;
  std::shared_ptr<flopmeter::detail::record_slot> callback;
  std::shared_ptr<spdlog::logger> logger;
  std::atomic<std::uint64_t> refused_microbatches{0};
  std::atomic<std::uint64_t> refused_logs{0};
  flopmeter::detail::rate_limited_log microbatch_warning;  // the C ABI's refusals happen outside the plugin's lock
  flopmeter::detail::rate_limited_log log_warning;
};

// The live handles. Never destroyed (a process exit or dlclose must not run plugin destructors from static
// destruction): a handle the trainer never destroyed stays as it is, like memory it never freed.
class handle_registry {
 public:
  static handle_registry& instance() {
    static handle_registry* registry = new handle_registry();
    return *registry;
  }
  flopmeter_plugin* add(std::shared_ptr<plugin_state> state) {
    std::lock_guard<std::mutex> lock(mutex_);
    // Never 0 (NULL) and never reused; handles are 16 apart, so a small garbage value is not a live one.
    next_ += 16;
    live_.emplace(next_, std::move(state));
    return reinterpret_cast<flopmeter_plugin*>(next_);
  }
  std::shared_ptr<plugin_state> find(const flopmeter_plugin* handle) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = live_.find(reinterpret_cast<std::uintptr_t>(handle));
    return it == live_.end() ? nullptr : it->second;
  }
  std::shared_ptr<plugin_state> remove(const flopmeter_plugin* handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = live_.find(reinterpret_cast<std::uintptr_t>(handle));
    if (it == live_.end()) return nullptr;
    std::shared_ptr<plugin_state> state = std::move(it->second);
    live_.erase(it);
    return state;
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::uintptr_t, std::shared_ptr<plugin_state>> live_;
  std::uintptr_t next_ = 0x1000;
};

// Creates the plugin with the C ABI's logger (shared by the plugin and the C ABI's refusals) and its callback
// sink, and registers the handle.
template <class Create>
flopmeter_plugin* register_plugin(const Create& create) {
  auto state = std::make_shared<plugin_state>();
  state->callback = std::make_shared<flopmeter::detail::record_slot>();
  state->logger = flopmeter::detail::abi_logger();
  state->plugin = create(state->logger, state->callback);
  return handle_registry::instance().add(std::move(state));
}

flopmeter_plugin* create_with(const char* config_path, std::shared_ptr<flopmeter::communicator> comm) {
  return register_plugin([&](const std::shared_ptr<spdlog::logger>& logger, std::shared_ptr<flopmeter::sink> callback) {
    return flopmeter::create_throughput_plugin(config_path, std::move(comm), logger, {std::move(callback)});
  });
}

using flopmeter::detail::create_or_report;

// The C ABI's code for what became of an on_log or flush.
int status_of(hook_result result) noexcept {
  switch (result) {
    case hook_result::done: return FLOPMETER_OK;
    case hook_result::after_flush: return FLOPMETER_E_AFTER_FLUSH;  // counted in events_after_flush
    case hook_result::reentrant: return FLOPMETER_E_REENTRANT;      // counted in reentrant_calls and logged
  }
  return FLOPMETER_OK;
}

int refuse_microbatch(plugin_state& state, int code, const char* what) noexcept {
  state.refused_microbatches.fetch_add(1, std::memory_order_relaxed);
  state.microbatch_warning.warn(*state.logger, "flopmeter: micro-batch refused by the C ABI ({}): {}",
                                flopmeter_status_string(code), what);
  return code;
}

// flopmeter_on_microbatch(_ex): the code, and for every code but FLOPMETER_OK its reason in why[0..why_size)
// when `why` is given (write_abi_error's rules). The reason is formed only on a refusal: counting a valid
// micro-batch writes nothing and allocates nothing.
int on_microbatch(flopmeter_plugin* plugin, const flopmeter_microbatch* m, char* why, size_t why_size) noexcept {
  const auto refused = [&](int code, const char* reason) {
    flopmeter::detail::write_abi_error(why, why_size, reason);  // noexcept; NULL or size 0: nothing
    return code;
  };
  if (plugin == nullptr) return refused(FLOPMETER_E_NULL_ARGUMENT, "the plugin handle is NULL");
  const std::shared_ptr<plugin_state> state = handle_registry::instance().find(plugin);
  if (!state) return refused(FLOPMETER_E_INVALID_HANDLE, flopmeter_status_string(FLOPMETER_E_INVALID_HANDLE));
  flopmeter::microbatch_event e;
  const char* invalid = nullptr;
  const int code = flopmeter::detail::event_from_microbatch(m, e, &invalid);
  if (code != FLOPMETER_OK) return refused(refuse_microbatch(*state, code, invalid), invalid);
  std::string reason;
  switch (throughput_calls::record_microbatch(*state->plugin, e, why != nullptr ? &reason : nullptr)) {
    // Each outcome is counted by the plugin, a rejection and a re-entrant call also logged by it.
    case microbatch_result::counted: return FLOPMETER_OK;
    case microbatch_result::rejected:
      return refused(FLOPMETER_E_REJECTED, reason.empty() ? "invalid micro-batch" : reason.c_str());
    case microbatch_result::after_flush:
      return refused(FLOPMETER_E_AFTER_FLUSH, flopmeter_status_string(FLOPMETER_E_AFTER_FLUSH));
    case microbatch_result::reentrant:
      return refused(FLOPMETER_E_REENTRANT, flopmeter_status_string(FLOPMETER_E_REENTRANT));
  }
  return refused(FLOPMETER_E_REJECTED, "invalid micro-batch");
}

}  // namespace

flopmeter_plugin* flopmeter::detail::create_registered_plugin(const std::string& source_name, plugin_file file,
                                                              const flopmeter_comm* comm) {
  std::shared_ptr<flopmeter::communicator> communicator = communicator_from(comm);
  return register_plugin([&](const std::shared_ptr<spdlog::logger>& logger, std::shared_ptr<flopmeter::sink> callback) {
    return create_configured_plugin(source_name, std::move(file), std::move(communicator), logger,
                                    {std::move(callback)});
  });
}

extern "C" {

uint32_t flopmeter_abi_version(void) { return FLOPMETER_C_ABI_VERSION; }

flopmeter_plugin* flopmeter_create(const char* config_path, const flopmeter_comm* comm, char* error,
                                   size_t error_size) {
  return create_or_report(error, error_size, [&] {
    if (config_path == nullptr) throw flopmeter::error("config_path is NULL");
    return create_with(config_path, communicator_from(comm));
  });
}

// flopmeter's own Gloo group (gloo_env.h) on a TCPStore of its own at MASTER_PORT + port_offset, bounded by
// the rendezvous timeout: `timeout_ms` when > 0, else the plugin config's.
static flopmeter_plugin* create_gloo_from_env(const char* config_path, int port_offset, std::int64_t timeout_ms) {
  if (config_path == nullptr) throw flopmeter::error("config_path is NULL");
  if (port_offset <= 0) {
    throw flopmeter::error("flopmeter_create_gloo_from_env: port_offset must be > 0 so flopmeter's store does not "
                           "collide with the trainer's at MASTER_PORT (got " + std::to_string(port_offset) + ")");
  }
  if (timeout_ms < 0 || timeout_ms > flopmeter::setting_range::max_timeout_ms) {
    throw flopmeter::error("flopmeter_gloo_options.rendezvous_timeout_ms must be in [0, 3600000] (got " +
                           std::to_string(timeout_ms) + "; 0 takes the plugin config's)");
  }
  flopmeter::detail::plugin_file config = flopmeter::detail::load_plugin_file(config_path);
  flopmeter::gloo_env_options gloo;
  gloo.start_store_server = true;
  gloo.store_port_offset = port_offset;
  gloo.timeout = timeout_ms > 0 ? std::chrono::milliseconds(timeout_ms) : config.config.rendezvous_timeout;
  gloo.allreduce = config.config.small_allreduce;
  auto communicator = flopmeter::make_gloo_communicator_from_env(gloo);
  return register_plugin([&](const std::shared_ptr<spdlog::logger>& logger, std::shared_ptr<flopmeter::sink> callback) {
    return flopmeter::detail::create_configured_plugin(config_path, std::move(config), std::move(communicator), logger,
                                                       {std::move(callback)});
  });
}

flopmeter_plugin* flopmeter_create_gloo_from_env(const char* config_path, int port_offset, char* error,
                                                 size_t error_size) {
  return create_or_report(error, error_size, [&] { return create_gloo_from_env(config_path, port_offset, 0); });
}

flopmeter_plugin* flopmeter_create_gloo_from_env_with(const char* config_path, const flopmeter_gloo_options* options,
                                                      char* error, size_t error_size) {
  return create_or_report(error, error_size, [&] {
    if (options == nullptr) throw flopmeter::error("flopmeter_create_gloo_from_env_with: options is NULL");
    if (options->struct_size < sizeof(flopmeter_gloo_options)) {
      throw flopmeter::error("flopmeter_gloo_options.struct_size is too small (" +
                             std::to_string(options->struct_size) + " < " +
                             std::to_string(sizeof(flopmeter_gloo_options)) + ")");
    }
    return create_gloo_from_env(config_path, options->port_offset, options->rendezvous_timeout_ms);
  });
}

int flopmeter_set_metrics_callback(flopmeter_plugin* plugin, flopmeter_metrics_callback callback, void* user) {
  if (plugin == nullptr) return FLOPMETER_E_NULL_ARGUMENT;
  const std::shared_ptr<plugin_state> state = handle_registry::instance().find(plugin);
  if (!state) return FLOPMETER_E_INVALID_HANDLE;
  state->callback->set_metrics_callback(callback, user);
  return FLOPMETER_OK;
}

int flopmeter_set_record_callback(flopmeter_plugin* plugin, flopmeter_record_callback callback, void* user) {
  if (plugin == nullptr) return FLOPMETER_E_NULL_ARGUMENT;
  const std::shared_ptr<plugin_state> state = handle_registry::instance().find(plugin);
  if (!state) return FLOPMETER_E_INVALID_HANDLE;
  state->callback->set_record_callback(callback, user);
  return FLOPMETER_OK;
}

int flopmeter_on_microbatch(flopmeter_plugin* plugin, const flopmeter_microbatch* m) {
  return on_microbatch(plugin, m, nullptr, 0);
}

int flopmeter_on_microbatch_ex(flopmeter_plugin* plugin, const flopmeter_microbatch* m, char* why, size_t why_size) {
  return on_microbatch(plugin, m, why, why_size);
}

int flopmeter_on_log(flopmeter_plugin* plugin, const flopmeter_log* l) {
  if (plugin == nullptr) return FLOPMETER_E_NULL_ARGUMENT;
  const std::shared_ptr<plugin_state> state = handle_registry::instance().find(plugin);
  if (!state) return FLOPMETER_E_INVALID_HANDLE;
  const char* refused = nullptr;
  int code = FLOPMETER_OK;
  if (l == nullptr) {
    refused = "the flopmeter_log pointer is NULL";
    code = FLOPMETER_E_NULL_ARGUMENT;
  } else if (l->struct_size < kLogV1Size) {
    refused = "flopmeter_log.struct_size is below sizeof(flopmeter_log) of ABI version 1";
    code = FLOPMETER_E_STRUCT_SIZE;
  }
  if (refused != nullptr) {
    state->refused_logs.fetch_add(1, std::memory_order_relaxed);
    state->log_warning.warn(*state->logger,
                            "flopmeter: log refused by the C ABI ({}): {}; this rank's collective "
                            "for it is not issued",
                            flopmeter_status_string(code), refused);
    return code;
  }
  flopmeter::log_event e;
  e.step = l->step;
  if (l->set_fields & FLOPMETER_LOG_LEARNING_RATE) e.learning_rate = l->learning_rate;
  if (l->set_fields & FLOPMETER_LOG_GRAD_NORM) e.grad_norm = l->grad_norm;
  if (l->set_fields & FLOPMETER_LOG_DATA_TIME) e.data_time = std::chrono::duration<double>(l->data_time_seconds);
  if (l->set_fields & FLOPMETER_LOG_FORWARD_BACKWARD_TIME) {
    e.forward_backward_time = std::chrono::duration<double>(l->forward_backward_time_seconds);
  }
  if (l->set_fields & FLOPMETER_LOG_PEAK_MEMORY) e.peak_memory_bytes = l->peak_memory_bytes;
  if ((l->set_fields & FLOPMETER_LOG_PEAK_RESERVED_MEMORY) && l->struct_size >= kLogReservedMemorySize) {
    e.peak_reserved_memory_bytes = l->peak_reserved_memory_bytes;
  }
  return status_of(throughput_calls::record_log(*state->plugin, e));
}

int flopmeter_flush(flopmeter_plugin* plugin) {
  if (plugin == nullptr) return FLOPMETER_E_NULL_ARGUMENT;
  const std::shared_ptr<plugin_state> state = handle_registry::instance().find(plugin);
  if (!state) return FLOPMETER_E_INVALID_HANDLE;
  return status_of(throughput_calls::record_flush(*state->plugin));
}

int flopmeter_destroy(flopmeter_plugin* plugin) {
  if (plugin == nullptr) return FLOPMETER_OK;
  {
    const std::shared_ptr<plugin_state> found = handle_registry::instance().find(plugin);
    if (!found) return FLOPMETER_E_INVALID_HANDLE;
    // Flushed while the handle is still live, so that the callback of the last record can read
    // flopmeter_health (a call racing this one on another thread meets a flushed plugin: AFTER_FLUSH).
    // Bounded by the collective timeout. From inside this plugin's own callback the plugin refuses the flush
    // (counted in reentrant_calls, logged): it is on the stack below, so the handle stays live.
    if (throughput_calls::record_flush(*found->plugin, "flopmeter_destroy") == hook_result::reentrant) {
      return FLOPMETER_E_REENTRANT;
    }
  }
  std::shared_ptr<plugin_state> state = handle_registry::instance().remove(plugin);
  if (!state) return FLOPMETER_E_INVALID_HANDLE;  // destroyed by another thread since the lookup
  return FLOPMETER_OK;  // the plugin is freed here, or when a call racing this one returns
}

int flopmeter_health(const flopmeter_plugin* plugin, flopmeter_health_counters* out) {
  if (plugin == nullptr || out == nullptr) return FLOPMETER_E_NULL_ARGUMENT;
  const std::shared_ptr<plugin_state> state = handle_registry::instance().find(plugin);
  if (!state) return FLOPMETER_E_INVALID_HANDLE;
  if (out->struct_size < kHealthV2Size) return FLOPMETER_E_STRUCT_SIZE;
  const flopmeter::throughput_health h = state->plugin->health();
  out->bad_microbatches = h.bad_microbatches + state->refused_microbatches.load(std::memory_order_relaxed);
  out->failed_collectives = h.failed_collectives;
  out->skipped_intervals = h.skipped_intervals;
  out->events_after_flush = h.events_after_flush;
  out->collectives_started = h.collectives_started;
  out->rejected_logs = state->refused_logs.load(std::memory_order_relaxed);
  // Fields appended after the first version-2 layout: written only when the caller's struct has them.
  const auto covers = [&](std::size_t offset) { return out->struct_size >= offset + sizeof(uint64_t); };
  if (covers(offsetof(flopmeter_health_counters, out_of_step_intervals))) {
    out->out_of_step_intervals = h.out_of_step_intervals;
  }
  if (covers(offsetof(flopmeter_health_counters, dropped_records))) out->dropped_records = h.dropped_records;
  if (covers(offsetof(flopmeter_health_counters, reentrant_calls))) {
    out->reentrant_calls = h.reentrant_calls;
  }
  if (covers(offsetof(flopmeter_health_counters, config_mismatch_intervals))) {
    out->config_mismatch_intervals = h.config_mismatch_intervals;
  }
  return FLOPMETER_OK;
}

flopmeter_plugin* flopmeter_create_from_text(const char* toml_text, size_t length, const char* source_name,
                                             const char* base_dir, const flopmeter_comm* comm, char* error,
                                             size_t error_size) {
  return create_or_report(error, error_size, [&] {
    if (toml_text == nullptr && length > 0) throw flopmeter::error("toml_text is NULL with a non-zero length");
    const std::string name = source_name != nullptr && *source_name != '\0' ? source_name : "<text>";
    return flopmeter::detail::create_registered_plugin(
        name,
        flopmeter::detail::parse_plugin_file(std::string(toml_text != nullptr ? toml_text : "", length), name,
                                             base_dir != nullptr ? base_dir : ""),
        comm);
  });
}

flopmeter_model* flopmeter_plugin_model(const flopmeter_plugin* plugin, char* error, size_t error_size) {
  return create_or_report(error, error_size, [&]() -> flopmeter_model* {
    if (plugin == nullptr) throw flopmeter::error("the plugin handle is NULL");
    const std::shared_ptr<plugin_state> state = handle_registry::instance().find(plugin);
    if (!state) throw flopmeter::error("not a live plugin (destroyed already, or never created)");
    return flopmeter::detail::register_model(state->plugin->model(), state->plugin->training());
  });
}

const char* flopmeter_status_string(int code) {
  switch (code) {
    case FLOPMETER_OK: return "FLOPMETER_OK: done";
    case FLOPMETER_E_NULL_ARGUMENT: return "FLOPMETER_E_NULL_ARGUMENT: the plugin handle or a required pointer is NULL";
    case FLOPMETER_E_STRUCT_SIZE: return "FLOPMETER_E_STRUCT_SIZE: struct_size is below the struct's first version";
    case FLOPMETER_E_REJECTED: return "FLOPMETER_E_REJECTED: an invalid micro-batch description, not counted";
    case FLOPMETER_E_INVALID_HANDLE:
      return "FLOPMETER_E_INVALID_HANDLE: not a live plugin (destroyed already, or never created)";
    case FLOPMETER_E_AFTER_FLUSH: return "FLOPMETER_E_AFTER_FLUSH: an event after flush, ignored";
    case FLOPMETER_E_REENTRANT:
      return "FLOPMETER_E_REENTRANT: called from inside the same plugin's callback on the emitting thread, refused "
             "(call it after the outer call returns)";
    default: return "unknown flopmeter return code";
  }
}

}  // extern "C"
