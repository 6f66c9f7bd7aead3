// Finding the shipped model configs and loading the model a command names.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "cli.h"
#include "flopmeter/error.h"
#include "flopmeter/model_config.h"

namespace flopmeter::cli {
namespace fs = std::filesystem;
namespace {

std::string& program_path() {
  static std::string path;
  return path;
}

bool is_dir(const fs::path& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

// The executable's directory: /proc/self/exe on Linux, else argv[0] when it contains a slash.
fs::path executable_dir() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && !self.empty()) return self.parent_path();
  const std::string& argv0 = program_path();
  if (argv0.find('/') != std::string::npos) {
    const fs::path absolute = fs::absolute(fs::path(argv0), ec);
    if (!ec) return absolute.parent_path();
  }
  return {};
}

// " (shipped: a, b, c)": the names a bare model argument may give, for the error when it names none of them.
std::string shipped_names(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ".toml") names.push_back(it->path().stem().string());
  }
  if (names.empty()) return " (it holds no *.toml)";
  std::sort(names.begin(), names.end());
  std::string list = " (shipped:";
  for (const std::string& name : names) list += " " + name + (&name == &names.back() ? ")" : ",");
  return list;
}

}  // namespace

void set_program_path(const char* argv0) { program_path() = argv0 != nullptr ? argv0 : ""; }

std::string model_configs_dir() {
  std::vector<std::string> looked;
  const char* env = std::getenv("FLOPMETER_MODEL_CONFIGS");
  if (env != nullptr && *env != '\0') {
    if (!is_dir(env)) {
      throw error(std::string("FLOPMETER_MODEL_CONFIGS='") + env + "' is not a directory");
    }
    return env;
  }
  looked.emplace_back("$FLOPMETER_MODEL_CONFIGS (unset)");
  const fs::path exe_dir = executable_dir();
  if (!exe_dir.empty()) {
    const fs::path installed = exe_dir / ".." / "share" / "flopmeter" / "model_configs";
    if (is_dir(installed)) return installed.lexically_normal().string();
    looked.push_back(installed.lexically_normal().string());
  }
#ifdef FLOPMETER_DEFAULT_MODEL_CONFIGS
  if (is_dir(FLOPMETER_DEFAULT_MODEL_CONFIGS)) return FLOPMETER_DEFAULT_MODEL_CONFIGS;
  looked.emplace_back(FLOPMETER_DEFAULT_MODEL_CONFIGS);
#endif
  std::string message = "no model_configs directory found (looked at:";
  for (const std::string& place : looked) message += " " + place + ";";
  message += " set FLOPMETER_MODEL_CONFIGS or name the model files)";
  throw error(message);
}

// Why a *.toml entry of the model configs directory is not a file flopmeter can read, or "" when it is a
// regular file (following symbolic links).
std::string unreadable_reason(const fs::path& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (fs::is_regular_file(status)) return "";
  if (fs::is_symlink(fs::symlink_status(path, ec)) && !fs::exists(status)) {
    std::error_code target_ec;
    const fs::path target = fs::read_symlink(path, target_ec);
    return "a dangling symbolic link (to '" + target.string() + "', which does not exist)";
  }
  if (ec) return ec.message();
  if (fs::is_directory(status)) return "a directory, not a model TOML file";
  return "not a regular file";
}

std::vector<std::string> default_model_files() {
  const std::string dir = model_configs_dir();
  std::vector<std::string> files;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& path = it->path();
    if (path.extension() != ".toml") continue;
    // Every *.toml is a model the run checks: one that cannot be read fails the run, naming it, rather
    // than being skipped while the rest "all pass".
    const std::string reason = unreadable_reason(path);
    if (!reason.empty()) {
      throw error(error_location{path.string(), 0, 0, {}}, "cannot read model file: " + reason +
                                                               " (every *.toml in the model configs directory '" + dir +
                                                               "' is loaded: fix or remove it)");
    }
    files.push_back(path.string());
  }
  if (ec) throw error("cannot list model configs directory '" + dir + "': " + ec.message());
  if (files.empty()) throw error("no *.toml model files in '" + dir + "'");
  std::sort(files.begin(), files.end(), [](const std::string& a, const std::string& b) {
    return fs::path(a).filename().string() < fs::path(b).filename().string();
  });
  return files;
}

model_spec load_model_argument(const std::string& argument) {
  if (argument.empty()) throw error("the model file name is empty");
  // A bare name ("qwen3_vl_2b" or "qwen3_vl_2b.toml") that is not a path here names a shipped config. Only
  // a name that does not exist at all is looked up: any other problem with the path (a symlink loop, a
  // directory the user cannot enter) is reported by the loader with its real cause.
  std::error_code ec;
  const fs::path path(argument);
  const bool absent = !fs::exists(fs::symlink_status(path, ec)) && (!ec || ec == std::errc::no_such_file_or_directory);
  if (absent && argument.find('/') == std::string::npos) {
    std::string dir;
    try {
      dir = model_configs_dir();
    } catch (const error&) {
      dir.clear();
    }
    if (!dir.empty()) {
      const std::string file = path.extension() == ".toml" ? argument : argument + ".toml";
      const fs::path shipped = fs::path(dir) / file;
      std::error_code shipped_ec;
      if (fs::is_regular_file(shipped, shipped_ec)) return load_model_spec(shipped.string());
      throw error(error_location{argument, 0, 0, {}},
                  "no such file, and no shipped config of that name in '" + dir + "'" + shipped_names(dir));
    }
  }
  // A model TOML, a config.json, or a checkpoint directory that holds one; errors cite file:line:col or the
  // operating system's reason.
  return load_model_spec(argument);
}

}  // namespace flopmeter::cli
