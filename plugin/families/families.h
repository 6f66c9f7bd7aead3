// plugin/families/families.h — internal: the one field-table dialect of the model families, and the registry of the
// decoder families. One file per family (a Hugging Face model_type or a family of them: llama.cpp, deepseek.cpp for
// deepseek_v3, kimi_k2, glm4_moe, deepseek_v32 and glm_moe_dsa, qwen_families.cpp for the Qwen3 types, the Mamba-2
// hybrids nemotron_h.cpp, granitemoehybrid.cpp and falcon_h1.cpp over mamba2_kit.h, lfm2.cpp, ...), each with one function
// that returns its adapters; registry.cpp lists those functions. The vision-language types are in vlm_families.h.
//
// An adapter is a field table (the config.json name, its type, its default, its lower bound, what it means) and a
// pure build step (the values -> a model_spec, with the family's own rules, e.g. which layers slide). The table
// drives the TOML reader (the keys [text_config] allows), the config.json reader, `flopmeter import` (the lines it
// writes) and the error messages (every rule names the config.json key); SCHEMA.md's family tables list the same
// fields. A family is one file here (decoder_kit.h holds what they share), a TOML per checkpoint and a test row.
// Not installed. Thread-safety: immutable tables and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "families/spec_rules.h"
#include "flopmeter/model_spec.h"

namespace flopmeter::detail {

enum class field_type {
  integer,              // an integer >= minimum (<= 2^31 for sizes)
  nullable,             // an integer >= minimum, or null (config.json) / absent: "none"
  boolean,              // true / false
  index_list,           // a list of layer indexes
  nullable_index_list,  // a list of layer indexes, or null (config.json) / absent: none
  number,               // a number > 0 (integer or floating point; the default is default_value), or null
  layer_types,          // a list of layer kinds ("full_attention", "sliding_attention", ...), checked by the build step
  text_model_type,      // a string; when written it must be the decoder's own model_type ("qwen3_vl_text")
  text,                 // a string, checked by the build step (Nemotron-H's hybrid_override_pattern)
};

enum class when_absent {
  required,        // an error
  fixed,           // the default below
  none,            // null (nullable) / empty (lists) / false
  derived,         // the build step derives it (head_dim = hidden_size / num_attention_heads, ...)
  format_default,  // the document format's default (field_reader::default_bool: config.json's false), else required
};

// Where a nested config.json may also write a text field: at the top level, beside text_config (transformers'
// composite configs take tie_word_embeddings and attn_output_gate as keyword arguments there too).
enum class at_top_level {
  no,
  allowed,     // read there when text_config lacks it; text_config's value wins
  must_agree,  // as allowed, and a top-level value that contradicts text_config's is refused
};

struct family_field {
  std::string_view key;  // the config.json name
  field_type type;
  when_absent absent;
  std::int64_t default_value;  // when_absent::fixed (booleans: 0 / 1)
  std::int64_t minimum;        // integers
  std::string_view meaning;    // SCHEMA.md's description
  at_top_level top = at_top_level::no;
  // The reader checks only the value's type (a null is a type error); the family's rules check the rest (Qwen: a
  // field of another model type is refused as such and its neutral value 0 accepted, not read as out of range).
  bool checked_by_rules = false;
  // false: a config.json field only (Qwen3's use_sliding_window, refused when true): no key of a model TOML, and
  // `flopmeter import` writes none.
  bool in_toml = true;
};

// The values a document gives (or the defaults), in the adapter's field order.
struct field_value {
  bool present = false;  // written in the document
  bool null = false;     // nullable: null or absent without a default
  std::int64_t integer = 0;
  double real = 0;  // field_type::number
  std::vector<std::int64_t> indexes;
  std::vector<std::string> names;
};

class family_adapter;
struct field_values {
  const family_adapter* adapter = nullptr;
  std::vector<field_value> values;
  const field_value& operator[](std::string_view key) const;
  std::int64_t integer(std::string_view key) const { return (*this)[key].integer; }
  bool boolean(std::string_view key) const { return (*this)[key].integer != 0; }
};

class family_adapter {
 public:
  using build_step = std::optional<spec_violation> (*)(const field_values&, model_spec&);
  using check_step = std::optional<spec_violation> (*)(const model_spec&);
  family_adapter(std::string_view type, std::string_view name, std::vector<family_field> table, build_step step,
                 check_step rules = nullptr, std::string_view no_vision_hint = {})
      : model_type(type),
        family(name),
        fields(std::move(table)),
        build(step),
        check(rules),
        vision_hint(no_vision_hint) {}

  std::string_view model_type;  // "llama"
  std::string_view family;      // "Llama", for messages
  std::vector<family_field> fields;
  build_step build;
  check_step check;              // the rules of a built spec; nullptr: check_family_spec's common rules
  std::string_view vision_hint;  // appended to the refusal of a vision tower on this text-only type

  const family_field* field(std::string_view key) const;
};

// The adapter of a model type, nullptr for another.
const family_adapter* find_family(std::string_view model_type);
const std::vector<const family_adapter*>& all_families();
// find_family's adapters and the decoders of vision-language types that are no model_type of their own (the
// Qwen3-VL and Qwen3.5 decoders, registered under the vision-language type: "qwen3_vl").
const family_adapter* find_decoder(std::string_view model_type);

// "not allowed for model_type "qwen3", a text-only Qwen3 decoder (no vision tower); ...": a vision tower on a
// text-only type.
std::string no_vision_tower(const family_adapter& adapter);

// Reads a model of `adapter`'s type through `reader`: every field's type and presence, the build step, the
// spec's rules (check_family_spec) and the coefficient bounds, each violation cited where the document sets it.
model_spec read_family_spec(const field_reader& reader, const family_adapter& adapter);
// The decoder part of read_family_spec: fields, build step and check_family_spec, without the coefficient bounds
// (a vision-language family reads its decoder with it, then its vision tower).
model_spec read_family_decoder(const field_reader& reader, const family_adapter& adapter);

// The rules of a built spec of a family type (sizes, GQA, MoE, windows, MLA), for loaders and
// validate_model_spec(); violations name config.json keys ("text_config.num_local_experts" on mixtral).
std::optional<spec_violation> check_family_spec(const model_spec& spec);

}  // namespace flopmeter::detail
