// dlopen/dlsym loading of flopmeter's C ABI, with the time spent inside its calls.
#include "flopmeter_loader.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

namespace vlm {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Adds the duration of `call()` to `total` and returns its result.
template <class F>
auto timed(double& total, F&& call) {
  const double start = now_seconds();
  auto result = call();
  total += now_seconds() - start;
  return result;
}

template <class Fn>
void resolve(void* handle, const std::string& path, const char* name, Fn& out) {
  dlerror();
  void* symbol = dlsym(handle, name);
  if (symbol == nullptr) {
    const char* why = dlerror();
    throw std::runtime_error("flopmeter library " + path + " lacks the C ABI symbol " + name +
                             (why ? std::string(": ") + why : std::string()));
  }
  out = reinterpret_cast<Fn>(symbol);
}

}  // namespace

std::unique_ptr<plugin_library> plugin_library::load(const std::string& path) {
  std::unique_ptr<plugin_library> lib(new plugin_library());
  lib->path_ = path;
  lib->handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib->handle_ == nullptr) {
    const char* why = dlerror();
    throw std::runtime_error("cannot dlopen flopmeter library " + path + ": " + (why ? why : "unknown error"));
  }
  resolve(lib->handle_, path, "flopmeter_abi_version", lib->abi_version_fn_);
  lib->abi_version_ = lib->abi_version_fn_();
  if (lib->abi_version_ != FLOPMETER_C_ABI_VERSION) {
    throw std::runtime_error("flopmeter library " + path + " has C ABI version " + std::to_string(lib->abi_version_) +
                             "; this trainer was built for version " + std::to_string(FLOPMETER_C_ABI_VERSION));
  }
  resolve(lib->handle_, path, "flopmeter_create", lib->create_fn_);
  resolve(lib->handle_, path, "flopmeter_create_gloo_from_env", lib->create_gloo_fn_);
  resolve(lib->handle_, path, "flopmeter_on_microbatch", lib->on_microbatch_fn_);
  resolve(lib->handle_, path, "flopmeter_on_log", lib->on_log_fn_);
  resolve(lib->handle_, path, "flopmeter_flush", lib->flush_fn_);
  resolve(lib->handle_, path, "flopmeter_destroy", lib->destroy_fn_);
  resolve(lib->handle_, path, "flopmeter_health", lib->health_fn_);
  return lib;
}

plugin_library::~plugin_library() {
  destroy();
  // The handle is not dlclose()d: a plugin library may have left threads or atexit handlers behind, and
  // unloading it under them is the classic plugin crash. The process exit releases it.
}

void plugin_library::create(const std::string& plugin_config, bool distributed, int port_offset) {
  char error[2048] = {0};
  plugin_ = timed(setup_seconds_, [&] {
    return distributed ? create_gloo_fn_(plugin_config.c_str(), port_offset, error, sizeof error)
                       : create_fn_(plugin_config.c_str(), nullptr, error, sizeof error);
  });
  if (plugin_ == nullptr) {
    throw std::runtime_error(std::string("flopmeter_create") + (distributed ? "_gloo_from_env" : "") + " failed: " + error);
  }
}

int plugin_library::on_microbatch(const flopmeter_microbatch& microbatch) {
  ++event_calls_;
  return timed(event_seconds_, [&] { return on_microbatch_fn_(plugin_, &microbatch); });
}

int plugin_library::on_log(const flopmeter_log& log) {
  ++event_calls_;
  return timed(event_seconds_, [&] { return on_log_fn_(plugin_, &log); });
}

int plugin_library::flush() {
  ++event_calls_;
  return timed(event_seconds_, [&] { return flush_fn_(plugin_); });
}

void plugin_library::destroy() {
  if (plugin_ == nullptr) return;
  timed(setup_seconds_, [&] {
    destroy_fn_(plugin_);
    return 0;
  });
  plugin_ = nullptr;
}

bool plugin_library::health(flopmeter_health_counters& out) const {
  flopmeter_health_counters h{};
  h.struct_size = sizeof(h);
  if (plugin_ == nullptr || health_fn_(plugin_, &h) != FLOPMETER_OK) return false;
  out = h;
  return true;
}

}  // namespace vlm
