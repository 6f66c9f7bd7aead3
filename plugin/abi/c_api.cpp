// The C ABI: a thin, exception-proof shell over the C++ throughput plugin.
#include "flopmeter/c_api.h"

#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "flopmeter/communicator.h"
#include "flopmeter/error.h"
#include "flopmeter/throughput.h"
#include "comm/env_gloo.h"
#include "output/json_line.h"

namespace {

// The C callback, settable after create (the record sink holds the slot, the handle sets it).
class callback_slot final : public flopmeter::sink {
 public:
  void set(flopmeter_metrics_callback callback, void* user) {
    std::lock_guard<std::mutex> lock(mutex_);
    callback_ = callback;
    user_ = user;
  }

 protected:
  void write_(const flopmeter::metrics_record& record) override {
    flopmeter_metrics_callback callback = nullptr;
    void* user = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      callback = callback_;
      user = user_;
    }
    if (callback != nullptr) callback(user, record.step, flopmeter::detail::to_json_line(record).c_str());
  }

 private:
  std::mutex mutex_;
  flopmeter_metrics_callback callback_ = nullptr;
  void* user_ = nullptr;
};

using flopmeter::collective_status;

void write_error(char* buffer, std::size_t size, const std::string& message) {
  if (buffer == nullptr || size == 0) return;
  const std::size_t n = std::min(size - 1, message.size());
  std::memcpy(buffer, message.data(), n);
  buffer[n] = '\0';
}

// Adapts the trainer's flopmeter_comm callbacks to the communicator interface.
class c_pending final : public flopmeter::pending_collective {
 public:
  c_pending(flopmeter_comm comm, void* handle) : comm_(comm), handle_(handle) {}
  ~c_pending() override {
    if (comm_.release != nullptr) comm_.release(comm_.user, handle_);
  }
  collective_status wait(std::chrono::milliseconds timeout) override {
    const int status = comm_.wait(comm_.user, handle_, static_cast<int64_t>(timeout.count()));
    if (status == 0) return collective_status::done;
    if (status == 1) return collective_status::pending;
    message_ = "the trainer's all-reduce callback reported failure (" + std::to_string(status) + ")";
    return collective_status::failed;
  }
  std::string error_message() const override { return message_; }

 private:
  flopmeter_comm comm_;
  void* handle_;
  std::string message_;
};

class c_communicator final : public flopmeter::communicator {
 public:
  explicit c_communicator(const flopmeter_comm& comm) : comm_(comm) {}
  int rank() const override { return comm_.rank; }
  int world_size() const override { return comm_.world_size; }
  std::string backend_name() const override { return "c-callbacks"; }
  std::unique_ptr<flopmeter::pending_collective> start_allreduce_sum(double* values, std::size_t count) override {
    void* handle = comm_.start_allreduce_sum(comm_.user, values, count);
    if (handle == nullptr) throw flopmeter::error("the trainer's all-reduce callback could not start the collective");
    return std::make_unique<c_pending>(comm_, handle);
  }

 private:
  flopmeter_comm comm_;
};

std::shared_ptr<flopmeter::communicator> communicator_from(const flopmeter_comm* comm) {
  if (comm == nullptr) return flopmeter::make_local_communicator();
  if (comm->struct_size < sizeof(flopmeter_comm)) throw flopmeter::error("flopmeter_comm.struct_size is too small");
  if (comm->start_allreduce_sum == nullptr || comm->wait == nullptr || comm->release == nullptr) {
    throw flopmeter::error("flopmeter_comm: start_allreduce_sum, wait and release must all be set");
  }
  if (comm->world_size < 1 || comm->rank < 0 || comm->rank >= comm->world_size) {
    throw flopmeter::error("flopmeter_comm: rank " + std::to_string(comm->rank) + " is outside [0, " +
                           std::to_string(comm->world_size) + ")");
  }
  return std::make_shared<c_communicator>(*comm);
}

}  // namespace

struct flopmeter_plugin {
  std::shared_ptr<flopmeter::throughput_plugin> plugin;
  std::shared_ptr<callback_slot> callback;
};

