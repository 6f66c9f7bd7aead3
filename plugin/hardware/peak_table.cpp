// Dense peak FLOP/s per GPU as data, and the longest-name-first lookup.
//
// Every figure is the dense (no 2:4 sparsity) tensor-core peak of ONE GPU at the vendor's boost clock.
// NVIDIA's datasheets headline the sparsity figure; the dense figure is half of it, and the source note of
// each row says which number was halved. AMD's datasheets state dense figures directly.
// A row must name the variant: "H100" alone is ambiguous (SXM 989.4, NVL 835.5, PCIe 756.5), so there is no
// "H100" row and a bare "H100" is unknown (MFU n/a) rather than a guess.

#include "flopmeter/peak_table.h"

#include "flopmeter/error.h"  // printable_text

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace flopmeter {
namespace {

// clang-format off
constexpr peak_entry kRows[] = {
  // name        bf16 dense  fp8 dense  source
  {"A100 SXM",   312.0,      0.0,
   "NVIDIA A100 datasheet (SXM4): BF16 312 TFLOP/s dense (624 with sparsity); Ampere has no FP8 tensor cores"},
  {"A100 PCIe",  312.0,      0.0,
   "NVIDIA A100 datasheet (PCIe): BF16 312 TFLOP/s dense (624 with sparsity); Ampere has no FP8 tensor cores"},
  {"H100 SXM",   989.4,      1978.9,
   "NVIDIA H100 datasheet (SXM5): BF16 1,979 / FP8 3,958 TFLOP/s with sparsity; dense = half the sparsity figure"},
  {"H100 PCIe",  756.5,      1513.0,
   "NVIDIA H100 datasheet (PCIe): BF16 1,513 / FP8 3,026 TFLOP/s with sparsity; dense = half the sparsity figure"},
  {"H100 NVL",   835.5,      1670.5,
   "NVIDIA H100 NVL datasheet, per GPU: BF16 1,671 / FP8 3,341 TFLOP/s with sparsity; dense = half the "
   "sparsity figure"},
  {"H200",       989.4,      1978.9,
   "NVIDIA H200 datasheet (SXM): BF16 1,979 / FP8 3,958 TFLOP/s with sparsity; dense = half the sparsity figure"},
  {"H200 NVL",   835.5,      1670.5,
   "NVIDIA H200 datasheet (NVL): BF16 1,671 / FP8 3,341 TFLOP/s with sparsity; dense = half the sparsity figure"},
  {"GH200",      989.4,      1978.9,
   "NVIDIA GH200 datasheet, Hopper GPU: BF16 1,979 / FP8 3,958 TFLOP/s with sparsity; dense = half the "
   "sparsity figure"},
  {"B200",       2250.0,     4500.0,
   "NVIDIA HGX B200 spec: BF16 36 / FP8 72 PFLOP/s per 8 GPUs with sparsity; dense = half, per GPU"},
  {"B300",       2250.0,     4500.0,
   "NVIDIA HGX B300 spec: BF16 36 / FP8 72 PFLOP/s per 8 GPUs with sparsity; dense = half, per GPU. Blackwell "
   "Ultra raises FP4 throughput but keeps B200's dense BF16 and FP8"},
  {"GB200",      2500.0,     5000.0,
   "NVIDIA GB200 NVL72 spec: BF16 360 / FP8 720 PFLOP/s per 72 GPUs with sparsity; dense = half, per GPU "
   "(higher than HGX B200: GB200's GPUs run at a higher power limit)"},
  {"GB300",      2500.0,     5000.0,
   "NVIDIA GB300 NVL72 spec: BF16 360 / FP8 720 PFLOP/s per 72 GPUs with sparsity; dense = half, per GPU "
   "(listed so that a GB300 is never taken for a B300)"},
  {"MI300X",     1307.4,     2614.9,
   "AMD Instinct MI300X datasheet: peak BF16 1,307.4 / FP8 2,614.9 TFLOP/s dense (sparsity doubles them)"},
  {"MI325X",     1307.4,     2614.9,
   "AMD Instinct MI325X datasheet: peak BF16 1,307.4 / FP8 2,614.9 TFLOP/s dense (same compute die as MI300X)"},
  {"MI355X",     2516.6,     5033.2,
   "AMD Instinct MI355X datasheet: peak BF16 2,516.6 / FP8 5,033.2 TFLOP/s dense (sparsity doubles them)"},
  {"L40S",       362.05,     733.0,
   "NVIDIA L40S datasheet: BF16 362.05 / FP8 733 TFLOP/s dense (733 / 1,466 with sparsity)"},
  // The export versions and the PCIe / workstation GPUs Qwen-family training also runs on.
  {"A800",       312.0,      0.0,
   "NVIDIA A800 datasheets (SXM4 80GB, PCIe 80GB, 40GB Active): BF16 624 TFLOP/s with sparsity, dense = half "
   "(the A100's tensor cores, with NVLink cut to 400 GB/s); Ampere has no FP8 tensor cores"},
  {"H800 SXM",   989.4,      1978.9,
   "NVIDIA H800 SXM5 spec: BF16 1,979 / FP8 3,958 TFLOP/s with sparsity (the H100 SXM's compute); dense = half "
   "the sparsity figure"},
  {"H800 PCIe",  756.5,      1513.0,
   "NVIDIA H800 PCIe 80GB datasheet: BF16 1,513 / FP8 3,026 TFLOP/s with sparsity; dense = half the sparsity "
   "figure"},
  {"H20",        148.0,      296.0,
   "NVIDIA HGX H20 spec: BF16 148 / FP8 296 TFLOP/s dense (the export Hopper: 78 SMs)"},
  {"L20",        119.5,      239.0,
   "NVIDIA L20 datasheet: BF16 119.5 / FP8 239 TFLOP/s dense (239 / 478 with sparsity)"},
  {"L40",        181.05,     362.0,
   "NVIDIA L40 datasheet: BF16 181.05 / FP8 362 TFLOP/s dense (362.1 / 724 with sparsity); not the L40S"},
  {"L4",         121.0,      242.5,
   "NVIDIA L4 datasheet: BF16 242 / FP8 485 TFLOP/s with sparsity; dense = half the sparsity figure"},
  {"A10",        125.0,      0.0,
   "NVIDIA A10 datasheet: BF16 125 TFLOP/s dense (250 with sparsity); Ampere has no FP8 tensor cores. Not the "
   "A10G (a different clock and peak), which is unknown here"},
  {"A40",        149.7,      0.0,
   "NVIDIA A40 datasheet: BF16 149.7 TFLOP/s dense with FP32 accumulate (299.4 with sparsity); Ampere has no "
   "FP8 tensor cores"},
  {"RTX 6000 Ada", 364.25,   728.5,
   "NVIDIA RTX 6000 Ada Generation datasheet: tensor performance 1,457 TFLOP/s (FP8 with sparsity): FP8 728.5 "
   "dense, BF16 (FP32 accumulate) half of that"},
  {"RTX PRO 6000 Blackwell Workstation", 503.8, 1007.6,
   "NVIDIA RTX PRO 6000 Blackwell Workstation Edition datasheet: 4,000 AI TOPS (FP4 with sparsity, 4,030.4): "
   "FP4 2,015.2, FP8 1,007.6, BF16 (FP32 accumulate) 503.8 dense. The Max-Q and Server Editions run at other "
   "clocks and have no row"},
  {"MI250X",     191.5,      0.0,
   "AMD Instinct MI250X datasheet: peak BF16 383.0 TFLOP/s dense per module of two GCDs; each GCD is one device, "
   "so 191.5 per GCD. CDNA 2 has no FP8"},
};

// Device names that identify a row but do not contain its name. Each is the name the driver reports.
constexpr peak_alias kAliases[] = {
  {"H100 80GB HBM3", "H100 SXM",  "CUDA device name of the H100 SXM5 80GB (\"NVIDIA H100 80GB HBM3\")"},
  {"A100 80GB PCIe", "A100 PCIe", "CUDA device name of the A100 PCIe 80GB (\"NVIDIA A100 80GB PCIe\")"},
  {"H800 80GB HBM3", "H800 SXM",  "CUDA device name of the H800 SXM5 80GB (\"NVIDIA H800 80GB HBM3\")"},
};
// clang-format on

bool is_ascii_alnum(char c) {
  const auto byte = static_cast<unsigned char>(c);
  return byte < 0x80 && std::isalnum(byte) != 0;
}

// Letters and digits only, uppercased: every other byte (spaces and all punctuation, ASCII or not) is dropped,
// so "NVIDIA A100-SXM4-80GB", "a100.sxm4/80gb" and "A100 SXM4 80GB" all read "NVIDIAA100SXM480GB" (the
// schema promises that punctuation is ignored; dropping only some of it let "H100.SXM" miss its row).
// `positions`, when given, receives the index in `name` of each character kept.
std::string normalise(const std::string& name, std::vector<std::size_t>* positions = nullptr) {
  std::string out;
  out.reserve(name.size());
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (!is_ascii_alnum(name[i])) continue;
    out.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(name[i]))));
    if (positions != nullptr) positions->push_back(i);
  }
  return out;
}

