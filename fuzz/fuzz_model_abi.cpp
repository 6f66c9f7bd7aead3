// Fuzz target: the C ABI's FLOP model and plugin-from-text functions (what the Python package calls), as a
// hostile host layer drives them. Each input loads a model (a shipped TOML by index, or config.json text from
// the input), then counts fuzzed micro-batch structs (struct_size below, at and above the struct, NULL arrays
// with counts, any values), forms their FLOPs in both scopes and asks for both JSON reports with buffers of
// any size; it also creates a plugin from fuzzed plugin TOML text and reads its row layout.
//
// Invariants checked on every input:
//   - every return code is one c_api.h names;
//   - a count that succeeds gives non-negative counts, and flopmeter_model_flops on them succeeds with an
//     exact total that is a decimal integer whose value is the double total within 2^-50 (or both 0);
//   - the JSON functions return the same length however large the buffer, never write past it, and always
//     NUL-terminate within it;
//   - a created plugin reports a row layout whose offsets lie inside its row;
//   - destroyed handles are refused (FLOPMETER_E_INVALID_HANDLE), destroy(NULL) is FLOPMETER_OK;
//   - nothing crashes, leaks or trips ASan/UBSan.
#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "flopmeter/c_api.h"

namespace {

void require(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "fuzz_model_abi: invariant broken: %s\n", what);
    std::abort();
  }
}

bool known_code(int64_t code) {
  return code == FLOPMETER_OK || code == FLOPMETER_E_NULL_ARGUMENT || code == FLOPMETER_E_STRUCT_SIZE ||
         code == FLOPMETER_E_REJECTED || code == FLOPMETER_E_INVALID_HANDLE;
}

const char* const kModels[] = {"tiny_vlm",   "qwen3_vl_2b",     "qwen3_vl_30b_a3b",
                               "qwen3_5_9b", "qwen3_5_35b_a3b", "tiny_moe_vlm"};

std::vector<int64_t> values(FuzzedDataProvider& in, std::size_t max_count) {
  std::vector<int64_t> v(in.ConsumeIntegralInRange<std::size_t>(0, max_count));
  for (int64_t& x : v) {
    switch (in.ConsumeIntegralInRange<int>(0, 3)) {
      case 0: x = in.ConsumeIntegralInRange<int64_t>(-2, 64); break;
      case 1: x = in.ConsumeIntegralInRange<int64_t>(0, 1 << 20); break;
      default: x = in.ConsumeIntegral<int64_t>(); break;
    }
  }
  return v;
}

// A JSON function called with a buffer of a fuzzed size, guarded by a canary past its end.
template <class Call>
void check_json(FuzzedDataProvider& in, const Call& call) {
  const int64_t full = call(nullptr, 0);
  require(full >= 0 || known_code(full), "a JSON function returned an unknown code");
  if (full < 0) return;
  const std::size_t size = in.ConsumeIntegralInRange<std::size_t>(0, static_cast<std::size_t>(full) + 2);
  std::vector<char> buffer(size + 8, '\x7f');
  const int64_t again = call(size > 0 ? buffer.data() : nullptr, size);
  require(again == full, "a JSON function's length depends on the buffer");
  for (std::size_t i = size; i < size + 8; ++i) require(buffer[i] == '\x7f', "a JSON function wrote past its buffer");
  if (size > 0) require(std::memchr(buffer.data(), '\0', size) != nullptr, "a JSON result is not NUL-terminated");
}

