// plugin/families/spec_rules.h — internal: the one set of rules of a model_spec, and the reading of a model spec
// from any config document (TOML model file, Hugging Face config.json) through a field_reader.
//
// Every rule reports a *field path* in the schema's names ("text_config.num_key_value_heads",
// "vision_config.deepstack_visual_indexes[2]"; the names of model_configs/SCHEMA.md, which are the Hugging
// Face config.json names). validate_model_spec() names that path; each loader maps it to FILE:LINE:COL of
// the value through its field_reader, so a rule is written once and every loader cites the same problem.
//
// Not installed. Thread-safety: the tables are immutable, the functions reentrant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/printable_text.h"  // quoted(), which the rules' messages and their readers use
#include "flopmeter/error.h"
#include "flopmeter/model_spec.h"

namespace flopmeter::detail {

// Largest accepted size (2^31). Every size field is bounded by it so that the FLOP model's int64 products
// of a few sizes with token counts cannot overflow; no real model comes near it.
constexpr std::int64_t kMaxSize = std::int64_t{1} << 31;

// One broken rule: the field path and what is wrong with it ("must be > 0 (got 0)").
struct spec_violation {
  spec_violation(std::string field_path, std::string problem, std::vector<std::string> other_fields = {})
      : field(std::move(field_path)), what(std::move(problem)), also(std::move(other_fields)) {}

  std::string field;
  std::string what;
  std::vector<std::string> also;  // other fields the problem involves; a loader cites the first one its file sets
};

// The model types flopmeter models (a family adapter's or a vision-language family's), for "unknown model type"
// messages: "\"qwen3_vl\", \"qwen3_5\", ...".
bool is_supported_model_type(std::string_view model_type);
std::string supported_model_types_text();
// The text-only decoders (a family adapter's model_type: "qwen3", "llama", ...): their config.json keeps the
// decoder's fields at the top level (no text_config object) and they have no vision tower.
bool is_text_only_model_type(std::string_view model_type);
// What text_config.model_type must be: model_type + "_text", or model_type itself for a text-only type.
std::string text_model_type(std::string_view model_type);
// The family's name in messages: "Qwen3-VL", "Qwen3.5", "Qwen3", "Qwen3-Next", "Llama", ...
std::string model_family_name(std::string_view model_type);

// The rules of a built spec: the model type, then its adapter's rules (check_family_spec, check_vlm_spec).
std::optional<spec_violation> check_model_spec(const model_spec& spec);
// Every coefficient (MTP counted as trained) fits in int64; the violation names the fields whose product is too
// large, at the first of them.
std::optional<spec_violation> check_coefficients(const model_spec& spec);

// Reads one config document for read_model_spec(). Paths are schema field paths ("text_config.head_dim",
// "text_config.layer_types[3]"); a table path ("vision_config") names the table itself. Every getter throws
// flopmeter::error located at the value when the value has the wrong type.
class field_reader {
 public:
  virtual ~field_reader() = default;

  virtual bool has_table(std::string_view table) const = 0;
  virtual bool has(std::string_view path) const = 0;
  virtual std::int64_t integer(std::string_view path) const = 0;
  virtual bool boolean(std::string_view path) const = 0;
  virtual std::string string(std::string_view path) const = 0;
  virtual std::size_t array_size(std::string_view path) const = 0;
  // A number (integer or floating point), for the few fields that are ratios (InternVL's downsample_ratio).
  virtual double number(std::string_view path) const { fail(path, "expected a number"); }
  // Whether the value at `path` is an array (InternVL writes image_size as [448, 448] or 448).
  virtual bool is_array(std::string_view /*path*/) const { return false; }
  // Whether the value at `path` is null (config.json's null; in a model TOML the string "none").
  virtual bool is_null(std::string_view /*path*/) const { return false; }
  // A required boolean the document may leave out (config.json may omit tie_word_embeddings); nullopt when
  // the format requires it.
  virtual std::optional<bool> default_bool(std::string_view /*path*/) const { return std::nullopt; }
  // The path of a top-level key that carries the text_config field `path` when the document writes it
  // outside text_config (config.json: "tie_word_embeddings", "attn_output_gate"; transformers' composite
  // configs take those keyword arguments at the top level too); nullopt when the document has none.
  virtual std::optional<std::string> top_level_key(std::string_view /*path*/) const { return std::nullopt; }

  // How the document names the model type, for messages: "model.model_type" (TOML), "model_type" (JSON).
  virtual std::string model_type_path() const = 0;

  // Where the value at `path` is (the table's start for a table path); key = path.
  virtual error_location where(std::string_view path) const = 0;
  // Where a missing key of `table` is reported (the table's header or opening brace).
  virtual error_location where_missing(std::string_view table) const = 0;

  // `text` (a message that names schema paths) in the document's own names: a config.json of a text-only
  // model keeps text_config's fields at the top level, so there "text_config.head_dim" is "head_dim".
  virtual std::string in_document_terms(std::string text) const { return text; }

  [[noreturn]] void fail(std::string_view path, const std::string& what) const {
    throw error(where(path), in_document_terms(what));
  }
};

// Reads [text_config] and [vision_config] through `reader` for a model of `model_type` (already checked with
// is_supported_model_type) with the type's adapter, applies every rule and returns the spec (name, source_path
// and train_mtp_layers are left to the caller). Throws flopmeter::error located by the reader.
model_spec read_model_spec(const field_reader& reader, const std::string& model_type);

}  // namespace flopmeter::detail
