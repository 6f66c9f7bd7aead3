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

#include <cstddef>
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
  double default_value;                // when absent and not required
  std::string_view meaning;            // SCHEMA.md's description
  std::string_view missing_note = {};  // appended to "required key '...' is missing": why no default is safe
};

struct vlm_value {
  bool present = false;
  double number = 0;  // integer / ratio / number / side
  std::vector<std::int64_t> indexes;
};

struct vlm_values;

// What a family's vision tower is, for the rules of a built spec (check_vlm_spec): each flag says what the family's
// build step sets, and a spec that says otherwise is refused.
struct vision_tower_kind {
  bool qwen3 = false;     // the Qwen3-VL / Qwen3.5 tower: check_qwen3_vision's rules instead of the ones below
  bool windowed = false;  // window attention (window_size, fullatt_block_indexes: Qwen2.5-VL)
  bool gated = false;     // a gated MLP (Qwen2.5-VL)
  bool cls = false;       // a CLS token per segment (InternViT)
  bool tiled = false;     // square tiles of image_size, 2-D patches (InternVL, Gemma 3)
  vision_projector_kind projector = vision_projector_kind::patch_merger;
  bool image_block = false;  // the decoder attends bidirectionally within an image (Gemma 3)
};

// A vision_spec member the family's config.json names otherwise than "vision_config.<member>".
struct vlm_member_key {
  std::string_view member;  // "hidden_size"
  std::string_view key;     // "vision_config.embed_dim"
};

struct vlm_family {
  using build_step = std::optional<spec_violation> (*)(const vlm_values&, const text_spec&, vision_spec&);

  std::string_view model_type;  // "qwen2_5_vl"
  std::string_view family;      // "Qwen2.5-VL", for messages
  std::string_view decoder;     // the decoder's model_type (find_decoder); "" when text_config.model_type names it
  bool flat;                    // the config.json may keep the decoder's keys at the top level (no text_config)
  std::vector<vlm_field> fields;
  bool vision_optional = false;  // a document without vision_config is the decoder alone (Qwen3-VL, Qwen3.5)
  build_step build = nullptr;    // the values -> the vision_spec; `text` is the decoder already built
  vision_tower_kind tower;
  std::vector<vlm_member_key> keys;

  const vlm_field* field(std::string_view path) const;
  // The config.json key of a vision_spec member: `keys`, or "vision_config.<member>".
  std::string key_of(std::string_view member) const;
};

// The values a document gives (or the defaults), by path.
struct vlm_values {
  const vlm_family* family = nullptr;
  std::vector<vlm_value> values;
  const vlm_value& operator[](std::string_view path) const {
    for (std::size_t i = 0; i < family->fields.size(); ++i) {
      if (family->fields[i].path == path) return values[i];
    }
    static const vlm_value absent{};
    return absent;
  }
  std::int64_t integer(std::string_view path) const { return static_cast<std::int64_t>((*this)[path].number); }
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
