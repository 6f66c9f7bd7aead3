// flopmeter/peak_table.h — dense peak FLOP/s per GPU, kept as data with a source note per row.
//
// Lookup matches the table's names as substrings of the given device name after normalisation (only
// letters and digits compare: case, spaces and all punctuation are ignored, so "H100.SXM" is "H100 SXM"),
// longest name first, so "NVIDIA GB200" finds GB200 before B200 and "H200" is never taken for "H20". A name
// that ends in a digit matches only where the device name does not go on with a letter or digit ("NVIDIA
// A100" is not an A10, "NVIDIA RTX A4000" not an A40). An unknown device yields no number: MFU is then not
// reported (never a fallback figure).
// Thread-safety: the table is immutable; lookups may run on any thread.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "flopmeter/export.h"

namespace flopmeter FLOPMETER_EXPORT {

enum class peak_precision { bf16, fp8 };

struct peak_entry {
  const char* name;          // the name matched, e.g. "H100 SXM"
  double bf16_dense_tflops;  // per GPU, dense (no sparsity)
  double fp8_dense_tflops;   // per GPU, dense; 0 when the device has no FP8 tensor cores
  const char* source;        // where the figure comes from
};

// All rows, in table order.
const std::vector<peak_entry>& peak_table();

// A device name that identifies a row without containing the row's name (the H100 SXM5 reports itself as
// "NVIDIA H100 80GB HBM3"); matched like a row name.
struct peak_alias {
  const char* name;    // e.g. "H100 80GB HBM3"
  const char* row;     // the peak_entry::name it stands for
  const char* source;  // why: the device name the driver reports
};

// All aliases, in table order.
const std::vector<peak_alias>& peak_aliases();

struct peak_match {
  const peak_entry* entry = nullptr;
  double tflops = 0;  // for the requested precision
};

// Finds the row for `device_name` (a table name or a CUDA/ROCm device name such as "NVIDIA H100 80GB HBM3").
// Returns nullopt for an unknown device or a precision the device lacks.
std::optional<peak_match> find_peak(const std::string& device_name, peak_precision precision);

const char* to_string(peak_precision precision);

// Whether a configured GPU name is "auto" (any case, surrounding spaces ignored): the device the process runs
// on names the row, read when the plugin starts.
bool is_auto_gpu(const std::string& gpu);

// What a configured GPU name gives, and the one warning to log when it gives no peak.
struct peak_resolution {
  std::string device;               // the name looked up: `gpu`, or for "auto" the detected device ("" if none)
  std::optional<peak_match> match;  // the row and its figure; nullopt: MFU is not reported
  std::string warning;              // set exactly when match is nullopt: names the device, or says that none was
                                    // found (no "flopmeter: " prefix)
};

// Resolves the configured `gpu` (a table name, a device name, or "auto") for `precision`. `device_name` is
// the name of the device the process runs on as its runtime reports it (torch.cuda.get_device_name(),
// cudaDeviceProp::name, cuDeviceGetName), "" when it has none; it is used only when `gpu` is "auto".
// `no_device_reason` says why there is none ("no CUDA driver"), for the warning. `gpu` must not be empty.
peak_resolution resolve_peak(const std::string& gpu, const std::string& device_name, peak_precision precision,
                             const std::string& no_device_reason = {});

}  // namespace FLOPMETER_EXPORT
