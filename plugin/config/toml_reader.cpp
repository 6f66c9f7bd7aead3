// plugin/config/toml_reader.cpp — the TOML++ helpers shared by the model and plugin config loaders (see
// toml_reader.h for the message formats).

#include "config/toml_reader.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <vector>

#include "flopmeter/error.h"
#include "util/printable_text.h"

namespace flopmeter::detail {
namespace {

bool contains(array_view<std::string_view> keys, std::string_view key) {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

[[noreturn]] void fail_syntax(const std::string& source_name, const toml::parse_error& e) {
  throw error(error_location{source_name, e.source().begin.line, e.source().begin.column, {}},
              "TOML syntax error: " + std::string(e.description()));
}

// "2^31 = 2147483648" for powers of two from 2^16 up (where the exponent is the readable part), else the
// number.
std::string bound_text(std::int64_t value) {
  if (value >= (std::int64_t{1} << 16) && (value & (value - 1)) == 0) {
    int exponent = 0;
    while ((std::int64_t{1} << exponent) != value) ++exponent;
    return "2^" + std::to_string(exponent) + " = " + std::to_string(value);
  }
  return std::to_string(value);
}

// The shortest text that reads back as `value`; TOML's spellings for the non-finite values.
std::string number_text(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}

}  // namespace

void prescan_toml(std::string_view text, const std::string& source_name) {
  // A small lexer that knows only what decides key context and nesting: strings (four kinds), comments,
  // brackets, '=' and ','. It never rejects valid TOML within the limits: TOML++ reports the syntax errors.
  std::uint32_t line = 1;
  std::uint32_t column = 0;
  const auto fail = [&](const std::string& what) -> void {
    throw error(error_location{source_name, line, column, {}}, what);
  };
  // The innermost open brackets ('[' array or '{' inline table), up to the limit.
  char open[kMaxNestingDepth + 1] = {};
  int depth = 0;
  bool in_key = true;      // reading a key: at the start of a line outside brackets, or after '{' / ','
  bool in_header = false;  // inside [table] or [[array.of.tables]]
  int key_parts = 1;
  const std::size_t size = text.size();
  for (std::size_t i = 0; i < size; ++i) {
    const char c = text[i];
    ++column;
    if (c == '\n') {
      ++line;
      column = 0;
      if (depth == 0) {
        in_key = true;
        in_header = false;
        key_parts = 1;
      }
      continue;
    }
    if (c == '#') {  // comment to the end of the line
      while (i + 1 < size && text[i + 1] != '\n') ++i;
      continue;
    }
    if (c == '"' || c == '\'') {
      const bool multi = i + 2 < size && text[i + 1] == c && text[i + 2] == c;
      std::size_t j = i + (multi ? 3 : 1);
      for (; j < size; ++j) {
        if (text[j] == '\n') {
          if (!multi) break;  // TOML++ reports the unterminated string
          ++line;
          column = 0;
          continue;
        }
        ++column;
        if (c == '"' && text[j] == '\\') {
          ++j;
          ++column;
          continue;
        }
        if (text[j] == c && (!multi || (j + 2 < size && text[j + 1] == c && text[j + 2] == c))) {
          if (multi) {
            // A multi-line string may end with up to two extra quotes: """a""""" is a + two quotes.
            j += 2;
            while (j + 1 < size && text[j + 1] == c) ++j;
          }
          break;
        }
      }
      column += multi ? 2 : 0;
      i = j < size && text[j] != '\n' ? j : j - 1;
      continue;
    }
    if (in_key && c == '.') {
      if (++key_parts > kMaxKeyParts) {
        fail(std::string(in_header ? "table header" : "dotted key") + " has more than " + std::to_string(kMaxKeyParts) +
             " parts; refused before parsing (no config needs that many)");
      }
      continue;
    }
    if (c == '[' && depth == 0 && in_key && !in_header) {  // a table header at the start of a line
      in_header = true;
      key_parts = 1;
      if (i + 1 < size && text[i + 1] == '[') {
        ++i;
        ++column;
      }
      continue;
    }
    if (c == ']' && in_header) {
      in_key = false;
      in_header = false;
      if (i + 1 < size && text[i + 1] == ']') {
        ++i;
        ++column;
      }
      continue;
    }
    if (c == '[' || c == '{') {
      if (depth == kMaxNestingDepth) {
        fail("arrays and inline tables nested more than " + std::to_string(kMaxNestingDepth) +
             " deep; refused before parsing (no config needs that many)");
      }
      open[depth++] = c;
      in_key = c == '{';
      key_parts = 1;
      continue;
    }
    if ((c == ']' || c == '}') && depth > 0) {
      --depth;
      in_key = false;
      continue;
    }
    if (c == '=') {
      in_key = false;
      continue;
    }
    if (c == ',' && depth > 0 && open[depth - 1] == '{') {
      in_key = true;
      key_parts = 1;
    }
  }
}

namespace {

// A key as written, control characters escaped as in every message (detail::quoted without its quotes).
std::string shown_key(std::string_view key) {
  const std::string shown = detail::quoted(key);
  return shown.substr(1, shown.size() - 2);
}

// The string value holding a NUL that comes first in the document, with its key path.
struct nul_string {
  const toml::node* node = nullptr;
  std::string key_path;
};

bool comes_before(const toml::source_position& a, const toml::source_position& b) {
  return a.line != b.line ? a.line < b.line : a.column < b.column;
}

// Visits every value under `node` (tables and arrays nest at most a few hundred deep: the pre-scan bounds
// key parts and brackets at 64 each). A TOML table iterates in key order, so the first NUL of the document
// is the one with the smallest position, not the first one visited.
void find_nul_string(const toml::node& node, const std::string& key_path, nul_string& first) {
  if (const toml::table* table = node.as_table()) {
    for (auto&& [key, child] : *table) find_nul_string(child, join(key_path, shown_key(key.str())), first);
  } else if (const toml::array* array = node.as_array()) {
    for (std::size_t i = 0; i < array->size(); ++i) {
      find_nul_string(*array->get(i), key_path + "[" + std::to_string(i) + "]", first);
    }
  } else if (const toml::value<std::string>* text = node.as_string()) {
    if (text->get().find('\0') == std::string::npos) return;
    if (first.node == nullptr || comes_before(node.source().begin, first.node->source().begin)) {
      first = nul_string{&node, key_path};
    }
  }
}

}  // namespace

void refuse_nul_strings(const toml::table& root, const std::string& source_name) {
  nul_string first;
  find_nul_string(root, "", first);
  if (first.node != nullptr) {
    toml_reader(source_name).fail_key(*first.node, first.key_path, "contains a NUL character (\\u0000)");
  }
}

toml::table parse_toml(const std::string& text, const std::string& source_name) {
  prescan_toml(text, source_name);
#if TOML_EXCEPTIONS
  toml::table root;
  try {
    root = toml::parse(std::string_view(text), std::string_view(source_name));
  } catch (const toml::parse_error& e) {
    fail_syntax(source_name, e);
  }
#else
  toml::parse_result result = toml::parse(std::string_view(text), std::string_view(source_name));
  if (!result) fail_syntax(source_name, result.error());
  toml::table root = std::move(result).table();
#endif
  refuse_nul_strings(root, source_name);
  return root;
}

const char* type_name(toml::node_type type) {
  switch (type) {
    case toml::node_type::none: return "nothing";
    case toml::node_type::table: return "table";
    case toml::node_type::array: return "array";
    case toml::node_type::string: return "string";
    case toml::node_type::integer: return "integer";
    case toml::node_type::floating_point: return "floating-point";
    case toml::node_type::boolean: return "boolean";
    case toml::node_type::date: return "date";
    case toml::node_type::time: return "time";
    case toml::node_type::date_time: return "date-time";
  }
  return "unknown";
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string join(std::string_view table_path, std::string_view key) {
  if (table_path.empty()) return std::string(key);
  return std::string(table_path) + "." + std::string(key);
}

// ---------------------------------------------------------------------------------------------------------
// toml_reader: error reporting

error_location toml_reader::location(const toml::source_region& region, std::string key) const {
  // Every node of a parsed document has a position. A node without one was set in code (a document built by
  // the C ABI's typed setters, c_api_config.h): no file, line or column of text the user did not write, only
  // the key.
  if (region.begin.line == 0) return error_location{"", 0, 0, std::move(key)};
  const auto column = region.begin.column == 0 ? 1u : region.begin.column;
  return error_location{source_, region.begin.line, column, std::move(key)};
}

std::string toml_reader::where(const toml::source_region& region) const {
  const error_location at = location(region);
  return at.file + ":" + std::to_string(at.line) + ":" + std::to_string(at.column);
}

void toml_reader::fail_at(const toml::source_region& region, const std::string& what) const {
  throw error(location(region), what);
}

void toml_reader::fail_key(const toml::node& node, const std::string& key_path, const std::string& what) const {
  throw error(location(node.source(), key_path), what);
}

void toml_reader::fail_type(const toml::node& node, const std::string& key_path, const char* expected) const {
  std::string got = type_name(node.type());
  // A value set in code is shown with its type (in a file, the line and column show it).
  if (node.source().begin.line == 0) {
    if (const auto* integer = node.as_integer()) got += " " + std::to_string(integer->get());
    if (const auto* number = node.as_floating_point()) got += " " + number_text(number->get());
    if (const auto* boolean = node.as_boolean()) got += boolean->get() ? " true" : " false";
    if (const auto* text = node.as_string()) got += " " + quoted(text->get());
  }
  fail_key(node, key_path, std::string("expected ") + expected + ", got " + got);
}

// ---------------------------------------------------------------------------------------------------------
// toml_reader: structure

void toml_reader::check_keys(const toml::table& table, std::string_view table_path,
                             array_view<std::string_view> allowed, std::string_view schema_doc,
                             array_view<key_home> homes) const {
  for (auto&& [key, node] : table) {
    (void)node;
    const std::string_view name = key.str();
    if (contains(allowed, name)) continue;
    // The key as written, control characters escaped (it is printed to the user's terminal).
    const std::string shown = detail::quoted(join(table_path, name));
    std::string message = "unknown key '" + shown.substr(1, shown.size() - 2) + "'";
    std::string_view best;
    std::size_t best_distance = 3;  // suggest only close matches
    // Beyond kMaxHintKeyLength no schema key is within distance 3, so the quadratic distance is skipped.
    for (const std::string_view candidate :
         name.size() <= kMaxHintKeyLength ? allowed : array_view<std::string_view>{}) {
      const std::size_t distance = edit_distance(name, candidate);
      if (distance < best_distance) {
        best_distance = distance;
        best = candidate;
      }
    }
    if (!best.empty()) {
      message += " (did you mean '" + join(table_path, best) + "'?)";
    } else if (table_path.empty()) {
      // A key written at the top level that belongs in a table (HF config.json keeps model_type there).
      for (const key_home& home : homes) {
        if (contains(home.keys, name)) {
          message += " (did you mean '" + join(home.table, name) + "' in table [" + std::string(home.table) + "]?)";
          break;
        }
      }
    } else {
      message += " (not in the schema, see " + std::string(schema_doc) + ")";
    }
    fail_at(key.source(), message);
  }
}

const toml::table* toml_reader::optional_table(const toml::table& root, std::string_view key) const {
  const toml::node* node = root.get(key);
  if (node == nullptr) return nullptr;
  if (!node->is_table()) fail_type(*node, std::string(key), "a table");
  return node->as_table();
}

const toml::node& toml_reader::required_node(const toml::table& table, std::string_view table_path,
                                             std::string_view key) const {
  const toml::node* node = table.get(key);
  if (node == nullptr) fail_at(table.source(), "required key '" + join(table_path, key) + "' is missing");
  return *node;
}

// ---------------------------------------------------------------------------------------------------------
// toml_reader: scalars

std::string toml_reader::string_value(const toml::node& node, const std::string& key_path) const {
  if (!node.is_string()) fail_type(node, key_path, "a string");
  return node.as_string()->get();
}

bool toml_reader::bool_value(const toml::node& node, const std::string& key_path) const {
  if (!node.is_boolean()) fail_type(node, key_path, "a boolean");
  return node.as_boolean()->get();
}

std::int64_t toml_reader::int_value(const toml::node& node, const std::string& key_path, int_bounds bounds) const {
  if (!node.is_integer()) fail_type(node, key_path, "an integer");
  const std::int64_t value = node.as_integer()->get();
  if (value < bounds.minimum) {
    const std::string bound = bounds.minimum == 1 ? "> 0" : ">= " + std::to_string(bounds.minimum);
    fail_key(node, key_path, "must be " + bound + " (got " + std::to_string(value) + ")");
  }
  if (value > bounds.maximum) {
    fail_key(node, key_path,
             "too large: must be <= " + bound_text(bounds.maximum) + " (got " + std::to_string(value) + ")");
  }
  return value;
}

double toml_reader::double_value(const toml::node& node, const std::string& key_path, double_bounds bounds) const {
  double value = 0;
  if (node.is_floating_point()) {
    value = node.as_floating_point()->get();
  } else if (node.is_integer()) {
    value = static_cast<double>(node.as_integer()->get());
  } else {
    fail_type(node, key_path, "a number");
  }
  if (!std::isfinite(value)) fail_key(node, key_path, "must be finite (got " + number_text(value) + ")");
  const bool exclusive = bounds.minimum_kind == lower_bound::exclusive;
  if (exclusive ? !(value > bounds.minimum) : value < bounds.minimum) {
    fail_key(node, key_path,
             std::string("must be ") + (exclusive ? "> " : ">= ") + number_text(bounds.minimum) + " (got " +
                 number_text(value) + ")");
  }
  if (value > bounds.maximum) {
    fail_key(node, key_path,
             "too large: must be <= " + number_text(bounds.maximum) + " (got " + number_text(value) + ")");
  }
  return value;
}

std::string toml_reader::required_string(const toml::table& table, std::string_view path, std::string_view key) const {
  return string_value(required_node(table, path, key), join(path, key));
}

std::optional<std::string> toml_reader::optional_string(const toml::table& table, std::string_view path,
                                                        std::string_view key) const {
  const toml::node* node = table.get(key);
  if (node == nullptr) return std::nullopt;
  return string_value(*node, join(path, key));
}

bool toml_reader::required_bool(const toml::table& table, std::string_view path, std::string_view key) const {
  return bool_value(required_node(table, path, key), join(path, key));
}

std::optional<bool> toml_reader::optional_bool(const toml::table& table, std::string_view path,
                                               std::string_view key) const {
  const toml::node* node = table.get(key);
  if (node == nullptr) return std::nullopt;
  return bool_value(*node, join(path, key));
}

bool toml_reader::optional_bool(const toml::table& table, std::string_view path, std::string_view key,
                                bool fallback) const {
  return optional_bool(table, path, key).value_or(fallback);
}

std::int64_t toml_reader::required_int(const toml::table& table, std::string_view path, std::string_view key,
                                       int_bounds bounds) const {
  return int_value(required_node(table, path, key), join(path, key), bounds);
}

std::int64_t toml_reader::optional_int(const toml::table& table, std::string_view path, std::string_view key,
                                       int_bounds bounds, std::int64_t fallback) const {
  const toml::node* node = table.get(key);
  return node == nullptr ? fallback : int_value(*node, join(path, key), bounds);
}

std::optional<double> toml_reader::optional_double(const toml::table& table, std::string_view path,
                                                   std::string_view key, double_bounds bounds) const {
  const toml::node* node = table.get(key);
  if (node == nullptr) return std::nullopt;
  return double_value(*node, join(path, key), bounds);
}

double toml_reader::optional_double(const toml::table& table, std::string_view path, std::string_view key,
                                    double_bounds bounds, double fallback) const {
  return optional_double(table, path, key, bounds).value_or(fallback);
}

}  // namespace flopmeter::detail
