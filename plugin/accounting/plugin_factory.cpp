// From a plugin TOML file to a running throughput plugin with its sinks (plugin_factory.h).
#include "accounting/plugin_factory.h"

#include <string>
#include <utility>

#include "flopmeter/error.h"
#include "flopmeter/throughput.h"

namespace flopmeter {

std::vector<std::shared_ptr<sink>> detail::make_configured_sinks(const throughput_options& options, int rank,
                                                                 const std::shared_ptr<spdlog::logger>& logger) {
  std::vector<std::shared_ptr<sink>> sinks;
  if (options.console) sinks.push_back(make_console_sink(logger));
  if (!options.jsonl_path.empty()) sinks.push_back(make_jsonl_sink(options.jsonl_path, rank, logger));
  return sinks;
}

std::shared_ptr<throughput_plugin> detail::create_configured_plugin(const std::string& config_path,
                                                                    throughput_options options,
                                                                    std::shared_ptr<communicator> comm,
                                                                    std::shared_ptr<spdlog::logger> logger,
                                                                    std::vector<std::shared_ptr<sink>> extra_sinks) {
  if (!comm) throw error("create_throughput_plugin: a communicator is required");
  // What needs the communicator (the layout dividing its world, its rank) and the sanity check are only
  // known here; name the file those options came from, as every other configuration error does.
  try {
    options.logger = logger;
    for (auto& s : make_configured_sinks(options, comm->rank(), logger)) options.sinks.push_back(std::move(s));
    for (auto& s : extra_sinks) options.sinks.push_back(std::move(s));
    return throughput_plugin::create(std::move(options), std::move(comm));
  } catch (const error& e) {
    throw error(config_path + ": " + e.what());
  }
}

std::shared_ptr<throughput_plugin> create_throughput_plugin(const std::string& config_path,
                                                            std::shared_ptr<communicator> comm,
                                                            std::shared_ptr<spdlog::logger> logger,
                                                            std::vector<std::shared_ptr<sink>> extra_sinks) {
  if (!comm) throw error("create_throughput_plugin: a communicator is required");
  return detail::create_configured_plugin(config_path, load_throughput_options(config_path), std::move(comm),
                                          std::move(logger), std::move(extra_sinks));
}

}  // namespace flopmeter
