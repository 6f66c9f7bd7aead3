// plugin/output/sink_paths.h — internal: how the file sinks (sinks.cpp, tensorboard_sink.cpp) name a path
// they cannot open or create, so that every such message says the same things in the same words: the path
// (control characters escaped), what a relative path is relative to, the system's reason, and what to do
// where the reason implies it. Not installed. Thread-safety: reentrant (reads the working directory).
#pragma once

#include <cerrno>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

#include "core/spec_rules.h"

namespace flopmeter::detail {

// `path` resolved against the working directory now, when the sinks are made: the file then stays where it
// was first opened even if the trainer changes directory later (a sink reopens its file after a failure).
// The path itself when it is absolute or the working directory cannot be read.
inline std::string absolute_sink_path(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  return ec ? path : absolute.string();
}

// `"out/m.jsonl" (relative to the working directory "/home/u/run")` for the path as written (`written`,
// after "{rank}" expansion) — what fopen() and create_directories() resolve a relative path against — or
// `"/abs/m.jsonl"` for an absolute one.
inline std::string sink_path_text(const std::string& written) {
  std::string text = flopmeter::detail::quoted(written);
  if (std::filesystem::path(written).is_relative()) {
    std::error_code ec;
    const std::filesystem::path cwd = std::filesystem::current_path(ec);
    text += ec ? " (relative to the working directory)"
               : " (relative to the working directory " + flopmeter::detail::quoted(cwd.string()) + ")";
  }
  return text;
}

// The system's reason for `code` (strerror's text, "I/O error" for 0) and, where the reason implies one,
// what to do, for a path the setting `setting` ("[sinks] jsonl") names:
//   ENOENT  No such file or directory (the directory "out" does not exist: create it first, or change
//           [sinks] jsonl); for "/a/b/m.jsonl" without /a: the directory "/a" on the path does not exist
//   EACCES  Permission denied (this process may not create or write "m.jsonl": change [sinks] jsonl, or
//           the permissions of its directory)
//   EISDIR  Is a directory (the path is a directory; [sinks] jsonl names a file, e.g. "logs/metrics.jsonl"),
//           given a `file_example` ("metrics.jsonl"); without one, the reason alone
//   ENOTDIR Not a directory (a part of the path that must be a directory is a file)
// Any other code: the reason alone (EINVAL for /proc/self/status, EROFS, ENOSPC, ...).
inline std::string open_failure_reason(int code, const std::string& path, std::string_view setting,
                                       std::string_view file_example = {}) {
  namespace fs = std::filesystem;
  std::string reason = code != 0 ? std::error_code(code, std::generic_category()).message() : "I/O error";
  const std::string change = "change " + std::string(setting);
  std::error_code ec;
  switch (code) {
    case ENOENT: {
      // The first directory on the path that is missing: "/a" for "/a/b/m.jsonl" when /a is missing, "../x"
      // for "../x/../m.jsonl".
      const fs::path parent = fs::path(path).parent_path();
      fs::path prefix;
      for (const fs::path& part : parent) {
        prefix /= part;
        if (!fs::exists(prefix, ec)) {
          return reason + " (the directory " + flopmeter::detail::quoted(prefix.string()) +
                 (prefix == parent ? "" : " on the path") + " does not exist: create it first, or " + change + ")";
        }
      }
      if (fs::is_symlink(fs::symlink_status(path, ec))) {
        const fs::path target = fs::read_symlink(path, ec);
        return reason + " (the path is a symbolic link to " + flopmeter::detail::quoted(target.string()) +
               ", which does not exist)";
      }
      return reason;
    }
    case EACCES:
    case EPERM:
      return reason + " (this process may not create or write " + flopmeter::detail::quoted(path) + ": " + change +
             ", or the permissions of its directory)";
    case EISDIR:
      if (file_example.empty()) return reason;
      return reason + " (the path is a directory; " + std::string(setting) + " names a file, e.g. " +
             flopmeter::detail::quoted((fs::path(path) / file_example).string()) + ")";
    case ENOTDIR: return reason + " (a part of the path that must be a directory is a file)";
    default: return reason;
  }
}

}  // namespace flopmeter::detail
