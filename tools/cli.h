// tools/cli.h — internals of the `flopmeter` command-line tool (not installed, not public API).
//
// The tool is split into: argument parsing (cli_args.cpp), JSON and number formatting (cli_format.cpp),
// finding and loading model files (cli_models.cpp), and one file per command (cli_check.cpp,
// cli_coefficients.cpp, cli_estimate.cpp, cli_import.cpp, cli_peaks.cpp); flopmeter_main.cpp dispatches and maps errors to exit codes.
//
// Error tiers, mapped to exit codes in main():
//   - usage_error: the command line itself is wrong (unknown command or option, malformed value). Exit 2.
//   - flopmeter::error: a model file or the described batch is wrong. Exit 1.
//   - a command's own result (check disagrees) is its return value: 0 or 1.
// Thread-safety: single-threaded tool; nothing here is shared.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "flopmeter/flop_model.h"
#include "flopmeter/model_spec.h"
#include "output/json_writer.h"

namespace flopmeter::cli {

// Exit codes of the tool.
constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;  // model/config error, invalid batch, or a sanity check that disagrees
constexpr int kExitUsage = 2;    // bad command line

// A bad command line. `command` is the subcommand ("" for the top level) so main() can print a usage hint.
class usage_error : public std::runtime_error {
 public:
  usage_error(std::string command, const std::string& message)
      : std::runtime_error(message), command_(std::move(command)) {}
  const std::string& command() const noexcept { return command_; }

 private:
  std::string command_;
};

// ---- argument parsing (cli_args.cpp) ----

// One option a command accepts, e.g. {"--docs", true}. Values are given as "--docs 1,2" or "--docs=1,2".
struct option_spec {
  const char* name = "";
  bool takes_value = false;
};

// A parsed command line of one subcommand, in the order given.
struct parsed_args {
  std::string command;  // for error messages
  std::vector<std::string> positionals;
  std::vector<std::pair<std::string, std::string>> options;  // (name, value); value "" for flags
  bool help = false;                                         // --help or -h was given

