// The `flopmeter` command-line tool: sanity check, coefficients, what-if estimates, import, the peak table.
//
// main() dispatches to one run_* function per command and maps errors to exit codes: a bad command line is
// exit 2 with the message and a usage hint, a model/config or batch error (flopmeter::error) exit 1, and
// nothing escapes main — every exception is caught, so bad input never aborts the process.
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "cli.h"
#include "flopmeter/error.h"

#ifndef FLOPMETER_VERSION
#define FLOPMETER_VERSION "unknown"
#endif

namespace {

using namespace flopmeter::cli;

const char* const kTopUsage =
    "usage: flopmeter [--json] <command> [arguments] [--json]\n"
    "\n"
    "FLOP/MFU metrics for training vision-language models: the exact FLOP model of flopmeter next to the\n"
    "Megatron per-token constant.\n"
    "\n"
    "commands:\n"
    "  check          term-by-term sanity check of the FLOP model against the Megatron constant\n"
    "  coefficients   training FLOPs per token, per attention pair, per patch ... of one model\n"
    "  estimate       exact FLOPs of a described micro-batch, and how far the constant would be off\n"
    "  import         the model TOML equivalent to a Hugging Face config.json\n"
    "  peaks          the dense peak TFLOP/s per GPU that MFU is computed against, with sources\n"
    "\n"
    "A MODEL argument is a model TOML file, a Hugging Face config.json, a checkpoint directory that holds one,\n"
    "or the name of a shipped config (e.g. qwen3_vl_2b).\n"
    "\n"
    "options:\n"
    "  -h, --help     show this help (`flopmeter <command> --help` for a command's own)\n"
    "  --version      print the version\n"
    "  --json         before the command: the same as after it (JSON output)\n"
    "\n"
    "exit status: 0 success, 1 model/config error or a failed check, 2 bad command line.\n";

void print_version(const std::vector<std::string>& rest, const std::string& spelled) {
  if (!rest.empty()) throw usage_error("", "unexpected argument '" + rest[0] + "' after " + spelled);
  std::printf("flopmeter %s\n", FLOPMETER_VERSION);
}

int dispatch(std::vector<std::string> words) {
  // Global options before the command. --json is the commands' own option, so it moves behind the command
  // (first, so that a "--" among the command's words cannot turn it into a positional).
  bool json = false;
  while (!words.empty() && words[0] == "--json") {
    json = true;
    words.erase(words.begin());
  }
  if (words.empty()) throw usage_error("", json ? "missing command after --json" : "missing command");
  const std::string command = words[0];
  std::vector<std::string> rest(words.begin() + 1, words.end());
  if (command == "--help" || command == "-h") {
    std::fputs(kTopUsage, stdout);
    return kExitOk;
  }
  if (command == "help") {
    if (rest.empty()) {
      std::fputs(kTopUsage, stdout);
      return kExitOk;
    }
    return dispatch({rest[0], "--help"});
  }
  if (command == "--version" || command == "version") {
    print_version(rest, command);
    return kExitOk;
  }
  if (json) rest.insert(rest.begin(), "--json");
  if (command == "check") return run_check(rest);
  if (command == "coefficients") return run_coefficients(rest);
  if (command == "estimate") return run_estimate(rest);
  if (command == "import") return run_import(rest);
  if (command == "peaks") return run_peaks(rest);
  if (!command.empty() && command[0] == '-') throw usage_error("", "unknown option '" + command + "'");
  throw usage_error("", "unknown command '" + command + "'");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    set_program_path(argc > 0 ? argv[0] : nullptr);
    std::vector<std::string> words;
    for (int i = 1; i < argc; ++i) words.emplace_back(argv[i]);
    const int status = dispatch(words);
    if (std::fflush(stdout) != 0) {
      std::fprintf(stderr, "flopmeter: error: cannot write the output\n");
      return kExitFailure;
    }
    return status;
  } catch (const usage_error& e) {
    const std::string who = e.command().empty() ? "flopmeter" : "flopmeter " + e.command();
    std::fprintf(stderr, "%s: %s\n", printable(who).c_str(), printable(e.what(), true).c_str());
    std::fprintf(stderr, "Run '%s --help' for usage.\n", who.c_str());
    return kExitUsage;
  } catch (const flopmeter::error& e) {
    std::fprintf(stderr, "flopmeter: error: %s\n", printable(e.what(), true).c_str());
    return kExitFailure;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "flopmeter: error: out of memory\n");
    return kExitFailure;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flopmeter: internal error: %s\n", printable(e.what(), true).c_str());
    return kExitFailure;
  } catch (...) {
    std::fprintf(stderr, "flopmeter: internal error: unknown exception\n");
    return kExitFailure;
  }
}