extern "C" {

uint32_t flopmeter_abi_version(void) { return FLOPMETER_C_ABI_VERSION; }

static flopmeter_plugin* create_with(const char* config_path, std::shared_ptr<flopmeter::communicator> comm) {
  auto handle = std::make_unique<flopmeter_plugin>();
  handle->callback = std::make_shared<callback_slot>();
  handle->plugin = flopmeter::create_throughput_plugin(config_path, std::move(comm), nullptr, {handle->callback});
  return handle.release();
}

flopmeter_plugin* flopmeter_create(const char* config_path, const flopmeter_comm* comm, char* error,
                                   size_t error_size) {
  try {
    if (config_path == nullptr) throw flopmeter::error("config_path is NULL");
    return create_with(config_path, communicator_from(comm));
  } catch (const std::exception& e) {
    write_error(error, error_size, e.what());
  } catch (...) {
    write_error(error, error_size, "unknown error");
  }
  return nullptr;
}

flopmeter_plugin* flopmeter_create_gloo_from_env(const char* config_path, int port_offset, char* error,
                                                 size_t error_size) {
  try {
    if (config_path == nullptr) throw flopmeter::error("config_path is NULL");
    return create_with(config_path, flopmeter::detail::make_env_gloo_communicator(port_offset));
  } catch (const std::exception& e) {
    write_error(error, error_size, e.what());
  } catch (...) {
    write_error(error, error_size, "unknown error");
  }
  return nullptr;
}

int flopmeter_set_metrics_callback(flopmeter_plugin* plugin, flopmeter_metrics_callback callback, void* user) {
  if (plugin == nullptr) return -1;
  plugin->callback->set(callback, user);
  return 0;
}

int flopmeter_on_microbatch(flopmeter_plugin* plugin, const flopmeter_microbatch* m) {
  if (plugin == nullptr || m == nullptr) return -1;
  if (m->struct_size < sizeof(flopmeter_microbatch)) return -2;
  flopmeter::microbatch_event e;
  e.document_lengths = {m->document_lengths, m->document_lengths ? m->num_document_lengths : 0};
  e.cu_seqlens = {m->cu_seqlens, m->cu_seqlens ? m->num_cu_seqlens : 0};
  e.positions = {m->positions, m->positions ? m->num_positions : 0};
  e.padding_tokens = m->padding_tokens;
  static_assert(sizeof(flopmeter_grid) == sizeof(flopmeter::image_grid), "grid layouts must match");
  e.image_grids = {reinterpret_cast<const flopmeter::image_grid*>(m->grids), m->grids ? m->num_grids : 0};
  e.samples = m->samples;
  if (m->has_loss) {
    e.loss_sum = m->loss_sum;
    e.label_tokens = m->label_tokens;
  }
  const std::uint64_t bad_before = plugin->plugin->health().bad_microbatches;
  plugin->plugin->on_microbatch(e);
  return plugin->plugin->health().bad_microbatches == bad_before ? 0 : -3;
}

int flopmeter_on_log(flopmeter_plugin* plugin, const flopmeter_log* l) {
  if (plugin == nullptr || l == nullptr) return -1;
  if (l->struct_size < sizeof(flopmeter_log)) return -2;
  flopmeter::log_event e;
  e.step = l->step;
  if (l->set_fields & FLOPMETER_LOG_LEARNING_RATE) e.learning_rate = l->learning_rate;
  if (l->set_fields & FLOPMETER_LOG_GRAD_NORM) e.grad_norm = l->grad_norm;
  if (l->set_fields & FLOPMETER_LOG_DATA_TIME) e.data_time = std::chrono::duration<double>(l->data_time_seconds);
  if (l->set_fields & FLOPMETER_LOG_FORWARD_BACKWARD_TIME) {
    e.forward_backward_time = std::chrono::duration<double>(l->forward_backward_time_seconds);
  }
  if (l->set_fields & FLOPMETER_LOG_PEAK_MEMORY) e.peak_memory_bytes = l->peak_memory_bytes;
  plugin->plugin->on_log(e);
  return 0;
}

int flopmeter_flush(flopmeter_plugin* plugin) {
  if (plugin == nullptr) return -1;
  plugin->plugin->flush();
  return 0;
}

void flopmeter_destroy(flopmeter_plugin* plugin) {
  if (plugin == nullptr) return;
  try {
    plugin->plugin->flush();
  } catch (...) {
  }
  delete plugin;
}

int flopmeter_health(const flopmeter_plugin* plugin, uint64_t out[5]) {
  if (plugin == nullptr || out == nullptr) return -1;
  const flopmeter::throughput_health h = plugin->plugin->health();
  out[0] = h.bad_microbatches;
  out[1] = h.failed_collectives;
  out[2] = h.skipped_intervals;
  out[3] = h.events_after_flush;
  out[4] = h.collectives_started;
  return 0;
}

}  // extern "C"
