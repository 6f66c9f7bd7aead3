// examples/vlm/flopmeter_loader.h — flopmeter loaded the way a training framework loads a plugin: dlopen() a
// shared library by path, resolve the versioned C ABI (include/flopmeter/c_api.h) with dlsym(), check
// flopmeter_abi_version(), then drive the plugin through those function pointers only.
//
// It also measures what flopmeter costs the training loop: the wall time spent inside every event call
// (on_microbatch, on_log, flush), and separately the setup calls (create, destroy), which include the Gloo
// rendezvous with the other ranks.
//
// Ownership: a plugin_library owns its dlopen handle and the plugin it created (destroyed in destroy() or the
// destructor; the library itself stays loaded, like most frameworks' plugins). Errors: load/create throw
// std::runtime_error; event calls never throw (the C ABI does not). Thread-safety: one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "flopmeter/c_api.h"

namespace vlm {

class plugin_library {
 public:
  // dlopen(path, RTLD_NOW | RTLD_LOCAL) and resolve every C ABI symbol. Throws std::runtime_error naming the
  // library and what failed (dlerror text, a missing symbol, an ABI version other than ours).
  static std::unique_ptr<plugin_library> load(const std::string& path);
  ~plugin_library();
  plugin_library(const plugin_library&) = delete;
  plugin_library& operator=(const plugin_library&) = delete;

  // distributed: flopmeter_create_gloo_from_env(config, port_offset) — flopmeter builds its own Gloo group on
  // MASTER_PORT + port_offset, served by rank 0; otherwise flopmeter_create(config, NULL) (one process).
  // Throws std::runtime_error with the plugin's message.
  void create(const std::string& plugin_config, bool distributed, int port_offset);

  int on_microbatch(const flopmeter_microbatch& microbatch);
  int on_log(const flopmeter_log& log);
  int flush();
  void destroy();
  // The plugin's health counters (flopmeter_health, every field this header knows); false if none.
  bool health(flopmeter_health_counters& out) const;

  const std::string& path() const { return path_; }
  std::uint32_t abi_version() const { return abi_version_; }
  double event_seconds() const { return event_seconds_; }  // inside on_microbatch / on_log / flush
  double setup_seconds() const { return setup_seconds_; }  // inside create / destroy
  std::int64_t event_calls() const { return event_calls_; }

 private:
  plugin_library() = default;

  std::string path_;
  void* handle_ = nullptr;
  std::uint32_t abi_version_ = 0;
  flopmeter_plugin* plugin_ = nullptr;
  double event_seconds_ = 0;
  double setup_seconds_ = 0;
  std::int64_t event_calls_ = 0;

  decltype(&flopmeter_abi_version) abi_version_fn_ = nullptr;
  decltype(&flopmeter_create) create_fn_ = nullptr;
  decltype(&flopmeter_create_gloo_from_env) create_gloo_fn_ = nullptr;
  decltype(&flopmeter_on_microbatch) on_microbatch_fn_ = nullptr;
  decltype(&flopmeter_on_log) on_log_fn_ = nullptr;
  decltype(&flopmeter_flush) flush_fn_ = nullptr;
  decltype(&flopmeter_destroy) destroy_fn_ = nullptr;
  decltype(&flopmeter_health) health_fn_ = nullptr;
};

}  // namespace vlm
