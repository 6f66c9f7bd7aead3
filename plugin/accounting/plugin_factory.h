// plugin/accounting/plugin_factory.h — internal (not installed): from a loaded plugin file to a running plugin
// with the sinks its [sinks] table names. Shared by create_throughput_plugin and the C ABI (the tensor path
// does the same with make_sinks), so that every creation path from a file honours its sinks the same way.
// Thread-safety: reentrant; no shared state.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "flopmeter/communicator.h"
#include "flopmeter/sinks.h"
#include "flopmeter/throughput.h"
#include "accounting/throughput_config.h"

namespace flopmeter::detail {

// Checks the layout (check_layout_fits), builds the sinks `file.config.sinks` names (make_emitting_sinks, for
// comm->rank(), through `logger`), appends `extra_sinks`, sets the logger and creates the plugin from
// `file.config.options`. Errors name `config_path`, the file the
// configuration came from. Throws flopmeter::error.
std::shared_ptr<throughput_plugin> create_configured_plugin(const std::string& config_path, plugin_file file,
                                                            std::shared_ptr<communicator> comm,
                                                            std::shared_ptr<spdlog::logger> logger,
                                                            std::vector<std::shared_ptr<sink>> extra_sinks);

// Checks `file`'s [parallel] layout against a world of `world_size` ranks (parallel_layout): a layout that
// does not fit is reported at file.parallel_at, the [parallel] table's file:line:col, with the key the
// problem names. Throws flopmeter::error.
void check_layout_fits(const plugin_file& file, std::int64_t world_size);

// The sinks `file.config.sinks` names (located at file.sinks_at), for rank `rank` of a world of `world_size`, only where this rank emits
// (rank 0, or every rank with emit = "all"): the other ranks get none and create no files. With emit = "all"
// and more than one rank, a JSONL path or TensorBoard directory without "{rank}" is refused at its key (every
// rank would write into the same file, or the same TensorBoard run). Throws flopmeter::error.
std::vector<std::shared_ptr<sink>> make_emitting_sinks(const plugin_file& file, std::int64_t rank,
                                                       std::int64_t world_size, std::shared_ptr<spdlog::logger> logger);

}  // namespace flopmeter::detail
