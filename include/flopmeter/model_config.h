// flopmeter/model_config.h — loading a model TOML file into a `model_spec`.
//
// The loader is the only code in flopmeter that touches TOML++; it validates every field and throws
// `flopmeter::error` whose message names `file:line:col`, the key path and what is wrong. The schema is in
// model_configs/SCHEMA.md. Thread-safety: the functions are reentrant; they share no state.
#pragma once

#include <string>

#include "flopmeter/export.h"
#include "flopmeter/model_spec.h"

namespace flopmeter FLOPMETER_EXPORT {

// Reads and validates the model TOML at `path`. Throws flopmeter::error on any problem.
model_spec load_model_spec(const std::string& path);

// Same, from TOML text; `source_name` is used in error messages in place of a file name.
model_spec parse_model_spec(const std::string& toml_text, const std::string& source_name);

// Checks the cross-field invariants of a spec built in code (the loader calls it too). Throws on violation.
void validate_model_spec(const model_spec& spec);

}  // namespace FLOPMETER_EXPORT
