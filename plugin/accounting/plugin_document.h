// plugin/accounting/plugin_document.h — internal (not installed): the plugin config as a document of typed
// values (toml++'s table), between where it comes from and the one reader that checks it. A plugin TOML file
// is parsed into one (each value with its file:line:col); the C ABI's typed setters (c_api_config.h) build
// one in code (values without a position). Both are read by read_plugin_document, so a key gets the same rule
// and the same message whichever way it was given; only the location differs: file:line:col for a value from
// a file, the key path alone for one set in code.
// Thread-safety: reentrant; no shared state (the model file a document names is read from disk).
#pragma once

#include <string>
#include <string_view>

#include <toml++/toml.h>

#include "flopmeter/communicator.h"
#include "accounting/throughput_config.h"

namespace flopmeter::detail {

// Plugin TOML text as a document, every value located in `source_name`. Throws flopmeter::error (TOML syntax,
// JSON given where TOML goes) citing file:line:col.
toml::table parse_plugin_document(const std::string& toml_text, const std::string& source_name);

// Reads and checks a document by plugin_configs/SCHEMA.md (what parse_plugin_file does after parsing): a
// relative model.config resolves against `base_dir` ("" = the working directory). Throws flopmeter::error.
plugin_file read_plugin_document(const toml::table& root, const std::string& source_name, const std::string& base_dir);

// Refuses a key path that is not "table.key" of the schema, with the message a file's unknown key gets
// ("unknown key 'parallel.tpx' (did you mean 'parallel.tp'?)"). Throws flopmeter::error.
void check_plugin_key_path(std::string_view key_path);

// [logging] small_allreduce of a document by the reader's own rule (automatic when absent). Throws
// flopmeter::error for a value that names no algorithm, as read_plugin_document would.
small_allreduce read_small_allreduce(const toml::table& root, const std::string& source_name);

}  // namespace flopmeter::detail
