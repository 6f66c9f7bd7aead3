// plugin/config/json_document.cpp — parsing a config.json with the positions of its values (see
// json_document.h). The byte offset of a value comes from the input iterator: it counts the characters the
// lexer has taken, and a value starts at the first character after the previous event that is not
// whitespace, ':' or ','.

#include "config/json_document.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
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
#include "util/printable_text.h"
#include "families/spec_rules.h"
#include "families/vlm_families.h"

namespace flopmeter::detail {
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
    std::string key;        // objects: the key of the value that comes next
    std::size_t index = 0;  // arrays: the index of the value that comes next
    std::unordered_set<std::string> keys;
    bool recorded;  // whether this container's children get positions
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
    const bool record =
        top.recorded && stack_.size() <= kMaxRecordedDepth && (top.object || top.index < kMaxRecordedIndex);
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
    if (stack_.size() >= static_cast<std::size_t>(kMaxJsonDepth)) {
      return fail(start, "objects and arrays nested more than " + std::to_string(kMaxJsonDepth) +
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

}  // namespace

json_document::json_document(const std::string& text, std::string source) : text_(text), source_(std::move(source)) {
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
  flat_ = type != root_.end() && type->is_string() && is_text_only_model_type(type->get<std::string>());
  // Qwen2-VL and Qwen2.5-VL hub files keep the decoder's keys at the top level beside vision_config (a file
  // re-saved by a newer transformers nests them in text_config instead: then it is read as written).
  if (type != root_.end() && type->is_string() && !root_.contains(std::string(kText))) {
    const vlm_family* family = find_vlm_family(type->get<std::string>());
    flat_ = flat_ || (family != nullptr && family->flat);
  }
}

const json* json_document::node(std::string_view schema_path) const {
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

// field_reader

bool json_document::has_table(std::string_view table) const {
  const json* found = node(table);
  if (found == nullptr) return false;
  if (!found->is_object()) type_error(table, *found, "an object");
  return true;
}
std::int64_t json_document::integer(std::string_view path) const {
  const json& value = *node(path);
  if (value.is_number_unsigned() &&
      value.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    fail(path, "too large: must be <= 2^31 = " + std::to_string(kMaxSize) + " (got " +
                   std::to_string(value.get<std::uint64_t>()) + ")");
  }
  // nlohmann-json reads an integer beyond 64 bits as a floating-point number; it is still an integer to
  // the user, and too large.
  if (value.is_number_float() && is_integer_text(path)) {
    fail(path, "too large: must be <= 2^31 = " + std::to_string(kMaxSize) + " (got an integer beyond 64 bits)");
  }
  if (!value.is_number_integer()) type_error(path, value, "an integer");
  return value.get<std::int64_t>();
}
double json_document::number(std::string_view path) const {
  const json& value = *node(path);
  if (!value.is_number()) type_error(path, value, "a number");
  return value.get<double>();
}
bool json_document::boolean(std::string_view path) const {
  const json& value = *node(path);
  if (!value.is_boolean()) type_error(path, value, "a boolean");
  return value.get<bool>();
}
std::string json_document::string(std::string_view path) const {
  const json& value = *node(path);
  if (!value.is_string()) type_error(path, value, "a string");
  // JSON allows "\u0000"; a NUL would cut the value short wherever it is used as a C string (as the TOML
  // loaders refuse it: toml_reader.h refuse_nul_strings).
  if (value.get_ref<const std::string&>().find('\0') != std::string::npos) {
    fail(path, "contains a NUL character (\\u0000)");
  }
  return value.get<std::string>();
}
std::size_t json_document::array_size(std::string_view path) const {
  const json& value = *node(path);
  if (!value.is_array()) type_error(path, value, "an array");
  return value.size();
}
// transformers' default for tie_word_embeddings is false (no FLOP effect: the logits matmul runs either way).
std::optional<bool> json_document::default_bool(std::string_view path) const {
  if (path != "text_config.tie_word_embeddings") return std::nullopt;
  return false;
}
// Checkpoints keep tie_word_embeddings at the top level of some config.json files and in text_config of
// others; a top-level attn_output_gate is read the same way, so that a value there is checked against the
// model type rather than ignored (transformers' composite configs accept both keyword arguments at the top).
std::optional<std::string> json_document::top_level_key(std::string_view path) const {
  if (flat_) return std::nullopt;  // the top level is text_config itself
  for (const std::string_view key : {std::string_view("tie_word_embeddings"), std::string_view("attn_output_gate")}) {
    if (path == "text_config." + std::string(key) && has(key)) return std::string(key);
  }
  return std::nullopt;
}
std::string json_document::in_document_terms(std::string text) const {
  if (!flat_) return text;
  const std::string prefix = std::string(kText) + ".";
  for (std::size_t at = text.find(prefix); at != std::string::npos; at = text.find(prefix, at)) {
    text.erase(at, prefix.size());
  }
  return text;
}
error_location json_document::where(std::string_view schema_path) const {
  const std::string path = document_path(schema_path);
  std::string_view at = path;
  while (!at.empty() && offsets_.find(std::string(at)) == offsets_.end()) {
    const std::size_t cut = at.find_last_of(".[");
    at = cut == std::string_view::npos ? std::string_view{} : at.substr(0, cut);
  }
  const auto found = offsets_.find(std::string(at));
  return location_of(source_, text_, found != offsets_.end() ? found->second : 0, std::string(path));
}
error_location json_document::where_missing(std::string_view table) const {
  error_location at = where(table);
  at.key.clear();
  return at;
}

std::string json_document::position_text(std::string_view path) const {
  const error_location at = where(path);
  return std::filesystem::path(at.file).filename().string() + ":" + std::to_string(at.line) + ":" +
         std::to_string(at.column);
}

std::string json_document::document_path(std::string_view path) const {
  if (!flat_ || path.substr(0, kText.size()) != kText) return std::string(path);
  if (path.size() == kText.size()) return std::string();
  if (path[kText.size()] != '.') return std::string(path);
  return std::string(path.substr(kText.size() + 1));
}

bool json_document::is_integer_text(std::string_view schema_path) const {
  const auto found = offsets_.find(document_path(schema_path));
  if (found == offsets_.end()) return false;
  std::size_t i = found->second;
  if (i < text_.size() && text_[i] == '-') ++i;
  const std::size_t digits = i;
  while (i < text_.size() && text_[i] >= '0' && text_[i] <= '9') ++i;
  return i > digits && (i == text_.size() || (text_[i] != '.' && text_[i] != 'e' && text_[i] != 'E'));
}

void json_document::type_error(std::string_view path, const json& value, const char* expected) const {
  fail(path, std::string("expected ") + expected + ", got " + json_type_name(value));
}

}  // namespace flopmeter::detail
