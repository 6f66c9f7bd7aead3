// flopmeter/error.h — the one exception type of flopmeter's setup tier.
//
// Contract: configuration loading, validation and the pure FLOP arithmetic throw `flopmeter::error`.
// An error has a *where* (file, line, column and key or field path, each optional) and a *what* (the
// problem alone, e.g. "must be > 0 (got 0)"), like toml++'s parse_error (source + description) or leveldb's
// Status. what() is the two formatted in one place (format_error below), e.g.
//   m.toml:6:15: key 'text_config.hidden_size': must be > 0 (got 0)
// Code that adds context builds a new error from where() and description() instead of editing the text.
// The hooks a trainer calls (`on_microbatch`, `on_log`, `flush`) never throw: they catch, count and log.
// Thread-safety: an `error` is an immutable value; copy it freely between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include "flopmeter/export.h"

namespace flopmeter FLOPMETER_EXPORT {

// Where a problem is. Every part is optional: "" and 0 mean "not known".
struct error_location {
  std::string file;         // a path or source name ("" when the input did not come from a file)
  std::uint32_t line = 0;   // 1-based
  std::uint32_t column = 0; // 1-based, in bytes
  std::string key;          // key or field path: "text_config.hidden_size", "vision_config.x[2]"
};

// `text` made safe to print on a terminal or write to a log: the control characters C0 (U+0000-U+001F), DEL
// and C1 (U+0080-U+009F; U+009B is CSI, which starts a terminal escape sequence) are written \u00XX, and each
// byte that is not part of valid UTF-8 is written \xHH. Everything else is kept, backslashes included, so
// applying it twice changes nothing. With `keep_newlines`, '\n' and '\t' are kept too (multi-line messages).
// Every error's what() and description() go through it: a file name, key or value from a hostile input
// cannot drive the terminal or the log viewer the message ends up in. Thread-safe (pure).
std::string printable_text(std::string_view text, bool keep_newlines = false);

// "FILE:LINE:COL: key 'KEY': WHAT", dropping each part that is not known ("FILE: WHAT", "key 'KEY': WHAT",
// "WHAT"), through printable_text (newlines kept). The only place flopmeter formats an error's location.
inline std::string format_error(const error_location& where, const std::string& what) {
  std::string text;
  if (!where.file.empty()) {
    text = where.file;
    if (where.line > 0) {
      text += ":" + std::to_string(where.line) + ":" + std::to_string(where.column > 0 ? where.column : 1);
    }
    text += ": ";
  }
  if (!where.key.empty()) text += "key '" + where.key + "': ";
  return printable_text(text + what, /*keep_newlines=*/true);
}

class error : public std::runtime_error {
 public:
  // A problem with no location (or one whose text already says where).
  explicit error(const std::string& what) : error(error_location{}, what) {}
  error(const error_location& where, const std::string& what)
      : std::runtime_error(format_error(where, what)),
        detail_(std::make_shared<const detail>(detail{where, printable_text(what, /*keep_newlines=*/true)})) {}

  // The location as given (raw: print it through printable_text, or print what()).
  const error_location& where() const noexcept { return detail_->where; }
  // The problem alone, without the location, printable: what() is format_error(where(), description()).
  const std::string& description() const noexcept { return detail_->what; }
  // The same problem, located in `file` when it had no file of its own (its key, line and column are kept):
  // how a caller that read the settings from `file` names it without editing the text.
  error in_file(const std::string& file) const {
    error_location located = where();
    if (located.file.empty()) located.file = file;
    return error(located, description());
  }

 private:
  struct detail {
    error_location where;
    std::string what;
  };
  std::shared_ptr<const detail> detail_;  // shared: copying an exception never throws
};

}  // namespace FLOPMETER_EXPORT
