// Fuzz target: the plugin TOML loader on arbitrary text (detail::parse_throughput_options, the text form of
// load_throughput_options). A relative model.config resolves against the source tree's plugin_configs/, so
// the shipped example's "../model_configs/qwen3_vl_2b.toml" and any shipped model can be reached.
//
// Invariants: it returns options or throws flopmeter::error; an error about the plugin text names the
// source ("fuzz_plugin.toml:LINE:COL: ..."), one about the model file names that file's resolved path.
// Accepted options are within the documented bounds, and the model they carry passes the checks of any
// accepted spec (fuzz::check_accepted_spec).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include <toml++/toml.h>

#include "flopmeter/error.h"
#include "flopmeter/model_config.h"
#include "flopmeter/throughput.h"
#include "fuzz_support.h"
#include "accounting/throughput_config.h"

namespace {

constexpr const char* kSource = "fuzz_plugin.toml";
const std::string kBaseDir = FLOPMETER_SOURCE_DIR "/plugin_configs";

bool starts_with(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }

// model.config of a document that parses, resolved the way the loader resolves it.
std::optional<std::string> model_path(const std::string& text) {
  try {
    const toml::table root = toml::parse(std::string_view(text), std::string_view(kSource));
    const std::optional<std::string> config = root["model"]["config"].value<std::string>();
    if (!config) return std::nullopt;
    const std::filesystem::path path(*config);
    return path.is_absolute() ? *config : (std::filesystem::path(kBaseDir) / path).string();
  } catch (const toml::parse_error&) {
    return std::nullopt;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace flopmeter;
  const std::string text = fuzz::input_text(data, size);
  throughput_options o;
  try {
    o = detail::parse_throughput_options(text, kSource, kBaseDir);
  } catch (const error& e) {
    const std::string message = e.what();
    if (starts_with(message, std::string(kSource) + ":")) return 0;
    const std::optional<std::string> model = model_path(text);
    FUZZ_CHECK(model && starts_with(message, *model + ":"),
               "the message names neither the plugin source nor the model file: " + message);
    return 0;
  }
  FUZZ_CHECK(o.parallel.tp >= 1 && o.parallel.cp >= 1 && o.parallel.pp >= 1, "a parallel size < 1 was accepted");
  FUZZ_CHECK(o.topk >= 0 && o.topk <= 1024, "topk out of [0, 1024] was accepted");
  FUZZ_CHECK(std::isfinite(o.tpi_multiplier) && o.tpi_multiplier >= 1.0, "tpi_multiplier < 1 was accepted");
  FUZZ_CHECK(o.collective_timeout.count() >= 0, "a negative collective_timeout_ms was accepted");
  FUZZ_CHECK(!o.peak_tflops_per_gpu || (std::isfinite(*o.peak_tflops_per_gpu) && *o.peak_tflops_per_gpu > 0),
             "a non-positive or non-finite tflops_per_gpu was accepted");
  fuzz::check_accepted_spec(o.model, "the plugin loader");
  return 0;
}
