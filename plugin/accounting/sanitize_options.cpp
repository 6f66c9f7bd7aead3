// The one check of throughput_options (sanitize_options.h).
#include "accounting/sanitize_options.h"

#include <cstdio>
#include <string>

#include "flopmeter/error.h"
#include "flopmeter/megatron.h"
#include "flopmeter/model_config.h"

namespace flopmeter::detail {

namespace {

// An option error: the option's name (the throughput_options member) is its location, the text is the
// problem alone, as a plugin file's error is "FILE:LINE:COL: key 'logging.topk': must be >= 0 (got -1)".
[[noreturn]] void refuse_option(const char* option, const std::string& problem) {
  throw error(error_location{"", 0, 0, option}, problem);
}

}  // namespace

void sanitize_options(const throughput_options& options) {
  if (options.topk < kMinTopk) refuse_option("topk", "must be >= 0 (got " + std::to_string(options.topk) + ")");
  if (options.topk_interval_logs < 0) {
    refuse_option("topk_interval_logs",
                  "must be >= 0 (0: by the job's size; got " + std::to_string(options.topk_interval_logs) + ")");
  }
  if (!(options.tpi_multiplier >= setting_range::min_tpi_multiplier &&
        options.tpi_multiplier <= setting_range::max_tpi_multiplier)) {  // also false for NaN
    refuse_option("tpi_multiplier", "must be in [1, 1e6] (got " + std::to_string(options.tpi_multiplier) + ")");
  }
  if (options.collective_timeout.count() < kMinCollectiveTimeoutMs ||
      options.collective_timeout.count() > setting_range::max_timeout_ms) {
    refuse_option("collective_timeout",
                  "must be in [0, 3600000] ms (got " + std::to_string(options.collective_timeout.count()) + " ms)");
  }
  validate_model_spec(options.model);
  if (options.peak_tflops_per_gpu) {
    const double peak = *options.peak_tflops_per_gpu;
    if (!(peak >= setting_range::min_peak_tflops_per_gpu && peak <= setting_range::max_peak_tflops_per_gpu)) {
      char shown[64];
      std::snprintf(shown, sizeof shown, "%g", peak);  // 1e-300 shows as itself, not as 0.000000
      refuse_option("peak_tflops_per_gpu", std::string("must be in [0.001, 100000] TFLOP/s (got ") + shown + ")");
    }
  }
}

void refuse_failed_sanity_check(const model_spec& model) {
  for (const std::int64_t s : {4096, 8192, 32768}) {
    const check_report report = run_sanity_check(model, s);
    if (!report.pass) {
      std::string failed;
      for (const check_row& row : report.rows) {
        if (!row.pass) {
          failed += "\n  " + row.term + ": ratio " + std::to_string(row.ratio) + ", expected " +
                    std::to_string(row.expected_ratio);
        }
      }
      throw error("sanity check failed for model '" + model.name + "' at S=" + std::to_string(s) + ":" + failed);
    }
  }
}

}  // namespace flopmeter::detail
