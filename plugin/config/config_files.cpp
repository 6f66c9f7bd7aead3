// plugin/config/config_files.cpp — reading a config file and finding a model's config (see config_files.h).

#include "config/config_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

#include "flopmeter/error.h"

namespace flopmeter::detail {
namespace {

// The operating system's reason, in the words of the messages: "no such file" for ENOENT (what users and
// the tests have always read), strerror's text otherwise ("permission denied", "too many levels of symbolic
// links", "not a directory" for a path through a file, ...).
std::string os_reason(int code) {
  if (code == ENOENT) return "no such file";
  std::string text = std::generic_category().message(code);
  if (!text.empty()) text[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[0])));
  return text;
}

const char* file_kind(std::filesystem::file_type type) {
  switch (type) {
    case std::filesystem::file_type::directory: return "is a directory";
    case std::filesystem::file_type::fifo: return "not a regular file (a FIFO)";
    case std::filesystem::file_type::socket: return "not a regular file (a socket)";
    case std::filesystem::file_type::character: return "not a regular file (a character device)";
    case std::filesystem::file_type::block: return "not a regular file (a block device)";
    default: return "not a regular file";
  }
}

// Closes a file descriptor on every path out of read_file.
struct fd_closer {
  int fd;
  ~fd_closer() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::string read_file(const std::string& path, std::string_view what) {
  const std::string role(what);
  const auto fail = [&](const std::string& verb, const std::string& reason) -> void {
    throw error(error_location{path, 0, 0, {}}, "cannot " + verb + " " + role + ": " + reason);
  };
  if (path.empty()) fail("open", "the path is empty");
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec) fail("open", os_reason(ec.value()));
  if (!std::filesystem::exists(status)) fail("open", "no such file");
  if (!std::filesystem::is_regular_file(status)) fail("open", file_kind(status.type()));
  // O_NONBLOCK: should the path be swapped for a FIFO after the check, open() must not wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) fail("open", os_reason(errno));
  const fd_closer closer{fd};
  struct stat info {};
  if (::fstat(fd, &info) != 0) fail("open", os_reason(errno));
  if (!S_ISREG(info.st_mode)) fail("open", "not a regular file");
  // Config files are a few KiB. A path that names something huge by mistake (a log, a dataset shard, a
  // /proc file whose size reads as 0) would otherwise be read whole into the trainer's memory before the
  // syntax error, so reading stops past kMaxConfigBytes, whatever size the file claims.
  constexpr std::size_t kMaxConfigBytes = std::size_t{16} << 20;
  std::string text;
  char chunk[1 << 16];
  while (true) {
    const ssize_t got = ::read(fd, chunk, sizeof chunk);
    if (got < 0) {
      if (errno == EINTR) continue;
      fail("read", os_reason(errno));
    }
    if (got == 0) break;
    text.append(chunk, static_cast<std::size_t>(got));
    if (text.size() > kMaxConfigBytes) fail("read", "larger than 16 MiB, so not a config file");
  }
  return text;
}

std::string resolve_model_path(const std::string& path) {
  std::error_code ec;
  if (!path.empty() && std::filesystem::is_directory(path, ec)) {
    const std::filesystem::path config = std::filesystem::path(path) / "config.json";
    if (!std::filesystem::exists(config, ec)) {
      throw error(error_location{path, 0, 0, {}},
                  "cannot open model config: a directory without a config.json (name a model TOML file, a "
                  "Hugging Face config.json, or a checkpoint directory that holds one)");
    }
    return config.string();
  }
  return path;
}

}  // namespace flopmeter::detail
