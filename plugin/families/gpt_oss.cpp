// plugin/families/gpt_oss.cpp — the gpt-oss family (model_type "gpt_oss"): alternating sliding and full layers, MoE on every
// layer.
// The family's field table (config.json names, in the dialect of families.h), its build step, and its
// registration (gpt_oss_adapters(), listed by registry.cpp); its built specs obey check_family_spec's rules.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "families/decoder_kit.h"
#include "families/families.h"

namespace flopmeter::detail {
namespace {

using F = family_field;
using T = field_type;
using A = when_absent;

std::string path(std::string_view key) { return text_key(key); }
std::string n(std::int64_t v) { return std::to_string(v); }

// gpt-oss (GptOssConfig): layer_types, by default alternating sliding (even i) and full (odd i); MoE on every
// layer, num_local_experts experts of intermediate_size (fused gate_up_proj h -> 2I, down_proj I -> h), top
// num_experts_per_tok. The attention sinks (a logit per head) and the biases are element-wise.
std::optional<spec_violation> build_gpt_oss(const field_values& v, model_spec& spec) {
  if (auto bad = build_decoder(v, spec)) return bad;
  text_spec& t = spec.text;
  std::vector<layer_run> runs;
  if (v["layer_types"].present) {
    if (auto bad = runs_of_names(v, t, runs)) return bad;
  } else if (t.num_hidden_layers > (std::int64_t{1} << 17)) {
    return spec_violation{path("num_hidden_layers"),
                          "without layer_types, more than 131072 alternating layers are not supported (got " +
                              n(t.num_hidden_layers) + ")"};
  } else {
    for (std::int64_t i = 0; i < t.num_hidden_layers; ++i) {
      runs.push_back({i % 2 == 0 ? layer_kind::sliding_attention : layer_kind::full_attention, 1});
    }
  }
  std::int64_t window = 0;
  const bool slides =
      std::any_of(runs.begin(), runs.end(), [](const layer_run& r) { return r.kind == layer_kind::sliding_attention; });
  if (slides) {
    if (auto bad = window_of(v, window)) return bad;
  }
  set_layout(t, std::move(runs), window);
  t.num_experts = v.integer("num_local_experts");
  t.num_experts_per_tok = v.integer("num_experts_per_tok");
  t.moe_intermediate_size = t.intermediate_size;
  t.intermediate_size = 0;
  t.decoder_sparse_step = 1;
  return std::nullopt;
}

}  // namespace

const std::vector<const family_adapter*>& gpt_oss_adapters() {
  std::vector<F> gpt_oss_fields = decoder_fields(true, false);
  for (F& f : gpt_oss_fields) {
    if (f.key == "intermediate_size") f.meaning = "width of one expert (fused gate_up_proj h -> 2I, down_proj I -> h)";
  }
  static const family_adapter gpt_oss(
      "gpt_oss", "gpt-oss",
      with(std::move(gpt_oss_fields),
           {{"sliding_window", T::nullable, A::fixed, 128, 1, "window of the sliding layers"},
            kLayerTypes,
            {"num_local_experts", T::integer, A::required, 0, 1, "experts; the router is h -> num_local_experts"},
            {"num_experts_per_tok", T::integer, A::required, 0, 1, "experts each token visits (top-k)"}}),
      build_gpt_oss);
  static const std::vector<const family_adapter*> all = {&gpt_oss};
  return all;
}

}  // namespace flopmeter::detail
