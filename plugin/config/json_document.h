// plugin/config/json_document.h — internal: a parsed Hugging Face config.json that knows where each value is,
// read through the rules' field paths (spec_rules.h field_reader). The config.json loader and `flopmeter
// import` (hf_config.cpp) read it; json_document.cpp parses it.
//
// Parsing is nlohmann-json's, in two passes over the text (a config.json is a few KiB; read_file caps it at
// 16 MiB):
//   1. a SAX pass that builds nothing but records where each value starts (nlohmann-json keeps no positions),
//      refuses duplicate keys (JSON leaves them undefined; nlohmann keeps the last silently) and nesting
//      deeper than kMaxJsonDepth, and turns a syntax error's byte offset into LINE:COL;
//   2. the DOM, read through the same field paths and rules as the TOML loader.
//
// Error format: "config.json:LINE:COL: key 'text_config.hidden_size': must be > 0 (got 0)"; a syntax error
// "config.json:LINE:COL: JSON syntax error: <nlohmann-json's description>".
//
// Not installed. Thread-safety: a json_document is immutable once built; const methods may be called from
// several threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "flopmeter/error.h"
#include "families/spec_rules.h"

namespace flopmeter::detail {

// Deepest nesting of objects and arrays a config.json may have (Hugging Face configs use 3); deeper
// documents are refused while parsing, before a value is built.
constexpr int kMaxJsonDepth = 64;

// A parsed config.json with the positions of its values. Keeps a reference to `text`, which must outlive it.
class json_document final : public field_reader {
 public:
  // Parses `text`; throws flopmeter::error located in `source` for a syntax error, a duplicate key, nesting
  // past kMaxJsonDepth or a top level that is not an object.
  json_document(const std::string& text, std::string source);

  const nlohmann::json& root() const { return root_; }
  // The value at a schema path, nullptr when the document has none.
  const nlohmann::json* node(std::string_view schema_path) const;

  // --- field_reader ---
  bool has_table(std::string_view table) const override;
  bool has(std::string_view path) const override { return node(path) != nullptr; }
  std::int64_t integer(std::string_view path) const override;
  bool boolean(std::string_view path) const override;
  std::string string(std::string_view path) const override;
  std::size_t array_size(std::string_view path) const override;
  bool is_null(std::string_view path) const override { return node(path) != nullptr && node(path)->is_null(); }
  double number(std::string_view path) const override;
  bool is_array(std::string_view path) const override { return node(path) != nullptr && node(path)->is_array(); }
  std::optional<bool> default_bool(std::string_view path) const override;
  std::optional<std::string> top_level_key(std::string_view path) const override;
  std::string model_type_path() const override { return "model_type"; }
  std::string in_document_terms(std::string text) const override;
  error_location where(std::string_view schema_path) const override;
  error_location where_missing(std::string_view table) const override;

  // "config.json:12:18" for import's comments.
  std::string position_text(std::string_view path) const;

 private:
  // The JSON path of a schema path: itself, or for a text-only model's config.json "X" for "text_config.X"
  // ("" for "text_config", the top-level object).
  std::string document_path(std::string_view path) const;
  // Whether the number at `path` is written as an integer (digits, an optional '-', no '.', 'e' or 'E').
  bool is_integer_text(std::string_view schema_path) const;
  [[noreturn]] void type_error(std::string_view path, const nlohmann::json& value, const char* expected) const;

  const std::string& text_;
  std::string source_;
  std::unordered_map<std::string, std::size_t> offsets_;
  nlohmann::json root_;
  bool flat_ = false;  // a text-only model: text_config's fields at the top level
};

}  // namespace flopmeter::detail
