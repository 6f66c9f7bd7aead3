// Bad-input tables over a known-good config document: each row edits one unique piece of its text and pins
// the exact message the loader must give (the TOML and config.json loader tests are driven this way).
#pragma once

#include <gtest/gtest.h>

#include <string>

namespace flopmeter::testing {

// `doc` with the single occurrence of `from` replaced by `to` (fails the test if `from` is not unique, so a
// row can never edit the wrong line).
inline std::string replace_once(const std::string& doc, const std::string& from, const std::string& to) {
  const auto at = doc.find(from);
  if (at == std::string::npos || doc.find(from, at + 1) != std::string::npos) {
    ADD_FAILURE() << "'" << from << "' does not occur exactly once in the base document";
    return doc;
  }
  return doc.substr(0, at) + to + doc.substr(at + from.size());
}

// One row: `from` -> `to` within the base document, and the expected message (or the part of it after a
// prefix the test supplies, such as a temporary file's path).
struct edit_case {
  const char* name;
  const char* from;
  const char* to;
  const char* message;
};

// The fixture of a test over a table of edit_case rows: GetParam() is the row, edited(base) its document.
class edit_table : public ::testing::TestWithParam<edit_case> {
 protected:
  std::string edited(const std::string& base) const { return replace_once(base, GetParam().from, GetParam().to); }
  std::string expected_message() const { return GetParam().message; }
};

// The gtest name of a row-parameterised test: the row's name.
template <typename Row>
std::string row_name(const ::testing::TestParamInfo<Row>& info) {
  return std::string(info.param.name);
}

}  // namespace flopmeter::testing
