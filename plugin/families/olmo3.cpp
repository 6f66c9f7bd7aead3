// plugin/families/olmo3.cpp — the OLMo 3 family (model_type "olmo3"): Llama's decoder with three sliding layers to
// every full one. The family's field table (config.json names, in the dialect of families.h), its build step, and
// its registration (olmo3_adapters(), listed by registry.cpp); its built specs obey check_family_spec's rules.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "families/decoder_kit.h"
#include "families/families.h"

namespace flopmeter::detail {
namespace {

using T = field_type;
using A = when_absent;

// Olmo3Config builds layer_types as "full_attention" where (i + 1) % 4 == 0, "sliding_attention" elsewhere.
constexpr std::int64_t kFullEvery = 4;

// OLMo 3 (transformers' Olmo3Config, modeling_olmo3.py): layer_types, by default three sliding layers then a full
// one; sliding_window 4096 by default. head_dim is hidden_size / num_attention_heads unless written (the attention
// reads it with getattr). The RMSNorms of q and k over the whole projection are element-wise, not billed.
std::optional<spec_violation> build_olmo3(const field_values& v, model_spec& spec) {
  if (auto bad = build_decoder(v, spec)) return bad;
  text_spec& t = spec.text;
  std::vector<layer_run> runs;
  if (v["layer_types"].present) {
    if (auto bad = runs_of_names(v, t, runs)) return bad;
  } else if (t.num_hidden_layers / kFullEvery > (std::int64_t{1} << 16)) {
    return spec_violation{text_key("num_hidden_layers"),
                          "without layer_types, more than 65536 sliding/full periods are not supported (got " +
                              std::to_string(t.num_hidden_layers) + " layers)"};
  } else {
    runs = every_nth_full(kFullEvery, t.num_hidden_layers);
  }
  std::int64_t window = 0;
  if (any_sliding(runs)) {
    if (auto bad = window_of(v, window)) return bad;
  }
  set_layout(t, std::move(runs), window);
  return std::nullopt;
}

}  // namespace

const std::vector<const family_adapter*>& olmo3_adapters() {
  static const family_adapter olmo3(
      "olmo3", "OLMo 3",
      with(decoder_fields(false, false),
           {{"sliding_window", T::nullable, A::fixed, 4096, 1, "window of the sliding layers"}, kLayerTypes}),
      build_olmo3);
  static const std::vector<const family_adapter*> all = {&olmo3};
  return all;
}

}  // namespace flopmeter::detail
