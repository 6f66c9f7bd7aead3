// plugin/output/sink_paths.h — internal: how the file sinks (sinks.cpp, tensorboard_sink.cpp) name a path
// they cannot open or create, so that every such message says the same things in the same words: the path
// (control characters escaped), what a relative path is relative to, the system's reason, and what to do
// where the reason implies it. Not installed. Thread-safety: reentrant (reads the working directory).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

#include "util/printable_text.h"

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

// What `mode` names, for "is a FIFO (named pipe), not a regular file": "a FIFO (named pipe)", "a socket", ...
inline const char* file_type_text(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISREG(mode)) return "a regular file";
  return "not a regular file";
}

// True for /dev/null and /dev/full (the same device numbers): character devices whose open() and write()
// never block, so a JSONL sink may write to them (to discard its records, or to test a full disk).
inline bool is_null_or_full_device(const struct stat& info) {
  if (!S_ISCHR(info.st_mode)) return false;
  for (const char* device : {"/dev/null", "/dev/full"}) {
    struct stat known {};
    if (::stat(device, &known) == 0 && S_ISCHR(known.st_mode) && known.st_rdev == info.st_rdev) return true;
  }
  return false;
}

// A JSONL sink writes only to a regular file (or /dev/null, /dev/full): anything else can block the trainer
// (open() of a FIFO without a reader waits for one; a terminal's write() waits while its output is paused)
// or is not a file at all. A directory is left to open(), whose EISDIR says the same (open_failure_reason).
inline bool jsonl_may_write(const struct stat& info) {
  return S_ISREG(info.st_mode) || S_ISDIR(info.st_mode) || is_null_or_full_device(info);
}

// `path` opened for a JSONL sink to append to, never blocking: refused before open() when it names something
// jsonl_may_write refuses, opened with O_NONBLOCK (a FIFO swapped in after the check then fails with ENXIO
// instead of waiting for a reader) and O_CLOEXEC, and what was opened checked again (the path may have been
// replaced in between). `fd` is -1 on failure, with `error` (errno) or `wrong_type` (file_type_text) set.
struct opened_sink_file {
  int fd = -1;
  int error = 0;
  const char* wrong_type = nullptr;
};
inline opened_sink_file open_jsonl_for_append(const std::string& path) {
  opened_sink_file out;
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0 && !jsonl_may_write(info)) {
    out.wrong_type = file_type_text(info.st_mode);
    return out;
  }
  out.fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0666);
  if (out.fd < 0) {
    out.error = errno;
    return out;
  }
  if (::fstat(out.fd, &info) == 0 && !jsonl_may_write(info)) {
    out.wrong_type = file_type_text(info.st_mode);
    ::close(out.fd);
    out.fd = -1;
    return out;
  }
  // Seek to the end, as fopen(path, "a") does: a file that opens for writing but cannot be appended to
  // (procfs's /proc/self/status: EINVAL) is refused here, at create, not by every later record.
  if (::lseek(out.fd, 0, SEEK_END) < 0) {
    out.error = errno;
    ::close(out.fd);
    out.fd = -1;
  }
  return out;
}

// What a JSONL sink says of a path that names something it must not write, after `shown_path` (sink_path_text):
// `"p" is a FIFO (named pipe): a JSONL sink writes only to a regular file (or /dev/null to discard its
// records), never to anything that could block the trainer; change [sinks] jsonl` for `setting` "[sinks] jsonl".
inline std::string jsonl_wrong_type_text(const std::string& shown_path, const char* wrong_type,
                                         std::string_view setting) {
  return shown_path + " is " + wrong_type + ": a JSONL sink writes only to a regular file (or /dev/null to " +
         "discard its records), never to anything that could block the trainer; change " + std::string(setting);
}

}  // namespace flopmeter::detail
