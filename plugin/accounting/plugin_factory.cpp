// From a plugin TOML file to a running throughput plugin with its sinks.
#include <string>

#include "flopmeter/error.h"
#include "flopmeter/tensorboard.h"
#include "flopmeter/throughput.h"

namespace flopmeter {

std::shared_ptr<throughput_plugin> create_throughput_plugin(const std::string& config_path,
                                                            std::shared_ptr<communicator> comm,
                                                            std::shared_ptr<spdlog::logger> logger,
                                                            std::vector<std::shared_ptr<sink>> extra_sinks) {
  if (!comm) throw error("create_throughput_plugin: a communicator is required");
  throughput_options options = load_throughput_options(config_path);
  options.logger = logger;
  if (options.console) options.sinks.push_back(make_console_sink(logger));
  if (!options.jsonl_path.empty()) {
    std::string path = options.jsonl_path;
    const std::string placeholder = "{rank}";
    for (std::size_t at = path.find(placeholder); at != std::string::npos; at = path.find(placeholder, at)) {
      const std::string rank = std::to_string(comm->rank());
      path.replace(at, placeholder.size(), rank);
      at += rank.size();
    }
    options.sinks.push_back(make_jsonl_sink(path, logger));
  }
  if (!options.tensorboard_dir.empty()) {  // "{rank}" substituted as for the JSONL path
    std::string directory = options.tensorboard_dir;
    const std::string rank = std::to_string(comm->rank());
    for (std::size_t at = directory.find("{rank}"); at != std::string::npos; at = directory.find("{rank}", at)) {
      directory.replace(at, 6, rank);
      at += rank.size();
    }
    options.sinks.push_back(make_tensorboard_sink(directory, logger));
  }
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
