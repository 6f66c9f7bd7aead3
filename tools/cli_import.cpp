// `flopmeter import`: the model TOML equivalent to a Hugging Face config.json, each value commented with
// where it came from (import_hf_config in the library does the work; this file is the command line and the
// output file).
#include <cerrno>
#include <cstdio>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "cli.h"
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
    "exit status: 0 on success, 1 when the config.json is invalid or F cannot be written, 2 for a bad command\n"
    "line.\n";

namespace {

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
  const std::string toml = import_hf_config(parsed.positionals[0]);
  if (output) {
    write_file(*output, toml);
  } else {
    std::fputs(toml.c_str(), stdout);
  }
  return kExitOk;
}

}  // namespace flopmeter::cli
