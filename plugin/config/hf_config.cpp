// plugin/config/hf_config.cpp — the Hugging Face config.json loader (parse_hf_config) and `flopmeter import`'s
// TOML writer (import_hf_config). The document, its positions and its syntax errors are json_document's
// (json_document.h); the rules are spec_rules.h's, the same as the TOML loader's.

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

#include <nlohmann/json.hpp>

#include "flopmeter/error.h"
#include "flopmeter/model_config.h"
#include "config/config_files.h"
#include "families/families.h"
#include "config/json_document.h"
#include "util/printable_text.h"
#include "families/spec_rules.h"
#include "families/vlm_families.h"

namespace flopmeter {
namespace {

using json = nlohmann::json;
using detail::json_document;

// The model type at the top level, checked.
std::string read_model_type(const json_document& doc) {
  if (!doc.has("model_type")) {
    throw error(doc.where_missing(""),
                "required key 'model_type' is missing (a Hugging Face config.json names "
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
  if (value.is_number_float()) {  // InternVL's downsample_ratio, Qwen2-VL's mlp_ratio: the shortest exact text
    const double x = value.get<double>();
    std::string out;
    for (int digits = 1; digits <= 17; ++digits) {  // 17 significant digits always read back as the same double
      char text[32];
      std::snprintf(text, sizeof text, "%.*g", digits, x);
      out = text;
      if (std::strtod(text, nullptr) == x) break;
    }
    if (out.find_first_of(".eE") == std::string::npos) out += ".0";  // a TOML float has a point or an exponent
    return out;
  }
  if (value.is_string()) {
    // Nemotron-H's hybrid_override_pattern writes '*' (attention): kept, as it is safe in a TOML basic string.
    const std::string text = value.get<std::string>();
    std::string out = safe_name(text);
    for (std::size_t i = 0; i < text.size() && out.size() == text.size(); ++i) {
      if (text[i] == '*') out[i] = '*';
    }
    return "\"" + out + "\"";
  }
  std::string out = "[";
  for (std::size_t i = 0; i < value.size(); ++i) out += (i > 0 ? ", " : "") + toml_value(value[i]);
  return out + "]";
}

void write_line(std::string& out, const std::string& assignment, const std::string& comment) {
  out += assignment;
  if (assignment.size() < 40) out.append(40 - assignment.size(), ' ');
  out += "  # " + comment + "\n";
}

// `key = VALUE` for the config.json value at `path`, as the file writes it, commented with its position and JSON
// path; nothing when the file leaves the key out (the TOML reads the same default). TOML has no null: a nullable
// field says "none".
void write_field(std::string& out, const json_document& doc, const std::string& key, const std::string& path) {
  const json* value = doc.node(path);
  if (value == nullptr) return;
  const std::string where = doc.position_text(path) + " " + doc.in_document_terms(path);
  if (value->is_null()) {
    write_line(out, key + " = \"none\"", where + " (null)");
  } else {
    write_line(out, key + " = " + toml_value(*value), where);
  }
}

// [text_config]'s lines: the decoder adapter's table, each value as the config.json writes it, defaults not written.
// A field the document may also write at the top level (tie_word_embeddings, attn_output_gate on the Qwen types) is
// written with the value the loader resolved, wherever it came from, so that the TOML states what it is billed
// with (a Qwen TOML requires tie_word_embeddings; an absent output gate is the type's).
void write_decoder_fields(std::string& out, const json_document& doc, const detail::family_adapter& decoder,
                          const model_spec& spec) {
  for (const detail::family_field& field : decoder.fields) {
    if (!field.in_toml) continue;
    const std::string key(field.key);
    const std::string path = "text_config." + key;
    if (doc.node(path) != nullptr || field.top == detail::at_top_level::no) {
      write_field(out, doc, key, path);
      continue;
    }
    const bool tie = key == "tie_word_embeddings";
    const bool value = tie ? spec.text.tie_word_embeddings : spec.text.attn_output_gate;
    std::string comment;
    if (doc.has(key)) {
      comment = doc.position_text(key) + " " + key;
    } else if (tie) {
      comment = "not in the config.json: transformers' default";
    } else {
      comment = "not in the config.json: " + detail::model_family_name(spec.model_type) +
                (value ? " attention always has the output gate" : " has no output gate");
    }
    write_line(out, key + " = " + (value ? "true" : "false"), comment);
  }
}

constexpr std::string_view kVisionPrefix = "vision_config.";

bool is_vision_field(const detail::vlm_field& field) {
  return field.path.substr(0, kVisionPrefix.size()) == kVisionPrefix;
}

// A vision-language family's wrapper keys (InternVL's downsample_ratio, Gemma 3's mm_tokens_per_image): top-level
// keys, so they come before the first table.
void write_vlm_wrapper_keys(std::string& out, const json_document& doc, const detail::vlm_family& vlm) {
  const std::size_t before = out.size();
  for (const detail::vlm_field& field : vlm.fields) {
    if (!is_vision_field(field)) write_field(out, doc, std::string(field.path), std::string(field.path));
  }
  if (out.size() != before) out += "\n";
}

// A vision-language family's tables: [text_config] with its decoder family's keys (read at the top level of the
// flat Qwen2-VL files; InternVL's text_config.model_type names the family and is written too), [vision_config] with
// the vision keys of the family's table (none when the model has no vision tower: a Qwen3-VL decoder alone).
void write_vlm_tables(std::string& out, const json_document& doc, const detail::vlm_family& vlm,
                      const model_spec& spec) {
  std::string decoder(vlm.decoder);
  out += "\n[text_config]\n";
  const detail::family_adapter* family = nullptr;
  if (decoder.empty()) {  // validated by the loader: present, a string, a supported decoder family
    decoder = doc.node("text_config.model_type")->get<std::string>();
    write_field(out, doc, "model_type", "text_config.model_type");
    family = detail::find_family(decoder);
  } else {
    family = detail::find_decoder(decoder);
  }
  if (family != nullptr) write_decoder_fields(out, doc, *family, spec);
  if (!spec.vision) return;
  out += "\n[vision_config]\n";
  for (const detail::vlm_field& field : vlm.fields) {
    if (is_vision_field(field)) {
      write_field(out, doc, std::string(field.path.substr(kVisionPrefix.size())), std::string(field.path));
    }
  }
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
  const detail::vlm_family* vlm = detail::find_vlm_family(spec.model_type);
  if (vlm != nullptr) write_vlm_wrapper_keys(out, doc, *vlm);
  out += "[model]\n";
  write_line(
      out, "name = \"" + safe_name(spec.name) + "\"",
      std::filesystem::path(file).filename() == "config.json" ? "the checkpoint directory's name" : "the file's name");
  write_line(out, "model_type = \"" + spec.model_type + "\"", doc.position_text("model_type") + " model_type");
  if (vlm != nullptr) {
    write_vlm_tables(out, doc, *vlm, spec);
    return out;
  }
  out += "\n[text_config]\n";
  write_decoder_fields(out, doc, *detail::find_family(spec.model_type), spec);
  return out;
}

}  // namespace flopmeter
