// From a plugin TOML file to a running throughput plugin with its sinks.
#include <string>

#include "flopmeter/error.h"
#include "flopmeter/throughput.h"

namespace flopmeter {

std::shared_ptr<throughput_plugin> create_throughput_plugin(const std::string& config_path,
                                                            std::shared_ptr<communicator> comm,
                                                            std::shared_ptr<spdlog::logger> logger,
                                                            std::vector<std::shared_ptr<sink>> extra_sinks) {
  if (!comm) throw error("create_throughput_plugin: a communicator is required");
  plugin_config config = load_plugin_config(config_path);
  throughput_options options = std::move(config.options);
  options.logger = logger;
  options.sinks = make_sinks(config.sinks, comm->rank(), logger);
  for (auto& s : extra_sinks) options.sinks.push_back(std::move(s));
  // What needs the communicator (the layout dividing its world, its rank) and the sanity check are only
  // known here; name the file those options came from, as every other configuration error does.
  try {
    return throughput_plugin::create(std::move(options), std::move(comm));
  } catch (const error& e) {
    throw error(config_path + ": " + e.what());
  }
}

}  // namespace flopmeter
