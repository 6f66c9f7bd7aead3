// plugin/accounting/throughput_config.h — internal (not installed): the plugin TOML loader on text rather than on a
// file, for the fuzzer (fuzz/fuzz_plugin_config.cpp) and the tests. load_throughput_options(path) is
// parse_throughput_options(contents of path, path, directory of path).
// Thread-safety: reentrant; it shares no state (the model file it names is read from disk).
#pragma once

#include <string>

#include "flopmeter/throughput.h"

namespace flopmeter::detail {

// Parses plugin TOML text (plugin_configs/SCHEMA.md). Every error names `source_name` with line:col and the
// key path, as for a file. A relative model.config is resolved against `base_dir` ("" = the working
// directory). Throws flopmeter::error.
throughput_options parse_throughput_options(const std::string& toml_text, const std::string& source_name,
                                            const std::string& base_dir);

}  // namespace flopmeter::detail
