// plugin/core/hf_config.cpp — the Hugging Face config.json loader and `flopmeter import`'s TOML writer.
//
// Parsing is nlohmann-json's, in two passes over the text (a config.json is a few KiB; read_file caps it at
// 16 MiB):
//   1. a SAX pass that builds nothing but records where each value starts (nlohmann-json keeps no positions),
//      refuses duplicate keys (JSON leaves them undefined; nlohmann keeps the last silently) and nesting
//      deeper than kMaxJsonDepth, and turns a syntax error's byte offset into LINE:COL;
//   2. the DOM, read through the same field paths and rules as the TOML loader (spec_rules.h).
// The byte offset of a value comes from the input iterator: it counts the characters the lexer has taken,
// and a value starts at the first character after the previous event that is not whitespace, ':' or ','.
//
// Error format: "config.json:LINE:COL: key 'text_config.hidden_size': must be > 0 (got 0)"; a syntax error
// "config.json:LINE:COL: JSON syntax error: <nlohmann-json's description>".

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "flopmeter/error.h"
#include "flopmeter/model_config.h"
#include "core/config_files.h"
#include "core/hf_config.h"
#include "core/spec_rules.h"
#include "core/toml_reader.h"

namespace flopmeter {
namespace {

using json = nlohmann::json;

constexpr std::string_view kText = "text_config";

// Array elements whose positions are kept (deeper indexes are cited at their array). Bounds the position map
// of a hostile multi-megabyte array; no FLOP field has more entries than this in a real config.
constexpr std::size_t kMaxRecordedIndex = 4096;
// Positions are kept for paths this deep ("text_config.layer_types[3]" is 3); FLOP fields are never deeper.
constexpr std::size_t kMaxRecordedDepth = 3;

// An input iterator over the text that publishes how many characters the lexer has taken.
class counting_iterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  counting_iterator(const char* at, const char* begin, std::size_t* taken) : at_(at), begin_(begin), taken_(taken) {}
  reference operator*() const { return *at_; }
  counting_iterator& operator++() {
    ++at_;
    *taken_ = static_cast<std::size_t>(at_ - begin_);
    return *this;
  }
  counting_iterator operator++(int) {
    counting_iterator before = *this;
    ++*this;
    return before;
  }
  bool operator==(const counting_iterator& other) const { return at_ == other.at_; }
  bool operator!=(const counting_iterator& other) const { return at_ != other.at_; }

