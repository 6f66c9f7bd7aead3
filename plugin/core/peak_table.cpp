// Dense peak FLOP/s per GPU as data, and the longest-name-first lookup.
//
// Every figure is the dense (no 2:4 sparsity) tensor-core peak of ONE GPU at the vendor's boost clock.
// NVIDIA's datasheets headline the sparsity figure; the dense figure is half of it, and the source note of
// each row says which number was halved. AMD's datasheets state dense figures directly.
// A row must name the variant: "H100" alone is ambiguous (SXM 989.4, NVL 835.5, PCIe 756.5), so there is no
// "H100" row and a bare "H100" is unknown (MFU n/a) rather than a guess.

#include "flopmeter/peak_table.h"

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
};

// Device names that identify a row but do not contain its name. Each is the name the driver reports.
struct peak_alias {
  const char* name;  // matched like a row name
  const char* row;   // the row it stands for
  const char* why;
};
constexpr peak_alias kAliases[] = {
  {"H100 80GB HBM3", "H100 SXM",  "CUDA device name of the H100 SXM5 80GB (\"NVIDIA H100 80GB HBM3\")"},
  {"A100 80GB PCIe", "A100 PCIe", "CUDA device name of the A100 PCIe 80GB (\"NVIDIA A100 80GB PCIe\")"},
};
// clang-format on

// Letters and digits only, uppercased: every other byte (spaces and all punctuation, ASCII or not) is dropped,
// so "NVIDIA A100-SXM4-80GB", "a100.sxm4/80gb" and "A100 SXM4 80GB" all read "NVIDIAA100SXM480GB" (the
// schema promises that punctuation is ignored; dropping only some of it let "H100.SXM" miss its row).
std::string normalise(const std::string& name) {
  std::string out;
  out.reserve(name.size());
  for (const char c : name) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x80 || std::isalnum(byte) == 0) continue;
    out.push_back(static_cast<char>(std::toupper(byte)));
  }
  return out;
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
    for (const peak_alias& alias : kAliases) all.push_back({normalise(alias.name), row_named(alias.row)});
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

std::optional<peak_match> find_peak(const std::string& device_name, peak_precision precision) {
  const std::string device = normalise(device_name);
  if (device.empty()) return std::nullopt;
  for (const candidate& c : candidates()) {
    if (c.entry == nullptr || device.find(c.key) == std::string::npos) continue;
    const double tflops =
        precision == peak_precision::fp8 ? c.entry->fp8_dense_tflops : c.entry->bf16_dense_tflops;
    if (!(tflops > 0)) return std::nullopt;  // the most specific row lacks this precision: no fallback
    return peak_match{c.entry, tflops};
  }
  return std::nullopt;
}

const char* to_string(peak_precision precision) {
  switch (precision) {
    case peak_precision::bf16:
      return "bf16";
    case peak_precision::fp8:
      return "fp8";
  }
  return "unknown";
}

}  // namespace flopmeter
