// flopmeter/peak_table.h — dense peak FLOP/s per GPU, kept as data with a source note per row.
//
// Lookup matches the table's names as substrings of the given device name after normalisation (only
// letters and digits compare: case, spaces and all punctuation are ignored, so "H100.SXM" is "H100 SXM"),
// longest name first, so "NVIDIA GB200" finds GB200 before B200 and "H200" is never taken for "H20". An
// unknown device yields no number: MFU is then not reported (never a fallback figure).
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

struct peak_match {
  const peak_entry* entry = nullptr;
  double tflops = 0;  // for the requested precision
};

// Finds the row for `device_name` (a table name or a CUDA/ROCm device name such as "NVIDIA H100 80GB HBM3").
// Returns nullopt for an unknown device or a precision the device lacks.
std::optional<peak_match> find_peak(const std::string& device_name, peak_precision precision);

const char* to_string(peak_precision precision);

}  // namespace FLOPMETER_EXPORT