void exercise_model(FuzzedDataProvider& in, flopmeter_model* model) {
  char error[256];
  check_json(in, [&](char* out, std::size_t size) { return flopmeter_model_coefficients_json(model, out, size); });
  // The Megatron check at a fuzzed row length (0, negative or past 2^32 are refused with a message).
  const int64_t seq_len = in.ConsumeIntegral<int64_t>();
  check_json(in, [&](char* out, std::size_t size) {
    return flopmeter_model_check_json(model, seq_len, out, size, error, sizeof error);
  });
  const int batches = in.ConsumeIntegralInRange<int>(0, 6);
  for (int b = 0; b < batches; ++b) {
    const std::vector<int64_t> lengths = values(in, 12), cu = values(in, 12), positions = values(in, 24);
    const std::vector<int64_t> grid_values = values(in, 12);
    std::vector<flopmeter_grid> grids(grid_values.size() / 3);
    for (std::size_t i = 0; i < grids.size(); ++i)
      grids[i] = {grid_values[3 * i], grid_values[3 * i + 1], grid_values[3 * i + 2]};
    flopmeter_microbatch mb{};
    mb.struct_size =
        in.ConsumeBool() ? static_cast<uint32_t>(sizeof mb) : in.ConsumeIntegralInRange<uint32_t>(0, sizeof mb + 16);
    const int format = in.ConsumeIntegralInRange<int>(0, 4);
    const bool null_arrays = in.ConsumeIntegralInRange<int>(0, 15) == 0;
    if (format == 0 || format == 4) {
      mb.document_lengths = null_arrays ? nullptr : lengths.data();
      mb.num_document_lengths = lengths.size();
    }
    if (format == 1 || format == 4) {
      mb.cu_seqlens = null_arrays ? nullptr : cu.data();
      mb.num_cu_seqlens = cu.size();
    }
    if (format == 2) {
      mb.positions = positions.data();
      mb.num_positions = positions.size();
    }
    mb.grids = grids.empty() ? nullptr : grids.data();
    mb.num_grids = grids.size();
    mb.padding_tokens = in.ConsumeIntegralInRange<int64_t>(-1, 100);
    flopmeter_counts counts{};
    counts.struct_size =
        in.ConsumeBool() ? static_cast<uint32_t>(sizeof counts) : in.ConsumeIntegralInRange<uint32_t>(0, 80);
    const int code = flopmeter_model_count(model, in.ConsumeBool() ? &mb : nullptr, &counts, error, sizeof error);
    require(known_code(code), "flopmeter_model_count returned an unknown code");
    require(std::memchr(error, '\0', sizeof error) != nullptr || code == FLOPMETER_OK, "an unterminated message");
    if (code != FLOPMETER_OK) continue;
    for (const int64_t v :
         {counts.real_tokens, counts.padding_tokens, counts.documents, counts.causal_pairs, counts.items,
          counts.patches, counts.merged_tokens, counts.vision_pairs_per_frame, counts.vision_pairs_whole}) {
      require(v >= 0, "a count is negative");
    }
    for (const int scope : {FLOPMETER_SCOPE_COMPLETE, FLOPMETER_SCOPE_SEED, in.ConsumeIntegral<int>()}) {
      flopmeter_flops flops{};
      flops.struct_size = sizeof flops;
      const int f = flopmeter_model_flops(model, &counts, scope, &flops);
      require(known_code(f), "flopmeter_model_flops returned an unknown code");
      if (scope == FLOPMETER_SCOPE_COMPLETE || scope == FLOPMETER_SCOPE_SEED) {
        require(f == FLOPMETER_OK, "valid counts in a valid scope were refused");
        require(std::memchr(flops.exact_total, '\0', sizeof flops.exact_total) != nullptr, "exact total unterminated");
        for (const char* p = flops.exact_total; *p != '\0'; ++p)
          require(*p >= '0' && *p <= '9', "exact total not decimal");
        const double exact = std::strtod(flops.exact_total, nullptr);
        require(exact == flops.total || std::fabs(exact - flops.total) <= std::ldexp(std::fabs(exact), -50),
                "the exact total and the double total disagree");
      }
      const int64_t estimate_seq_len = in.ConsumeIntegralInRange<int64_t>(-1, 1 << 16);  // once: both calls alike
      check_json(in, [&](char* out, std::size_t size) {
        return flopmeter_model_estimate_json(model, &counts, scope, estimate_seq_len, out, size);
      });
    }
  }
}

void exercise_plugin_text(FuzzedDataProvider& in) {
  std::string text =
      "[model]\nconfig = \"" FLOPMETER_SOURCE_DIR "/model_configs/tiny_vlm.toml\"\n[sinks]\nconsole = false\n";
  if (in.ConsumeBool()) text += in.ConsumeRandomLengthString(256);
  char error[512];
  flopmeter_plugin* plugin = flopmeter_create_from_text(text.data(), text.size(), in.ConsumeBool() ? "fuzz" : nullptr,
                                                        nullptr, nullptr, error, sizeof error);
  if (plugin == nullptr) {
    require(std::memchr(error, '\0', sizeof error) != nullptr, "an unterminated create message");
    return;
  }
  flopmeter_health_counters health{};
  health.struct_size =
      in.ConsumeBool() ? static_cast<uint32_t>(sizeof health) : in.ConsumeIntegralInRange<uint32_t>(0, 40);
  const int code = flopmeter_health(plugin, &health);
  require(known_code(code), "flopmeter_health returned an unknown code");
  if (code == FLOPMETER_OK) require(health.bad_microbatches == 0, "a fresh plugin counted a bad micro-batch");
  flopmeter_model* model = flopmeter_plugin_model(plugin, error, sizeof error);
  require(model != nullptr, "a live plugin has no model");
  require(flopmeter_destroy(plugin) == FLOPMETER_OK, "destroy of a live plugin failed");
  require(flopmeter_health(plugin, &health) == FLOPMETER_E_INVALID_HANDLE, "a destroyed plugin answered");
  require(flopmeter_plugin_model(plugin, error, sizeof error) == nullptr, "a destroyed plugin gave its model");
  exercise_model(in, model);  // the model outlives the plugin
  require(flopmeter_model_destroy(model) == FLOPMETER_OK, "model destroy failed");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  char error[512];
  flopmeter_model* model = nullptr;
  switch (in.ConsumeIntegralInRange<int>(0, 2)) {
    case 0: {
      const std::string path = std::string(FLOPMETER_SOURCE_DIR "/model_configs/") +
                               kModels[in.ConsumeIntegralInRange<std::size_t>(0, std::size(kModels) - 1)] + ".toml";
      model = flopmeter_model_load(path.c_str(), error, sizeof error);
      require(model != nullptr, "a shipped model failed to load");
      break;
    }
    case 1: {
      const std::string text = in.ConsumeRandomLengthString(4096);
      model = flopmeter_model_parse_json(text.data(), text.size(), "fuzz.json", error, sizeof error);
      if (model == nullptr) require(std::memchr(error, '\0', sizeof error) != nullptr, "an unterminated message");
      break;
    }
    default: exercise_plugin_text(in); return 0;
  }
  if (model == nullptr) return 0;
  exercise_model(in, model);
  require(flopmeter_model_destroy(model) == FLOPMETER_OK, "model destroy failed");
  require(flopmeter_model_destroy(model) == FLOPMETER_E_INVALID_HANDLE, "a second destroy was not refused");
  require(flopmeter_model_destroy(nullptr) == FLOPMETER_OK, "destroy(NULL) failed");
  flopmeter_counts counts{};
  counts.struct_size = sizeof counts;
  require(flopmeter_model_count(model, nullptr, &counts, error, sizeof error) == FLOPMETER_E_INVALID_HANDLE,
          "a destroyed model counted");
  return 0;
}
