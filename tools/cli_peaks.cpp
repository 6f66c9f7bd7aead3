// `flopmeter peaks`: the dense-peak table MFU is computed against, with the source of every figure, and which
// row a device name resolves to (the lookup the plugin's [peak] gpu does).
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "cli.h"
#include "flopmeter/error.h"
#include "flopmeter/peak_table.h"

namespace flopmeter::cli {

const char* const kPeaksUsage =
    "usage: flopmeter peaks [DEVICE] [--json]\n"
    "\n"
    "Prints the dense (no sparsity) peak TFLOP/s per GPU that MFU is computed against, bf16 and fp8, with the\n"
    "source of each figure, and the device names that stand for a row. With DEVICE (a name as the plugin's\n"
    "[peak] gpu takes it, e.g. the one torch.cuda.get_device_name() reports), prints the row it resolves to:\n"
    "case, spaces and punctuation are ignored, the longest name wins, and a name that ends in a digit must not\n"
    "run on into more letters or digits (\"NVIDIA A100\" is not an A10).\n"
    "\n"
    "arguments:\n"
    "  DEVICE          optional: a GPU name to look up\n"
    "options:\n"
    "  --json          print JSON: {\"rows\": [{name, bf16_dense_tflops, fp8_dense_tflops (null without FP8),\n"
    "                  source}], \"aliases\": [{name, row, source}]}; with DEVICE {device, row,\n"
    "                  bf16_dense_tflops, fp8_dense_tflops, source}\n"
    "  -h, --help      show this help\n"
    "\n"
    "exit status: 0 on success, 1 when DEVICE matches no row (MFU would not be reported), 2 for a bad command\n"
    "line.\n";

namespace {

// The figure of one precision, or JSON null / "-" when the row lacks it.
std::optional<double> figure(const peak_entry& row, peak_precision precision) {
  const double value = precision == peak_precision::fp8 ? row.fp8_dense_tflops : row.bf16_dense_tflops;
  return value > 0 ? std::optional<double>(value) : std::nullopt;
}

void add_figures(json_object& object, const peak_entry& row) {
  for (const peak_precision precision : {peak_precision::bf16, peak_precision::fp8}) {
    const std::string key = std::string(to_string(precision)) + "_dense_tflops";
    if (const auto value = figure(row, precision)) {
      object.number(key, *value);
    } else {
      object.null(key);
    }
  }
}

std::string figure_text(const peak_entry& row, peak_precision precision) {
  const auto value = figure(row, precision);
  return value ? json_number(*value) : std::string("-");
}

int print_device(const std::string& device, bool json) {
  const std::optional<peak_match> match = find_peak(device, peak_precision::bf16);
  if (!match) {
    throw error("no peak for GPU '" + device +
                "': MFU would not be reported (set [peak] tflops_per_gpu, or gpu "
                "to a name that `flopmeter peaks` lists)");
  }
  const peak_entry& row = *match->entry;
  if (json) {
    json_object object;
    object.string("device", device).string("row", row.name);
    add_figures(object, row);
    object.string("source", row.source);
    std::printf("%s\n", object.str().c_str());
    return kExitOk;
  }
  std::printf("%s -> %s: bf16 %s, fp8 %s dense TFLOP/s\n  source: %s\n", printable(device).c_str(), row.name,
              figure_text(row, peak_precision::bf16).c_str(), figure_text(row, peak_precision::fp8).c_str(),
              row.source);
  return kExitOk;
}

}  // namespace

int run_peaks(const std::vector<std::string>& args) {
  const parsed_args parsed = parse_args("peaks", args, {{"--json", false}});
  if (parsed.help) {
    std::fputs(kPeaksUsage, stdout);
    return kExitOk;
  }
  if (parsed.positionals.size() > 1) {
    throw usage_error("peaks", "unexpected argument '" + parsed.positionals[1] + "' (one DEVICE only)");
  }
  const bool json = parsed.has("--json");
  if (!parsed.positionals.empty()) return print_device(parsed.positionals[0], json);

  if (json) {
    std::string rows;
    for (const peak_entry& row : peak_table()) {
      json_object object;
      object.string("name", row.name);
      add_figures(object, row);
      object.string("source", row.source);
      rows += (rows.empty() ? "" : ", ") + object.str();
    }
    std::string aliases;
    for (const peak_alias& alias : peak_aliases()) {
      json_object object;
      object.string("name", alias.name).string("row", alias.row).string("source", alias.source);
      aliases += (aliases.empty() ? "" : ", ") + object.str();
    }
    json_object document;
    document.raw("rows", "[" + rows + "]").raw("aliases", "[" + aliases + "]");
    std::printf("%s\n", document.str().c_str());
    return kExitOk;
  }
  std::printf("dense peak TFLOP/s per GPU (no sparsity), the denominator of MFU\n\n");
  std::printf("  %-36s %9s %9s  %s\n", "gpu", "bf16", "fp8", "source");
  for (const peak_entry& row : peak_table()) {
    std::printf("  %-36s %9s %9s  %s\n", row.name, figure_text(row, peak_precision::bf16).c_str(),
                figure_text(row, peak_precision::fp8).c_str(), row.source);
  }
  std::printf("\ndevice names that stand for a row:\n");
  for (const peak_alias& alias : peak_aliases()) {
    std::printf("  %-36s -> %s  (%s)\n", alias.name, alias.row, alias.source);
  }
  std::printf("\nfp8 '-': the GPU has no FP8 tensor cores (an fp8 run on it reports no MFU).\n");
  return kExitOk;
}

}  // namespace flopmeter::cli
