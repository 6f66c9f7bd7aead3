// plugin/core/families.h — internal: one adapter per Hugging Face model_type of the decoder families beyond Qwen3
// (llama, qwen2, qwen2_moe, mistral, mixtral, gemma3_text, gpt_oss, deepseek_v3, kimi_k2, glm4_moe).
//
// An adapter is a field table (the config.json name, its type, its default, its lower bound, what it means) and a
// pure build step (the values -> a model_spec, with the family's own rules, e.g. which layers slide). The table
// drives the TOML reader (the keys [text_config] allows), the config.json reader, `flopmeter import` (the lines it
// writes) and the error messages (every rule names the config.json key); SCHEMA.md's family tables list the same
// fields. A family is one adapter here, a TOML per checkpoint and a test row.
// Not installed. Thread-safety: immutable tables and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/spec_rules.h"
#include "flopmeter/model_spec.h"

namespace flopmeter::detail {

enum class field_type {
  integer,      // an integer >= minimum (<= 2^31 for sizes)
  nullable,     // an integer >= minimum, or null (config.json) / absent: "none"
  boolean,      // true / false
  index_list,   // a list of layer indexes
  layer_types,  // a list of "full_attention" / "sliding_attention"
};

enum class when_absent {
  required,  // an error
  fixed,     // the default below
  none,      // null (nullable) / empty (lists) / false
  derived,   // the build step derives it (head_dim = hidden_size / num_attention_heads, ...)
};

struct family_field {
  std::string_view key;  // the config.json name
  field_type type;
  when_absent absent;
  std::int64_t default_value;  // when_absent::fixed (booleans: 0 / 1)
  std::int64_t minimum;        // integers
  std::string_view meaning;    // SCHEMA.md's description
};

// The values a document gives (or the defaults), in the adapter's field order.
struct field_value {
  bool present = false;  // written in the document
  bool null = false;     // nullable: null or absent without a default
  std::int64_t integer = 0;
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
  family_adapter(std::string_view type, std::string_view name, std::vector<family_field> table, build_step step)
      : model_type(type), family(name), fields(std::move(table)), build(step) {}

  std::string_view model_type;  // "llama"
  std::string_view family;      // "Llama", for messages
  std::vector<family_field> fields;
  build_step build;

  const family_field* field(std::string_view key) const;
};

// The adapter of a model type, nullptr for another (the Qwen types keep spec_fields.h's table).
const family_adapter* find_family(std::string_view model_type);
const std::vector<const family_adapter*>& all_families();

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