 private:
  const char* at_;
  const char* begin_;
  std::size_t* taken_;
};

// LINE:COL (1-based, column in bytes) of a byte offset.
error_location location_of(const std::string& source, std::string_view text, std::size_t offset, std::string key) {
  offset = std::min(offset, text.size());
  std::uint32_t line = 1;
  std::size_t line_start = 0;
  for (std::size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return error_location{source, line, static_cast<std::uint32_t>(offset - line_start + 1), std::move(key)};
}

// Pass 1: positions, duplicate keys, depth, syntax errors.
class position_scan {
 public:
  position_scan(std::string_view text, const std::string& source, const std::size_t* taken)
      : text_(text), source_(source), taken_(taken) {}

  // nlohmann-json's SAX interface.
  bool null() { return value(); }
  bool boolean(bool) { return value(); }
  bool number_integer(json::number_integer_t) { return value(); }
  bool number_unsigned(json::number_unsigned_t) { return value(); }
  bool number_float(json::number_float_t, const json::string_t&) { return value(); }
  bool string(json::string_t&) { return value(); }
  bool binary(json::binary_t&) { return value(); }
  bool start_object(std::size_t) { return open(true); }
  bool start_array(std::size_t) { return open(false); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(json::string_t& name) {
    const std::size_t start = next_start();
    frame& top = stack_.back();
    if (!top.keys.insert(name).second) {
      return fail(start, "duplicate key " + detail::quoted(name) + " in " +
                             (top.path.empty() ? "the top-level object" : detail::quoted(top.path)) +
                             " (JSON leaves its meaning undefined, so flopmeter refuses it)");
    }
    top.key = name;
    last_end_ = *taken_;
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) {
    if (failure_) return false;  // our own refusal stopped the parser
    // nlohmann-json's text is "[json.exception.parse_error.101] parse error at line 1, column 5: <what>";
    // the location is ours (the same in every message), the description nlohmann-json's.
    std::string what = e.what();
    const std::size_t tag = what.find("] ");
    if (tag != std::string::npos) what.erase(0, tag + 2);
    const std::size_t column = what.find(", column ");
    const std::size_t colon = column == std::string::npos ? std::string::npos : what.find(": ", column);
    if (colon != std::string::npos) what.erase(0, colon + 2);
    // Its "last read" quotes the input; flopmeter::error writes what is not printable as \u00XX or \xHH.
    failure_ = error(location_of(source_, text_, position > 0 ? position - 1 : 0, {}), "JSON syntax error: " + what);
    return false;
  }

  const std::optional<error>& failure() const { return failure_; }
  std::unordered_map<std::string, std::size_t> take_offsets() { return std::move(offsets_); }

 private:
  struct frame {
    bool object;
    std::string path;
    std::string key;       // objects: the key of the value that comes next
    std::size_t index = 0; // arrays: the index of the value that comes next
    std::unordered_set<std::string> keys;
    bool recorded;         // whether this container's children get positions
  };

  std::size_t next_start() const {
    std::size_t i = last_end_;
    if (i == 0 && text_.compare(0, 3, "\xEF\xBB\xBF") == 0) i = 3;  // nlohmann-json skips a byte order mark
    while (i < text_.size() && (text_[i] == ' ' || text_[i] == '\t' || text_[i] == '\n' || text_[i] == '\r' ||
                                text_[i] == ':' || text_[i] == ',')) {
      ++i;
    }
    return i;
  }

  // The path of the value that starts now, and whether to record it.
  std::pair<std::string, bool> child() {
    if (stack_.empty()) return {std::string(), true};
    frame& top = stack_.back();
    const bool record = top.recorded && stack_.size() <= kMaxRecordedDepth &&
                        (top.object || top.index < kMaxRecordedIndex);
    std::string path;
    if (record) {
      path = top.object ? (top.path.empty() ? top.key : top.path + "." + top.key)
                        : top.path + "[" + std::to_string(top.index) + "]";
    }
    if (!top.object) ++top.index;
    return {std::move(path), record};
  }

  bool value() {
    const std::size_t start = next_start();
    auto [path, record] = child();
    if (record) offsets_.emplace(std::move(path), start);
    last_end_ = *taken_;
    return true;
  }

  bool open(bool object) {
    const std::size_t start = next_start();
    if (stack_.size() >= static_cast<std::size_t>(detail::kMaxJsonDepth)) {
      return fail(start, "objects and arrays nested more than " + std::to_string(detail::kMaxJsonDepth) +
                             " deep; refused (a config.json needs 3)");
    }
    auto [path, record] = child();
    if (record) offsets_.emplace(path, start);
    stack_.push_back(frame{object, std::move(path), {}, 0, {}, record});
    last_end_ = *taken_;
    return true;
  }

  bool close() {
    stack_.pop_back();
    last_end_ = *taken_;
    return true;
  }

  bool fail(std::size_t offset, const std::string& what) {
    failure_ = error(location_of(source_, text_, offset, {}), what);
    return false;
  }

  std::string_view text_;
  const std::string& source_;
  const std::size_t* taken_;
  std::size_t last_end_ = 0;
  std::vector<frame> stack_;
  std::unordered_map<std::string, std::size_t> offsets_;
  std::optional<error> failure_;
};

const char* json_type_name(const json& value) {
  switch (value.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "object";
    case json::value_t::array: return "array";
    case json::value_t::string: return "string";
    case json::value_t::boolean: return "boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "integer";
    case json::value_t::number_float: return "floating-point";
    case json::value_t::binary: return "binary";
    case json::value_t::discarded: return "nothing";
  }
  return "unknown";
}

// A parsed config.json with the positions of its values.
class json_document final : public detail::field_reader {
 public:
  json_document(const std::string& text, std::string source) : text_(text), source_(std::move(source)) {
    std::size_t taken = 0;
    position_scan scan(text_, source_, &taken);
    const counting_iterator first(text_.data(), text_.data(), &taken);
    const counting_iterator last(text_.data() + text_.size(), text_.data(), &taken);
    const bool ok = json::sax_parse(first, last, &scan, nlohmann::detail::input_format_t::json, true, false);
    if (scan.failure()) throw *scan.failure();
    if (!ok) throw error(location_of(source_, text_, 0, {}), "JSON syntax error");
    offsets_ = scan.take_offsets();
    root_ = json::parse(text_, nullptr, /*allow_exceptions=*/false, /*ignore_comments=*/false);
    if (root_.is_discarded()) throw error(location_of(source_, text_, 0, {}), "JSON syntax error");
    if (!root_.is_object()) {
      throw error(where(""), std::string("expected a JSON object at the top level (a Hugging Face config.json), got ") +
                                 json_type_name(root_));
    }
    // A text-only model's config.json (Qwen3, Qwen3-MoE, Qwen3-Next) is its decoder's config: the fields the
    // rules call text_config.X sit at the top level as X.
    const auto type = root_.find("model_type");
    flat_ = type != root_.end() && type->is_string() && detail::is_text_only_model_type(type->get<std::string>());
  }

  const json& root() const { return root_; }
  const json* node(std::string_view schema_path) const {
    const std::string mapped = document_path(schema_path);
    const std::string_view path = mapped;
    const json* at = &root_;
    std::size_t i = 0;
    while (i < path.size()) {
      if (path[i] == '[') {
        const std::size_t close = path.find(']', i);
        if (close == std::string_view::npos || !at->is_array()) return nullptr;
        const std::size_t index = std::stoul(std::string(path.substr(i + 1, close - i - 1)));
        if (index >= at->size()) return nullptr;
        at = &(*at)[index];
        i = close + 1;
        if (i < path.size() && path[i] == '.') ++i;
        continue;
      }
      const std::size_t end = path.find_first_of(".[", i);
      const std::string key(path.substr(i, end == std::string_view::npos ? std::string_view::npos : end - i));
      if (!at->is_object()) return nullptr;
      const auto found = at->find(key);
      if (found == at->end()) return nullptr;
      at = &*found;
      i = end == std::string_view::npos ? path.size() : (path[end] == '.' ? end + 1 : end);
    }
    return at;
  }

  // --- field_reader ---
  bool has_table(std::string_view table) const override {
    const json* found = node(table);
    if (found == nullptr) return false;
    if (!found->is_object()) type_error(table, *found, "an object");
    return true;
  }
  bool has(std::string_view path) const override { return node(path) != nullptr; }
  std::int64_t integer(std::string_view path) const override {
    const json& value = *node(path);
    if (value.is_number_unsigned() && value.get<std::uint64_t>() > static_cast<std::uint64_t>(
                                                                        std::numeric_limits<std::int64_t>::max())) {
      fail(path, "too large: must be <= 2^31 = " + std::to_string(detail::kMaxSize) + " (got " +
                     std::to_string(value.get<std::uint64_t>()) + ")");
    }
    // nlohmann-json reads an integer beyond 64 bits as a floating-point number; it is still an integer to
    // the user, and too large.
    if (value.is_number_float() && is_integer_text(path)) {
      fail(path, "too large: must be <= 2^31 = " + std::to_string(detail::kMaxSize) + " (got an integer beyond 64 bits)");
    }
    if (!value.is_number_integer()) type_error(path, value, "an integer");
    return value.get<std::int64_t>();
  }
  bool boolean(std::string_view path) const override {
    const json& value = *node(path);
    if (!value.is_boolean()) type_error(path, value, "a boolean");
    return value.get<bool>();
  }
  std::string string(std::string_view path) const override {
    const json& value = *node(path);
    if (!value.is_string()) type_error(path, value, "a string");
    // JSON allows "\u0000"; a NUL would cut the value short wherever it is used as a C string (as the TOML
    // loaders refuse it: toml_reader.h refuse_nul_strings).
    if (value.get_ref<const std::string&>().find('\0') != std::string::npos) {
      fail(path, "contains a NUL character (\\u0000)");
    }
    return value.get<std::string>();
  }
  std::size_t array_size(std::string_view path) const override {
    const json& value = *node(path);
    if (!value.is_array()) type_error(path, value, "an array");
    return value.size();
  }
  // transformers' default for tie_word_embeddings is false (no FLOP effect: the logits matmul runs either way).
  std::optional<bool> default_bool(std::string_view path) const override {
    if (path != "text_config.tie_word_embeddings") return std::nullopt;
    return false;
  }
  // Checkpoints keep tie_word_embeddings at the top level of some config.json files and in text_config of
  // others; a top-level attn_output_gate is read the same way, so that a value there is checked against the
  // model type rather than ignored (transformers' composite configs accept both keyword arguments at the top).
  std::optional<std::string> top_level_key(std::string_view path) const override {
    if (flat_) return std::nullopt;  // the top level is text_config itself
    for (const std::string_view key : {std::string_view("tie_word_embeddings"), std::string_view("attn_output_gate")}) {
      if (path == "text_config." + std::string(key) && has(key)) return std::string(key);
    }
    return std::nullopt;
  }
  std::string model_type_path() const override { return "model_type"; }
  std::string in_document_terms(std::string text) const override {
    if (!flat_) return text;
    const std::string prefix = std::string(kText) + ".";
    for (std::size_t at = text.find(prefix); at != std::string::npos; at = text.find(prefix, at)) {
      text.erase(at, prefix.size());
    }
    return text;
  }
  error_location where(std::string_view schema_path) const override {
    const std::string path = document_path(schema_path);
    std::string_view at = path;
    while (!at.empty() && offsets_.find(std::string(at)) == offsets_.end()) {
      const std::size_t cut = at.find_last_of(".[");
      at = cut == std::string_view::npos ? std::string_view{} : at.substr(0, cut);
    }
    const auto found = offsets_.find(std::string(at));
    return location_of(source_, text_, found != offsets_.end() ? found->second : 0, std::string(path));
  }
  error_location where_missing(std::string_view table) const override {
    error_location at = where(table);
    at.key.clear();
    return at;
  }

  // "config.json:12:18" for import's comments.
  std::string position_text(std::string_view path) const {
    const error_location at = where(path);
    return std::filesystem::path(at.file).filename().string() + ":" + std::to_string(at.line) + ":" +
           std::to_string(at.column);
  }

 private:
  // The JSON path of a schema path: itself, or for a text-only model's config.json "X" for "text_config.X"
  // ("" for "text_config", the top-level object).
  std::string document_path(std::string_view path) const {
    if (!flat_ || path.substr(0, kText.size()) != kText) return std::string(path);
    if (path.size() == kText.size()) return std::string();
    if (path[kText.size()] != '.') return std::string(path);
    return std::string(path.substr(kText.size() + 1));
  }

  // Whether the number at `path` is written as an integer (digits, an optional '-', no '.', 'e' or 'E').
  bool is_integer_text(std::string_view schema_path) const {
    const auto found = offsets_.find(document_path(schema_path));
    if (found == offsets_.end()) return false;
    std::size_t i = found->second;
    if (i < text_.size() && text_[i] == '-') ++i;
    const std::size_t digits = i;
    while (i < text_.size() && text_[i] >= '0' && text_[i] <= '9') ++i;
    return i > digits && (i == text_.size() || (text_[i] != '.' && text_[i] != 'e' && text_[i] != 'E'));
  }

  [[noreturn]] void type_error(std::string_view path, const json& value, const char* expected) const {
    fail(path, std::string("expected ") + expected + ", got " + json_type_name(value));
  }

  const std::string& text_;
  std::string source_;
  std::unordered_map<std::string, std::size_t> offsets_;
  json root_;
  bool flat_ = false;  // a text-only model: text_config's fields at the top level
};

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
