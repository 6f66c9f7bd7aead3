// flopmeter/model_config.h — loading a model description into a `model_spec`: a flopmeter model TOML file
// (model_configs/SCHEMA.md) or a Hugging Face config.json (the same field names; SCHEMA.md "config.json").
//
// The loaders live in the core library with TOML++ and nlohmann-json as private dependencies (neither
// reaches include/). Every field is checked by one set of rules; an error is a flopmeter::error whose
// where() names the file, the line and column of the offending value and its key path (a JSON path for
// config.json), and whose description() says what is wrong. Thread-safety: the functions are reentrant; they
// share no state.
#pragma once

#include <string>

#include "flopmeter/export.h"
#include "flopmeter/model_spec.h"

namespace flopmeter FLOPMETER_EXPORT {

// Reads and validates the model at `path`: a model TOML file, a Hugging Face config.json (a file named
// *.json, or whose text starts with '{'), or a checkpoint directory that holds a config.json. Throws
// flopmeter::error on any problem.
model_spec load_model_spec(const std::string& path);

// Same, from TOML text; `source_name` is used in error messages in place of a file name.
model_spec parse_model_spec(const std::string& toml_text, const std::string& source_name);

// Same, from the text of a Hugging Face config.json (model_type qwen3_vl, qwen3_5, qwen3_vl_moe or
// qwen3_5_moe, with text_config and vision_config; or the text-only qwen3, qwen3_moe or qwen3_next, whose
// decoder fields sit at the top level, where errors name them: key 'head_dim'). Fields that do not change FLOPs (rope settings, token
// ids, dtype, ...) are ignored; a field that would change the work in a way the model type does not have is
// an error. The spec's name is the checkpoint directory's name (`source_name`'s parent directory when the
// file is called config.json), else the file stem.
model_spec parse_hf_config(const std::string& json_text, const std::string& source_name);

// The model TOML equivalent to the config.json at `path` (a file or a checkpoint directory), each value
// commented with where in the config.json it came from. Loading that TOML gives the same spec as
// load_model_spec(path). Throws flopmeter::error like load_model_spec.
std::string import_hf_config(const std::string& path);

// Checks the rules on a spec built in code (the loaders apply the same rules with file locations). Throws
// flopmeter::error whose where() is {"model_spec 'NAME'", key = the field path}.
void validate_model_spec(const model_spec& spec);

}  // namespace FLOPMETER_EXPORT
