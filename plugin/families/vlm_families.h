// plugin/families/vlm_families.h — internal: the vision-language families (qwen3_vl, qwen3_5, qwen3_vl_moe,
// qwen3_5_moe, qwen2_vl, qwen2_5_vl, internvl, gemma3). Each is a decoder family adapter (families.h: the Qwen3-VL
// and Qwen3.5 decoders of qwen_families.cpp, qwen2 for Qwen2-VL and Qwen2.5-VL, the text_config's own model_type
// for InternVL, gemma3_text for Gemma 3) plus a vision field table in the
// config.json's own names (vision_config.* and the wrapper's top-level keys such as downsample_ratio) and a build
// step that turns them into a vision_spec (model_spec.h): block MLP, window attention, CLS token, projector.
//
// The table drives the readers (config.json and TOML), the TOML loader's allowed keys and the rules' messages;
// SCHEMA.md lists the same fields. Not installed. Thread-safety: immutable tables and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "families/families.h"
#include "families/spec_rules.h"
#include "flopmeter/model_spec.h"

namespace flopmeter::detail {

enum class vlm_field_type {
  integer,     // an integer >= minimum, <= 2^31
  ratio,       // a number in (0, 1] (InternVL's downsample_ratio)
  number,      // a positive number (Qwen2-VL's mlp_ratio)
  side,        // an integer, or a list [h, w] of two equal integers (InternVL's image_size / patch_size)
  index_list,  // a list of block indexes
};

struct vlm_field {
  std::string_view path;  // the config.json path: "vision_config.depth", "downsample_ratio"
  vlm_field_type type;
  bool required;
  double default_value;      // when absent and not required
  std::string_view meaning;  // SCHEMA.md's description
  std::string_view missing_note = {};  // appended to "required key '...' is missing": why no default is safe
};

struct vlm_value {
  bool present = false;
  double number = 0;  // integer / ratio / number / side
  std::vector<std::int64_t> indexes;
};

struct vlm_family {
  std::string_view model_type;  // "qwen2_5_vl"
  std::string_view family;      // "Qwen2.5-VL", for messages
  std::string_view decoder;     // the decoder's model_type (find_decoder); "" when text_config.model_type names it
  bool flat;                    // the config.json may keep the decoder's keys at the top level (no text_config)
  std::vector<vlm_field> fields;
  bool vision_optional = false;  // a document without vision_config is the decoder alone (Qwen3-VL, Qwen3.5)

  const vlm_field* field(std::string_view path) const;
};

// The family of a model type, nullptr for another.
const vlm_family* find_vlm_family(std::string_view model_type);
const std::vector<const vlm_family*>& all_vlm_families();

// Reads a model of `family`'s type: the decoder through its family adapter, the vision fields through the table,
// the build step, the rules and the coefficient bounds, each violation cited where the document sets it.
model_spec read_vlm_spec(const field_reader& reader, const vlm_family& family);

// The rules of a built spec of a vision-language family type: the decoder's (check_family_spec) and the vision
// tower's (sizes, windows, tiles, projector), named by the config.json keys of the family.
std::optional<spec_violation> check_vlm_spec(const model_spec& spec);

}  // namespace flopmeter::detail
