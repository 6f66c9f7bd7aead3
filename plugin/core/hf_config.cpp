// plugin/core/hf_config.cpp — the Hugging Face config.json loader (parse_hf_config) and `flopmeter import`'s
// TOML writer (import_hf_config). The document, its positions and its syntax errors are json_document's
// (json_document.h); the rules are spec_rules.h's, the same as the TOML loader's.

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

#include <nlohmann/json.hpp>

#include "flopmeter/error.h"
#include "flopmeter/model_config.h"
#include "core/config_files.h"
#include "core/families.h"
#include "core/json_document.h"
#include "core/printable_text.h"
#include "core/spec_rules.h"

namespace flopmeter {
namespace {

using json = nlohmann::json;
using detail::json_document;

// The model type at the top level, checked.
std::string read_model_type(const json_document& doc) {
  if (!doc.has("model_type")) {
    throw error(doc.where_missing(""), "required key 'model_type' is missing (a Hugging Face config.json names "
                                       "its model type at the top level)");
  }
  const std::string model_type = doc.string("model_type");
  if (!detail::is_supported_model_type(model_type)) {
    doc.fail("model_type", "unsupported model type " + detail::quoted(model_type) + " (flopmeter models " +
                               detail::supported_model_types_text() + ")");
  }
  return model_type;
}

// The checkpoint's name: the directory of a config.json, else the file stem.
std::string checkpoint_name(const std::string& source_name) {
  const std::filesystem::path path(source_name);
  if (path.filename() == "config.json") {
    std::error_code ec;
    const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
    const std::string dir = (ec ? path : absolute).parent_path().filename().string();
    if (!dir.empty()) return dir;
  }
  const std::string stem = path.stem().string();
  return stem.empty() ? "config" : stem;
}

model_spec spec_of(const json_document& doc, const std::string& source_name) {
  model_spec spec = detail::read_model_spec(doc, read_model_type(doc));
  spec.name = checkpoint_name(source_name);
  spec.source_path = source_name;
  return spec;
}

// --- import: the TOML writer ------------------------------------------------------------------------------

// A name safe in a TOML basic string and a file name: letters, digits, '.', '-', '_'; anything else '_'.
std::string safe_name(const std::string& name) {
  std::string out;
  for (const char c : name) {
    const auto byte = static_cast<unsigned char>(c);
    out.push_back(byte < 0x80 && (std::isalnum(byte) != 0 || c == '.' || c == '-' || c == '_') ? c : '_');
  }
  return out.empty() ? "model" : out;
}

// A validated FLOP field's JSON value as TOML (integers, booleans, the layer kinds, arrays of those).
std::string toml_value(const json& value) {
  if (value.is_boolean()) return value.get<bool>() ? "true" : "false";
  if (value.is_number_integer()) return std::to_string(value.get<std::int64_t>());
  if (value.is_string()) return "\"" + safe_name(value.get<std::string>()) + "\"";
  std::string out = "[";
  for (std::size_t i = 0; i < value.size(); ++i) out += (i > 0 ? ", " : "") + toml_value(value[i]);
  return out + "]";
}

void write_line(std::string& out, const std::string& assignment, const std::string& comment) {
  out += assignment;
  if (assignment.size() < 40) out.append(40 - assignment.size(), ' ');
  out += "  # " + comment + "\n";
}

}  // namespace

model_spec parse_hf_config(const std::string& json_text, const std::string& source_name) {
  const json_document doc(json_text, source_name);
  return spec_of(doc, source_name);
}

std::string import_hf_config(const std::string& path) {
  const std::string file = detail::resolve_model_path(path);
  const std::string text = detail::read_file(file, "model config");
  const json_document doc(text, file);
  const model_spec spec = spec_of(doc, file);  // every rule checked before anything is written

  std::string out;
  out += "# flopmeter model config imported from " + safe_name(std::filesystem::path(file).filename().string()) +
         " by `flopmeter import`.\n";
  out += "# Each value's comment says where it came from: FILE:LINE:COL of the value and its JSON path.\n";
  out += "# Fields that do not change FLOPs (rope settings, token ids, dtype, ...) are not carried over.\n\n";
  out += "[model]\n";
  write_line(out, "name = \"" + safe_name(spec.name) + "\"",
             std::filesystem::path(file).filename() == "config.json" ? "the checkpoint directory's name"
                                                                     : "the file's name");
  write_line(out, "model_type = \"" + spec.model_type + "\"", doc.position_text("model_type") + " model_type");
  if (const detail::family_adapter* family = detail::find_family(spec.model_type)) {
    // A family's fields: its adapter's table, each value as the config.json writes it (null: left out, which the
    // TOML reads as null), defaults not written.
    out += "\n[text_config]\n";
    for (const detail::family_field& field : family->fields) {
      const std::string field_path = "text_config." + std::string(field.key);
      const json* value = doc.node(field_path);
      if (value == nullptr) continue;
      if (value->is_null()) {  // TOML has no null: a nullable field says "none"
        write_line(out, std::string(field.key) + " = \"none\"",
                   doc.position_text(field_path) + " " + doc.in_document_terms(field_path) + " (null)");
        continue;
      }
      write_line(out, std::string(field.key) + " = " + toml_value(*value),
                 doc.position_text(field_path) + " " + doc.in_document_terms(field_path));
    }
    return out;
  }
  std::string_view table;
  for (const detail::schema_field& field : detail::schema_fields()) {
    if (field.table == "vision_config" && !spec.vision) break;
    if (field.table != table) {
      table = field.table;
      out += "\n[" + std::string(table) + "]\n";
    }
    const std::string field_path = std::string(field.table) + "." + std::string(field.key);
    const std::string key(field.key);
    if (const json* value = doc.node(field_path)) {
      write_line(out, key + " = " + toml_value(*value),
                 doc.position_text(field_path) + " " + doc.in_document_terms(field_path));
    } else if (field_path == "text_config.tie_word_embeddings") {
      write_line(out, key + std::string(" = ") + (spec.text.tie_word_embeddings ? "true" : "false"),
                 doc.has("tie_word_embeddings") ? doc.position_text("tie_word_embeddings") + " tie_word_embeddings"
                                                : std::string("not in the config.json: transformers' default"));
    } else if (field_path == "text_config.attn_output_gate") {
      // The value the loader resolved, so that the TOML states the gate it is billed with.
      const bool gate = spec.text.attn_output_gate;
      write_line(out, key + std::string(" = ") + (gate ? "true" : "false"),
                 doc.has("attn_output_gate")
                     ? doc.position_text("attn_output_gate") + " attn_output_gate"
                     : std::string("not in the config.json: ") + detail::model_family_name(spec.model_type) +
                           (gate ? " attention always has the output gate" : " has no output gate"));
    }
  }
  return out;
}

}  // namespace flopmeter
