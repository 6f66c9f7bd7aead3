// plugin/core/hf_config.h — internal: what the model loaders share about file paths and config.json.
// Not installed. Thread-safety: reentrant functions, no shared state.
#pragma once

#include <string>

namespace flopmeter::detail {

// `path` itself, or `path`/config.json when `path` is a directory (a Hugging Face checkpoint). Throws
// flopmeter::error for a directory without a config.json.
std::string resolve_model_path(const std::string& path);

// Deepest nesting of objects and arrays a config.json may have (Hugging Face configs use 3); deeper
// documents are refused while parsing, before a value is built.
constexpr int kMaxJsonDepth = 64;

}  // namespace flopmeter::detail
