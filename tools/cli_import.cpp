// `flopmeter import`: the model TOML equivalent to a Hugging Face config.json, each value commented with
// where it came from (import_hf_config in the library does the work; this file is the command line and the
// output file).
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "cli.h"
#include "config/config_files.h"
#include "flopmeter/error.h"
#include "flopmeter/model_config.h"

namespace flopmeter::cli {

const char* const kImportUsage =
    "usage: flopmeter import CONFIG.json [-o MODEL.toml]\n"
    "\n"
    "Writes the flopmeter model TOML equivalent to a Hugging Face config.json (or a checkpoint directory\n"
    "that holds one): the fields that change FLOPs, each with a comment saying the line, column and JSON path\n"
    "it came from. Fields that do not change FLOPs (rope settings, token ids, dtype, ...) are left out. The\n"
    "TOML gives the same coefficients as the config.json (every command also reads the config.json directly).\n"
    "\n"
    "arguments:\n"
    "  CONFIG.json       a config.json, or a checkpoint directory that holds one\n"
    "options:\n"
    "  -o, --output F    write the TOML to F (replacing it) instead of standard output\n"
    "  -h, --help        show this help\n"
    "\n"
    "exit status: 0 on success, 1 when the config.json is invalid, F cannot be written or F is the config.json\n"
    "itself (refused, nothing written), 2 for a bad command line.\n";

namespace {

// Whether the file's first non-blank character starts a TOML comment, table header or key (a config.json
// starts with '{'). Reads at most 4 KiB: only called for a file that just failed to parse as JSON.
bool looks_like_toml(const std::string& path) {
  std::error_code ec;
  if (path.empty() || !std::filesystem::is_regular_file(path, ec)) return false;  // never open a FIFO
  std::ifstream in(path, std::ios::binary);
  char buffer[4096];
  in.read(buffer, sizeof buffer);
  for (std::streamsize i = 0; i < in.gcount(); ++i) {
    const char c = buffer[i];
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') continue;
    return c == '#' || c == '[' || std::isalpha(static_cast<unsigned char>(c)) != 0;
  }
  return false;
}

// Writes `text` to `path`; every failure (open, write, close) is an error naming the path and the cause.
void write_file(const std::string& path, const std::string& text) {
  const auto fail = [&](const char* verb) -> void {
    const int code = errno;
    throw error(error_location{path, 0, 0, {}},
                std::string("cannot ") + verb + " the TOML file: " + std::generic_category().message(code));
  };
  errno = 0;
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) fail("create");
  const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
  const int write_errno = errno;
  if (std::fclose(file) != 0 || !written) {
    if (!written) errno = write_errno;
    fail("write");
  }
}

// Refuses an output file that is the input config.json itself, by whatever path it is named (the same
// path, a symbolic link to it, a path through "..", a hard link): writing the TOML would destroy the input.
// Only existing files can be the same; a new output file cannot be the input.
void refuse_overwriting_input(const std::string& input, const std::string& output) {
  std::error_code ec;
  if (!std::filesystem::equivalent(input, output, ec) || ec) return;
  throw error(error_location{output, 0, 0, {}},
              "refusing to write the TOML over the input config.json '" + input +
                  "' (the same file): name another output file, e.g. -o " +
                  (std::filesystem::path(output).parent_path() / "model.toml").string() + "; nothing was written");
}

}  // namespace

int run_import(const std::vector<std::string>& args) {
  const std::string cmd = "import";
  const parsed_args parsed = parse_args(cmd, args, {{"-o", true}, {"--output", true}});
  if (parsed.help) {
    std::fputs(kImportUsage, stdout);
    return kExitOk;
  }
  if (parsed.positionals.empty()) throw usage_error(cmd, "missing the CONFIG.json argument");
  if (parsed.positionals.size() > 1) {
    throw usage_error(cmd, "unexpected argument '" + parsed.positionals[1] + "' (one config.json only)");
  }
  std::optional<std::string> output = parsed.single("-o");
  if (const std::optional<std::string> long_output = parsed.single("--output")) {
    if (output) throw usage_error(cmd, "option -o given more than once (as -o and --output)");
    output = long_output;
  }
  if (output && output->empty()) throw usage_error(cmd, "-o: the output file name is empty");
  // The file import reads (a checkpoint directory's config.json), checked against -o before anything is read.
  if (output) refuse_overwriting_input(detail::resolve_model_path(parsed.positionals[0]), *output);
  std::string toml;
  try {
    toml = import_hf_config(parsed.positionals[0]);
  } catch (const error& e) {
    // A model TOML given to import fails as JSON at its first '#' or '['; say what the file is instead.
    if (e.description().rfind("JSON syntax error", 0) == 0 && looks_like_toml(e.where().file)) {
      throw error(e.where(), e.description() +
                                 " (this looks like a TOML file: import reads a Hugging Face config.json, and a "
                                 "model TOML needs no import: every command reads it as it is)");
    }
    throw;
  }
  if (output) {
    write_file(*output, toml);
  } else {
    std::fputs(toml.c_str(), stdout);
  }
  return kExitOk;
}

}  // namespace flopmeter::cli
