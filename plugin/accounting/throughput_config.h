// plugin/accounting/throughput_config.h — internal (not installed): the plugin TOML loader on text rather than on a
// file, for the fuzzer (fuzz/fuzz_plugin_config.cpp) and the tests. load_plugin_config(path) is
// parse_plugin_config(contents of path, path, directory of path).
// Thread-safety: reentrant; it shares no state (the model file it names is read from disk).
#pragma once

#include <string>

#include "flopmeter/throughput.h"

namespace flopmeter::detail {

// Parses plugin TOML text (plugin_configs/SCHEMA.md). Every error names `source_name` with line:col and the
// key path, as for a file. A relative model.config is resolved against `base_dir` ("" = the working
// directory). Throws flopmeter::error.
plugin_config parse_plugin_config(const std::string& toml_text, const std::string& source_name,
                                  const std::string& base_dir);
// parse_plugin_config(...).options.
throughput_options parse_throughput_options(const std::string& toml_text, const std::string& source_name,
                                            const std::string& base_dir);

}  // namespace flopmeter::detail