  bool has(const std::string& name) const;
  // All values of a repeatable option, in order.
  std::vector<std::string> all(const std::string& name) const;
  // The value of an option that may be given at most once; throws usage_error when repeated.
  std::optional<std::string> single(const std::string& name) const;
};

// Parses `args` (the words after the subcommand). "--" ends the options. Throws usage_error naming the
// offending word for an unknown option, a missing value, or a value given to a flag.
parsed_args parse_args(const std::string& command, const std::vector<std::string>& args,
                       const std::vector<option_spec>& specs);

// Strict integer parsing: optional '-', then decimal digits only, the whole text consumed, within int64.
// `what` names the argument in the message (e.g. "--seq-len"). All throw usage_error for `command`.
std::int64_t parse_positive_int(const std::string& command, const std::string& what, const std::string& text);
std::int64_t parse_non_negative_int(const std::string& command, const std::string& what, const std::string& text);
// "3,5,0" -> {3, 5, 0}; entries >= 0, no empty entries.
std::vector<std::int64_t> parse_length_list(const std::string& command, const std::string& what,
                                            const std::string& text);
// "1x2x2,2x4x4" -> grids (t, h, w), each a positive integer.
std::vector<image_grid> parse_grid_list(const std::string& command, const std::string& what, const std::string& text);

// "seed" / "complete" for --scope, through the library's parse_flop_scope (one grammar for the CLI and the
// plugin config); a bad value is a usage_error for `command`.
flop_scope parse_scope_option(const std::string& command, const std::string& text);

// --frozen vision,merger,text, --lora-rank R and --lora-targets q_proj,..., --recompute POLICY,
// --recompute-layers N, --recompute-every K, --recompute-vision and --indexer-trains of `parsed` (each given at
// most once;
// absent: everything trains, nothing is recomputed; recompute_layers counts one pipeline stage). A bad part or target name is a usage_error; whether the regime fits the
// model is checked when the coefficients are formed (flopmeter::error).
training_regime parse_regime_options(const parsed_args& parsed);
// `specs` and the options parse_regime_options reads (--frozen, --lora-*, --recompute*), for the commands
// that take the whole training regime (`coefficients`, `estimate`).
std::vector<option_spec> with_regime_options(std::vector<option_spec> specs);

// The help of those --recompute options, for a usage text whose descriptions start after INDENT (a string
// literal of spaces): one text for `coefficients` and `estimate`, each with its own column.
#define FLOPMETER_CLI_RECOMPUTE_HELP(INDENT)                                                           \
  "  --recompute POLICY\n" INDENT                                                                      \
  "activation recomputation, billed as hardware FLOPs beside the model FLOPs: none\n" INDENT           \
  "(default), full (the whole layer again: Megatron, torch reentrant checkpoint),\n" INDENT            \
  "full_early_stop (torch's non-reentrant checkpoint: a dense MLP's down projection does not\n" INDENT \
  "run again), selective (the attention core only), op (torchtitan's per-op policy: every\n" INDENT    \
  "second matmul of a layer); METRICS.md, \"Activation recomputation\"\n"                              \
  "  --recompute-layers N, --recompute-every K\n" INDENT                                               \
  "checkpoint only the first N decoder layers, or every K-th (layer i when (i+1) % K == 0)\n"          \
  "  --recompute-vision\n" INDENT                                                                      \
  "checkpoint the ViT blocks too\n"                                                                    \
  "  --indexer-trains\n" INDENT                                                                        \
  "bill a sparse-attention indexer's backward too (default: forward only, as the reference runs it)\n"

// ---- formatting (cli_format.cpp) ----

// JSON output goes through the library's one JSON writer (plugin/output/json_writer.h): shortest round-trip
// numbers, integral values without an exponent, NaN/Inf as null, control characters and invalid UTF-8
// escaped. json_object builds one object, keys in insertion order, with ", " and ": " separators.
using detail::json_number;
using detail::json_object;
using detail::json_string;

// Text (non-JSON) output of a string that came from a file or the command line (a model name, a path, an
// error message), through the library's printable_text (flopmeter/error.h): control characters (C0, DEL and
// the C1 range U+0080-U+009F, which terminals interpret as escape sequences) are written as \u00XX, and bytes
// that are not valid UTF-8 as \xHH, so a file cannot move the cursor, retitle the terminal or hide text.
// With `keep_newlines`, '\n' and '\t' stay (a multi-line error message).
std::string printable(const std::string& text, bool keep_newlines = false);

// "12,345,678" — an integer with thousands separators, for tables.
std::string group_digits(std::int64_t value);
// "1.032271e+11" — a compact float for tables (%.6e, or the exact integer when it has few digits).
std::string short_number(double value);
// "103.2 GFLOP" — a FLOP count with an SI prefix.
std::string si_flops(double flops);
// "3.4x" style ratio with enough digits to be useful.
std::string ratio_text(double ratio);

// ---- model files (cli_models.cpp) ----

// The directory of the shipped model configs: $FLOPMETER_MODEL_CONFIGS, else
// <dir of executable>/../share/flopmeter/model_configs, else the source tree's model_configs. Throws
// flopmeter::error when none exists.
std::string model_configs_dir();
// Every *.toml in model_configs_dir(), sorted by file name. Throws flopmeter::error when there is none, or
// when one is not a readable regular file (a dangling symlink, a directory, ...), naming it and why.
std::vector<std::string> default_model_files();
// Loads a model given as a path, or as a bare name ("qwen3_vl_2b") of a file in model_configs_dir().
// Throws flopmeter::error (nonexistent file, TOML or validation error with file:line:col).
model_spec load_model_argument(const std::string& argument);

// Records argv[0] so model_configs_dir() can find the executable when /proc/self/exe is unavailable.
void set_program_path(const char* argv0);

// ---- commands ----

int run_check(const std::vector<std::string>& args);
int run_coefficients(const std::vector<std::string>& args);
int run_estimate(const std::vector<std::string>& args);
int run_import(const std::vector<std::string>& args);
int run_peaks(const std::vector<std::string>& args);

// Usage texts (printed by --help and referenced by usage errors).
extern const char* const kCheckUsage;
extern const char* const kCoefficientsUsage;
extern const char* const kEstimateUsage;
extern const char* const kImportUsage;
extern const char* const kPeaksUsage;

}  // namespace flopmeter::cli
