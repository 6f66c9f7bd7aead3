// plugin/accounting/plugin_factory.h — internal (not installed): from a loaded plugin file to a running plugin
// with the sinks its [sinks] table names. Shared by create_throughput_plugin and the C ABI (the tensor path
// does the same with make_sinks), so that every creation path from a file honours its sinks the same way.
// Thread-safety: reentrant; no shared state.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "flopmeter/communicator.h"
#include "flopmeter/sinks.h"
#include "flopmeter/throughput.h"

namespace flopmeter::detail {

// Builds the sinks `config.sinks` names (make_sinks, for comm->rank(), through `logger`), appends `extra_sinks`,
// sets the logger and creates the plugin from `config.options`. Errors name `config_path`, the file the
// configuration came from. Throws flopmeter::error.
std::shared_ptr<throughput_plugin> create_configured_plugin(const std::string& config_path, plugin_config config,
                                                            std::shared_ptr<communicator> comm,
                                                            std::shared_ptr<spdlog::logger> logger,
                                                            std::vector<std::shared_ptr<sink>> extra_sinks);

}  // namespace flopmeter::detail
