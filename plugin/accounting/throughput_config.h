// plugin/accounting/throughput_config.h — internal (not installed): the plugin TOML loader with its bookkeeping
// (plugin_file: where settings were written, for the creation paths), and on text rather than on a file, for
// the fuzzer (fuzz/fuzz_plugin_config.cpp) and the tests. load_plugin_config(path) is
// load_plugin_file(path).config.
// Thread-safety: reentrant; it shares no state (the model file it names is read from disk).
#pragma once

#include <string>

#include "flopmeter/error.h"
#include "flopmeter/throughput.h"
#include "output/sink_provenance.h"

namespace flopmeter::detail {

// A plugin file as loaded: what it configures (the public plugin_config, as load_plugin_config returns it)
// and the loader's bookkeeping, which the creation paths (plugin_factory.h, the tensor path) use to report
// what only the world reveals at the place it was written.
struct plugin_file {
  plugin_config config;
  sink_provenance sinks_at;  // where [sinks]' paths were written, and the files no sink may write into
  // Where the [parallel] table was written (the plugin file, its line and column, key "parallel"), so that a
  // layout that does not fit the world (tp*cp*pp above or not dividing world_size, known only at create) is
  // reported there. Empty when the file has no [parallel] table.
  error_location parallel_at;
};

// Parses plugin TOML text into a plugin_file. Every error names `source_name` with line:col and the key path,
// as for a file. A relative model.config is resolved against `base_dir` ("" = the working directory). Throws
// flopmeter::error.
plugin_file parse_plugin_file(const std::string& toml_text, const std::string& source_name,
                              const std::string& base_dir);
// parse_plugin_file(contents of path, path, directory of path).
plugin_file load_plugin_file(const std::string& path);

// parse_plugin_file(...).config: plugin TOML text (plugin_configs/SCHEMA.md) as load_plugin_config reads it.
plugin_config parse_plugin_config(const std::string& toml_text, const std::string& source_name,
                                  const std::string& base_dir);
// parse_plugin_config(...).options.
throughput_options parse_throughput_options(const std::string& toml_text, const std::string& source_name,
                                            const std::string& base_dir);

}  // namespace flopmeter::detail