// Whether `key` occurs in the normalised device name as a whole model number: a key that ends in a digit
// ("A10", "L4", "H20") must not run on into more letters or digits of the name as written, so "NVIDIA A100",
// "NVIDIA A10G" and "NVIDIA RTX A4000" are not taken for the A10 or the A40 (their figures differ). A
// separator ends it: "NVIDIA H200 141GB" is an H200. Keys that end in a letter match anywhere ("A100 SXM" in
// "A100-SXM4-80GB").
bool occurs_as_model(const std::string& device, const std::vector<std::size_t>& positions, const std::string& name,
                     const std::string& key) {
  const bool ends_in_digit = !key.empty() && std::isdigit(static_cast<unsigned char>(key.back())) != 0;
  for (std::size_t at = device.find(key); at != std::string::npos; at = device.find(key, at + 1)) {
    if (!ends_in_digit) return true;
    const std::size_t after = positions[at + key.size() - 1] + 1;  // in `name`, after the key's last character
    if (after >= name.size() || !is_ascii_alnum(name[after])) return true;
  }
  return false;
}

struct candidate {
  std::string key;  // normalised row or alias name
  const peak_entry* entry;
};

const peak_entry* row_named(const char* name) {
  for (const peak_entry& row : peak_table()) {
    if (std::string(row.name) == name) return &row;
  }
  return nullptr;
}

