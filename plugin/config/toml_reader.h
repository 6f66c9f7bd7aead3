// plugin/config/toml_reader.h — internal: the TOML++ helpers both config loaders share (model_toml.cpp for the
// model file, throughput_config.cpp for the plugin file). Not installed; TOML++ never reaches include/.
//
// Every problem throws flopmeter::error. Messages read
//   FILE:LINE:COL: key 'a.b': <what is wrong>
// where LINE:COL is the start of the offending value (for an unknown key: of the key itself; for a missing
// key: of the enclosing table's header, or 1:1 for the document root). Syntax errors read
//   FILE:LINE:COL: TOML syntax error: <TOML++'s description>
// Thread-safety: a toml_reader holds only its source name; the free functions share no state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <toml++/toml.h>

#include "config/config_files.h"  // read_file, which every TOML loader calls before parse_toml
#include "flopmeter/array_view.h"
#include "flopmeter/error.h"

namespace flopmeter::detail {

// Limits of the pre-scan that runs before TOML++ sees a document. TOML++ parses dotted keys, table headers
// and nested arrays / inline tables recursively, so a header of 35,000 parts overflowed its stack (and the
// trainer that loaded the plugin). No config needs more than a handful of either.
constexpr int kMaxKeyParts = 64;      // parts of one dotted key or table header: a.b.c has 3
constexpr int kMaxNestingDepth = 64;  // arrays and inline tables inside one another

// The bounded pre-scan alone (linear in the text, no recursion, no allocation beyond a few counters):
// throws "SOURCE:LINE:COL: <what>" at the first part or bracket past a limit. parse_toml() calls it.
void prescan_toml(std::string_view text, const std::string& source_name);

// Parses TOML text after prescan_toml(); a syntax error becomes "SOURCE:LINE:COL: TOML syntax error: ...".
// Then refuse_nul_strings(): no string of a parsed document holds a NUL.
toml::table parse_toml(const std::string& text, const std::string& source_name);

// Throws "SOURCE:LINE:COL: key 'a.b[2]': contains a NUL character (\u0000)" for the first string value (in
// document order) that holds one. TOML allows "\u0000" in a basic string, but every string flopmeter reads
// ends up as a path, a name or a message, where a NUL cuts the text short: `config = "m.toml\u0000junk"`
// would open m.toml, and a message through the C ABI would end at the NUL. So both loaders (model TOML and
// plugin TOML, through parse_toml) refuse it before reading a key.
void refuse_nul_strings(const toml::table& root, const std::string& source_name);

// Longest key the "did you mean" hint compares: an edit distance costs length x length, so a multi-megabyte
// unknown key would take seconds. Longer keys get no hint (no schema key is near that long).
constexpr std::size_t kMaxHintKeyLength = 64;

// "integer", "string", ... as used in "expected an integer, got string".
const char* type_name(toml::node_type type);

// Levenshtein distance, for "did you mean" hints on unknown keys. O(a x b): callers bound the lengths
// (kMaxHintKeyLength).
std::size_t edit_distance(std::string_view a, std::string_view b);

// "table.key", or "key" for the root table.
std::string join(std::string_view table_path, std::string_view key);

// Inclusive integer bounds. Powers of two from 2^16 up are printed as "2^31 = 2147483648".
struct int_bounds {
  std::int64_t minimum = 0;
  std::int64_t maximum = std::int64_t{1} << 31;
};

// Bounds of a floating-point value (an integer value is accepted and converted). Non-finite values (TOML's
// nan, inf) are always rejected.
enum class lower_bound { inclusive, exclusive };
struct double_bounds {
  double minimum = -std::numeric_limits<double>::max();
  lower_bound minimum_kind = lower_bound::inclusive;
  double maximum = std::numeric_limits<double>::max();  // inclusive
};

// A table of a root document and the keys the schema allows in it (for "did you mean 'x.y' in table [x]?").
struct key_home {
  std::string_view table;
  array_view<std::string_view> keys;
};

// Reads one parsed document; every error names `source_name`. One instance per document.
class toml_reader {
 public:
  explicit toml_reader(std::string source_name) : source_(std::move(source_name)) {}

  const std::string& source_name() const { return source_; }

  // --- error reporting ---------------------------------------------------------------------------------

  std::string where(const toml::source_region& region) const;  // "FILE:LINE:COL"
  error_location location(const toml::source_region& region, std::string key = {}) const;
  [[noreturn]] void fail_at(const toml::source_region& region, const std::string& what) const;
  [[noreturn]] void fail_key(const toml::node& node, const std::string& key_path, const std::string& what) const;
  [[noreturn]] void fail_type(const toml::node& node, const std::string& key_path, const char* expected) const;

  // --- structure ---------------------------------------------------------------------------------------

  // Rejects keys of `table` not in `allowed` (typo protection). The hint is the closest allowed key; else,
  // at the root, the table in `homes` that has the key; else, below the root, a pointer to `schema_doc`.
  void check_keys(const toml::table& table, std::string_view table_path, array_view<std::string_view> allowed,
                  std::string_view schema_doc, array_view<key_home> homes = {}) const;

  // The sub-table `key` of the root, nullptr when absent; fails when it is not a table.
  const toml::table* optional_table(const toml::table& root, std::string_view key) const;
  const toml::node& required_node(const toml::table& table, std::string_view table_path, std::string_view key) const;

  // --- scalars (key_path names the key in errors) ------------------------------------------------------

  std::string string_value(const toml::node& node, const std::string& key_path) const;
  bool bool_value(const toml::node& node, const std::string& key_path) const;
  std::int64_t int_value(const toml::node& node, const std::string& key_path, int_bounds bounds) const;
  double double_value(const toml::node& node, const std::string& key_path, double_bounds bounds) const;

  std::string required_string(const toml::table& table, std::string_view path, std::string_view key) const;
  std::optional<std::string> optional_string(const toml::table& table, std::string_view path,
                                             std::string_view key) const;
  bool required_bool(const toml::table& table, std::string_view path, std::string_view key) const;
  std::optional<bool> optional_bool(const toml::table& table, std::string_view path, std::string_view key) const;
  bool optional_bool(const toml::table& table, std::string_view path, std::string_view key, bool fallback) const;
  std::int64_t required_int(const toml::table& table, std::string_view path, std::string_view key,
                            int_bounds bounds) const;
  std::int64_t optional_int(const toml::table& table, std::string_view path, std::string_view key, int_bounds bounds,
                            std::int64_t fallback) const;
  std::optional<double> optional_double(const toml::table& table, std::string_view path, std::string_view key,
                                        double_bounds bounds) const;
  double optional_double(const toml::table& table, std::string_view path, std::string_view key, double_bounds bounds,
                         double fallback) const;

 private:
  std::string source_;
};

}  // namespace flopmeter::detail
