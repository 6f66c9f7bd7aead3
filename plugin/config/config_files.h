// plugin/config/config_files.h — internal: the file side of every config loader. Reading a config file (model
// TOML, config.json, plugin TOML) with the operating system's reason on failure, and finding the config a
// model path names (a file, or a Hugging Face checkpoint directory). Nothing here parses; the loaders above
// it (model_toml.cpp, hf_config.cpp, the plugin config's loader) do. Not installed.
// Thread-safety: reentrant functions, no shared state.
#pragma once

#include <string>
#include <string_view>

namespace flopmeter::detail {

// The contents of the file at `path`. `what` names the file's role in the errors, e.g. "model config":
//   PATH: cannot open model config: no such file
// The cause is the operating system's (errno / std::filesystem): "no such file", "permission denied",
// "too many levels of symbolic links", "is a directory", "not a regular file (a FIFO)", ...
// Reading stops past 16 MiB ("larger than 16 MiB, so not a config file").
std::string read_file(const std::string& path, std::string_view what);

// `path` itself, or `path`/config.json when `path` is a directory (a Hugging Face checkpoint). Throws
// flopmeter::error for a directory without a config.json.
std::string resolve_model_path(const std::string& path);

}  // namespace flopmeter::detail
