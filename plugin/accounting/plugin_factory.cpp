// From a plugin TOML file to a running throughput plugin with its sinks (plugin_factory.h).
#include "accounting/plugin_factory.h"

#include <filesystem>
#include <string>
#include <utility>

#include "flopmeter/error.h"
#include "flopmeter/layout.h"
#include "flopmeter/throughput.h"

namespace flopmeter {
namespace {

// With emit = "all" every rank writes its records: a sink path without "{rank}" names one file (or one
// TensorBoard run) for all of them. Refused at the path's key, with the path the user can write instead.
void refuse_path_shared_by_ranks(const std::string& path, const error_location& configured, const char* key,
                                 const std::string& consequence, const std::string& suggestion,
                                 std::int64_t world_size) {
  if (path.empty() || path.find("{rank}") != std::string::npos) return;
  error_location at = configured;
  if (at.key.empty()) at.key = key;
  throw error(at, "has no {rank}, and with [logging] emit = \"all\" each of the " + std::to_string(world_size) +
                      " ranks writes its records there: " + consequence + ". Add {rank} to the path (e.g. \"" +
                      suggestion + "\"), or set emit = \"rank0\"");
}

// "out/metrics.jsonl" -> "out/metrics_{rank}.jsonl".
std::string with_rank_in_file_name(const std::string& path) {
  const std::filesystem::path p(path);
  return (p.parent_path() / (p.stem().string() + "_{rank}" + p.extension().string())).string();
}

}  // namespace

void detail::check_layout_fits(const plugin_file& file, std::int64_t world_size) {
  try {
    (void)parallel_layout(file.config.options.parallel, world_size, file.config.options.rank_order);
  } catch (const error& e) {
    // parallel_layout names the key ("parallel", "parallel.tp", ...) but knows no file: the [parallel] table's.
    const std::string& key = e.where().key;
    if (e.where().line != 0 || file.parallel_at.line == 0 || key.rfind("parallel", 0) != 0) throw;
    error_location at = file.parallel_at;
    at.key = key;
    throw error(at, e.description());
  }
}

std::vector<std::shared_ptr<sink>> detail::make_emitting_sinks(const plugin_file& file, std::int64_t rank,
                                                               std::int64_t world_size,
                                                               std::shared_ptr<spdlog::logger> logger) {
  const plugin_config& config = file.config;
  const bool every_rank_emits = config.options.emit == emit_ranks::all;
  if (every_rank_emits && world_size > 1) {
    refuse_path_shared_by_ranks(config.sinks.jsonl_path, file.sinks_at.jsonl_at, "sinks.jsonl",
                                "they would all append to this one file, each record once per rank, with no "
                                "rank in it",
                                with_rank_in_file_name(config.sinks.jsonl_path), world_size);
    // Event file names carry the host and process id, so the files differ; but TensorBoard reads every
    // event file of a directory as one run and would draw the ranks' points over each other.
    refuse_path_shared_by_ranks(config.sinks.tensorboard_dir, file.sinks_at.tensorboard_at, "sinks.tensorboard",
                                "TensorBoard would show all their event files as one run, the ranks' points "
                                "drawn over each other",
                                (std::filesystem::path(config.sinks.tensorboard_dir) / "rank{rank}").string(),
                                world_size);
  }
  if (!every_rank_emits && rank != 0) return {};  // this rank writes no record: no files
  return make_sinks(config.sinks, file.sinks_at, static_cast<int>(rank), std::move(logger));
}

std::shared_ptr<throughput_plugin> detail::create_configured_plugin(const std::string& config_path, plugin_file file,
                                                                    std::shared_ptr<communicator> comm,
                                                                    std::shared_ptr<spdlog::logger> logger,
                                                                    std::vector<std::shared_ptr<sink>> extra_sinks) {
  if (!comm) throw error("a communicator is required");
  // What needs the communicator (the layout dividing its world, its rank), the sinks' files and the sanity
  // check are only known here; name the file those settings came from, as every other configuration error does.
  try {
    check_layout_fits(file, comm->world_size());
    std::vector<std::shared_ptr<sink>> sinks = make_emitting_sinks(file, comm->rank(), comm->world_size(), logger);
    throughput_options options = std::move(file.config.options);
    options.logger = logger;
    options.sinks = std::move(sinks);
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
  return detail::create_configured_plugin(config_path, detail::load_plugin_file(config_path), std::move(comm),
                                          std::move(logger), std::move(extra_sinks));
}

}  // namespace flopmeter