// Row names and aliases, longest normalised name first (ties keep table order), so that the first key
// found in a device name is the most specific one: "GB200" before "B200", "GH200" before "H200".
const std::vector<candidate>& candidates() {
  static const std::vector<candidate> sorted = [] {
    std::vector<candidate> all;
    // Pointers into peak_table()'s vector, so that a match's entry is one of the rows it lists.
    for (const peak_entry& row : peak_table()) all.push_back({normalise(row.name), &row});
    for (const peak_alias& alias : peak_aliases()) all.push_back({normalise(alias.name), row_named(alias.row)});
    std::stable_sort(all.begin(), all.end(),
                     [](const candidate& a, const candidate& b) { return a.key.size() > b.key.size(); });
    return all;
  }();
  return sorted;
}

}  // namespace

const std::vector<peak_entry>& peak_table() {
  static const std::vector<peak_entry> rows(std::begin(kRows), std::end(kRows));
  return rows;
}

const std::vector<peak_alias>& peak_aliases() {
  static const std::vector<peak_alias> aliases(std::begin(kAliases), std::end(kAliases));
  return aliases;
}

std::optional<peak_match> find_peak(const std::string& device_name, peak_precision precision) {
  std::vector<std::size_t> positions;
  const std::string device = normalise(device_name, &positions);
  if (device.empty()) return std::nullopt;
  for (const candidate& c : candidates()) {
    if (c.entry == nullptr || !occurs_as_model(device, positions, device_name, c.key)) continue;
    const double tflops = precision == peak_precision::fp8 ? c.entry->fp8_dense_tflops : c.entry->bf16_dense_tflops;
    if (!(tflops > 0)) return std::nullopt;  // the most specific row lacks this precision: no fallback
    return peak_match{c.entry, tflops};
  }
  return std::nullopt;
}

bool is_auto_gpu(const std::string& gpu) {
  const std::size_t first = gpu.find_first_not_of(" \t");
  const std::size_t last = gpu.find_last_not_of(" \t");
  if (first == std::string::npos || last - first + 1 != 4) return false;
  std::string word = gpu.substr(first, 4);
  for (char& c : word) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return word == "auto";
}

peak_resolution resolve_peak(const std::string& gpu, const std::string& device_name, peak_precision precision,
                             const std::string& no_device_reason) {
  peak_resolution out;
  const bool detect = is_auto_gpu(gpu);
  out.device = detect ? device_name : gpu;
  // The known names, so the message says how to fix it.
  std::string known;
  for (const peak_entry& entry : peak_table()) known += std::string(known.empty() ? "" : ", ") + entry.name;
  const std::string fix = "Set peak_tflops_per_gpu, or gpu to one of: " + known +
                          " (`flopmeter peaks` lists them "
                          "with their sources).";
  if (detect && device_name.empty()) {
    out.warning = "gpu = \"auto\" found no GPU" + (no_device_reason.empty() ? "" : " (" + no_device_reason + ")") +
                  "; perf/mfu will not be reported. " + fix;
    return out;
  }
  out.match = find_peak(out.device, precision);
  if (!out.match) {
    out.warning = std::string("no ") + to_string(precision) + " peak FLOP/s for GPU '" + printable_text(out.device) +
                  "'" + (detect ? " (the device gpu = \"auto\" found)" : "") + "; perf/mfu will not be reported. " +
                  fix;
  }
  return out;
}

const char* to_string(peak_precision precision) {
  switch (precision) {
    case peak_precision::bf16: return "bf16";
    case peak_precision::fp8: return "fp8";
  }
  return "unknown";
}

}  // namespace flopmeter
