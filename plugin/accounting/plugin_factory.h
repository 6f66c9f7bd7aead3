// plugin/accounting/plugin_factory.h — internal (not installed): from loaded plugin options to the sinks its
// [sinks] table names and to a running plugin. Shared by create_throughput_plugin, the C ABI and the tensor
// path, so that every creation path honours the file's sinks the same way.
// Thread-safety: reentrant; no shared state.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "flopmeter/communicator.h"
#include "flopmeter/sinks.h"
#include "flopmeter/throughput.h"

namespace flopmeter::detail {

// The sinks `options` names from a plugin file: a console sink through `logger` when `console`, a JSONL sink
// at `jsonl_path` with "{rank}" replaced by `rank` when set. Throws flopmeter::error.
std::vector<std::shared_ptr<sink>> make_configured_sinks(const throughput_options& options, int rank,
                                                         const std::shared_ptr<spdlog::logger>& logger);

// Adds the configured sinks and then `extra_sinks` to `options.sinks`, sets the logger and creates the plugin.
// Errors name `config_path`, the file the options came from.
std::shared_ptr<throughput_plugin> create_configured_plugin(const std::string& config_path, throughput_options options,
                                                            std::shared_ptr<communicator> comm,
                                                            std::shared_ptr<spdlog::logger> logger,
                                                            std::vector<std::shared_ptr<sink>> extra_sinks);

}  // namespace flopmeter::detail
