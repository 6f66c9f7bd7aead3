// plugin/config/model_config.cpp — the dispatch between the model file formats (load_model_spec) and
// validate_model_spec(). The top of the core's model chain: model_spec.cpp <- spec_rules.cpp <- {model_toml.cpp
// (the model TOML loader), hf_config.cpp (the config.json loader)} <- this file. The file helpers (reading,
// finding a checkpoint's config.json) are config_files.h's.
//
// Error tiers: every problem throws flopmeter::error. Messages from a file cite FILE:LINE:COL and the key
// path (the loaders'); validate_model_spec() has no locations: its source is "model_spec 'NAME'" and its key
// the field path.

#include "flopmeter/model_config.h"

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>

#include "flopmeter/error.h"
#include "config/config_files.h"
#include "families/spec_rules.h"

namespace flopmeter {
namespace {

// A file whose text starts with '{' (after whitespace or a UTF-8 byte order mark) is JSON: no TOML document
// can start so.
bool looks_like_json(const std::string& text) {
  std::size_t i = text.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
  while (i < text.size() && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r')) ++i;
  return i < text.size() && text[i] == '{';
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// Public functions

model_spec load_model_spec(const std::string& path) {
  const std::string file = detail::resolve_model_path(path);
  const std::string text = detail::read_file(file, "model config");
  const bool json = std::filesystem::path(file).extension() == ".json" || looks_like_json(text);
  model_spec spec = json ? parse_hf_config(text, file) : parse_model_spec(text, file);
  spec.source_path = file;
  return spec;
}

void validate_model_spec(const model_spec& spec) {
  const std::string source = spec.name.empty() ? "model_spec" : "model_spec '" + spec.name + "'";
  std::optional<detail::spec_violation> violation = detail::check_model_spec(spec);
  if (!violation) violation = detail::check_coefficients(spec);
  if (violation) throw error(error_location{source, 0, 0, violation->field}, violation->what);
}

}  // namespace flopmeter
