// From a plugin TOML file to a running throughput plugin with its sinks (plugin_factory.h).
#include "accounting/plugin_factory.h"

#include <string>
#include <utility>

#include "flopmeter/error.h"
#include "flopmeter/throughput.h"

namespace flopmeter {

std::shared_ptr<throughput_plugin> detail::create_configured_plugin(const std::string& config_path,
                                                                    plugin_config config,
                                                                    std::shared_ptr<communicator> comm,
                                                                    std::shared_ptr<spdlog::logger> logger,
                                                                    std::vector<std::shared_ptr<sink>> extra_sinks) {
  if (!comm) throw error("a communicator is required");
  // What needs the communicator (the layout dividing its world, its rank), the sinks' files and the sanity
  // check are only known here; name the file those settings came from, as every other configuration error does.
  try {
    throughput_options options = std::move(config.options);
    options.logger = logger;
    options.sinks = make_sinks(config.sinks, comm->rank(), logger);
    for (auto& s : extra_sinks) options.sinks.push_back(std::move(s));
    return throughput_plugin::create(std::move(options), std::move(comm));
  } catch (const error& e) {
    throw e.in_file(config_path);
  }
}

std::shared_ptr<throughput_plugin> create_throughput_plugin(const std::string& config_path,
                                                            std::shared_ptr<communicator> comm,
                                                            std::shared_ptr<spdlog::logger> logger,
                                                            std::vector<std::shared_ptr<sink>> extra_sinks) {
  if (!comm) throw error("create_throughput_plugin: a communicator is required");
  return detail::create_configured_plugin(config_path, load_plugin_config(config_path), std::move(comm),
                                          std::move(logger), std::move(extra_sinks));
}

}  // namespace flopmeter
