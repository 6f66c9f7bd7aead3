// plugin/families/qwen2.cpp — the Qwen2 family (model_types "qwen2" and "qwen2_moe"): Llama's decoder with Qwen2's
// sliding-window layouts, and Qwen2-MoE's experts with a gated shared expert.
// The family's field table (config.json names, in the dialect of families.h), its build step, and its
// registration (qwen2_adapters(), listed by registry.cpp); its built specs obey check_family_spec's rules.

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

// Qwen2 / Qwen2-MoE (Qwen2Config, Qwen2MoeConfig): without layer_types, layer i slides iff use_sliding_window,
// sliding_window is set and i >= max_window_layers (max_window_layers counts the *full* layers at the bottom).
// transformers' Qwen2Config drops sliding_window when use_sliding_window is false, so a layer_types list with
// sliding layers then attends fully in transformers: refused as a contradiction.
std::optional<spec_violation> qwen2_layout(const field_values& v, text_spec& t) {
  const bool use = v.boolean("use_sliding_window");
  const bool has_window = use && !v["sliding_window"].null;
  std::vector<layer_run> runs;
  if (v["layer_types"].present) {
    if (auto bad = runs_of_names(v, t, runs)) return bad;
    const bool slides = std::any_of(runs.begin(), runs.end(),
                                    [](const layer_run& r) { return r.kind == layer_kind::sliding_attention; });
    if (slides && !has_window) {
      return spec_violation{path("layer_types"),
                            "has \"sliding_attention\" layers but use_sliding_window is false or sliding_window is "
                            "null: transformers attends fully there; write \"full_attention\" or turn the window on"};
    }
  } else if (has_window) {
    const std::int64_t full = std::min(v.integer("max_window_layers"), t.num_hidden_layers);
    runs = two_runs(layer_kind::full_attention, full, layer_kind::sliding_attention, t.num_hidden_layers - full);
  }
  set_layout(t, std::move(runs), has_window ? v.integer("sliding_window") : 0);
  return std::nullopt;
}

std::optional<spec_violation> build_qwen2(const field_values& v, model_spec& spec) {
  if (auto bad = build_decoder(v, spec)) return bad;
  return qwen2_layout(v, spec.text);
}

// Qwen2-MoE (Qwen2MoeConfig) decides its windows differently from Qwen2: without layer_types, layer i slides
// iff use_sliding_window, i is even ((i+1) % 2 != 0) and i < max_window_layers; with use_sliding_window false
// the window is 0 (off). Layer i is an MoE block iff not in mlp_only_layers and (i+1) % decoder_sparse_step ==
// 0; the shared expert of shared_expert_intermediate_size has a sigmoid gate h -> 1.
std::optional<spec_violation> build_qwen2_moe(const field_values& v, model_spec& spec) {
  if (auto bad = build_decoder(v, spec)) return bad;
  text_spec& t = spec.text;
  const bool use = v.boolean("use_sliding_window");
  std::vector<layer_run> runs;
  if (v["layer_types"].present) {
    if (auto bad = runs_of_names(v, t, runs)) return bad;
  } else if (use) {
    const std::int64_t below = std::min(v.integer("max_window_layers"), t.num_hidden_layers);
    if (below > (std::int64_t{1} << 17)) {
      return spec_violation{path("max_window_layers"),
                            "more than 131072 alternating sliding layers are not supported (got " + n(below) + ")"};
    }
    for (std::int64_t i = 0; i < below; ++i) {
      runs.push_back({i % 2 == 0 ? layer_kind::sliding_attention : layer_kind::full_attention, 1});
    }
    if (t.num_hidden_layers > below) runs.push_back({layer_kind::full_attention, t.num_hidden_layers - below});
  }
  const bool slides =
      std::any_of(runs.begin(), runs.end(), [](const layer_run& r) { return r.kind == layer_kind::sliding_attention; });
  if (slides && !use) {
    return spec_violation{path("layer_types"),
                          "has \"sliding_attention\" layers but use_sliding_window is false: "
                          "transformers then sets the window to 0 (off)"};
  }
  std::int64_t window = 0;
  if (slides) {
    if (auto bad = window_of(v, window)) return bad;
  }
  set_layout(t, std::move(runs), window);
  t.num_experts = v.integer("num_experts");
  t.num_experts_per_tok = v.integer("num_experts_per_tok");
  t.moe_intermediate_size = v.integer("moe_intermediate_size");
  t.shared_expert_intermediate_size = v.integer("shared_expert_intermediate_size");
  t.decoder_sparse_step = v.integer("decoder_sparse_step");
  t.mlp_only_layers = v["mlp_only_layers"].indexes;
  t.norm_topk_prob = v.boolean("norm_topk_prob");
  return std::nullopt;
}

}  // namespace

const std::vector<const family_adapter*>& qwen2_adapters() {
  static const family_adapter qwen2("qwen2", "Qwen2",
                                    with(decoder_fields(false, false), {kUseSlidingWindow,
                                                                        {"sliding_window", T::nullable, A::fixed, 4096,
                                                                         1, "window of the sliding layers; null: none"},
                                                                        kMaxWindowLayers,
                                                                        kLayerTypes}),
                                    build_qwen2);
  static const family_adapter qwen2_moe(
      "qwen2_moe", "Qwen2-MoE",
      with(decoder_fields(false, false),
           {kUseSlidingWindow,
            {"sliding_window", T::nullable, A::fixed, 4096, 1, "window of the sliding layers; null or 0: none"},
            kMaxWindowLayers,
            kLayerTypes,
            {"num_experts", T::integer, A::required, 0, 1, "routed experts; the router is h -> num_experts"},
            {"num_experts_per_tok", T::integer, A::required, 0, 1, "experts each token visits (top-k)"},
            {"moe_intermediate_size", T::integer, A::required, 0, 1, "width of one routed expert"},
            {"shared_expert_intermediate_size", T::integer, A::required, 0, 1,
             "width of the shared expert (with its sigmoid gate h -> 1)"},
            {"decoder_sparse_step", T::integer, A::fixed, 1, 1, "MoE on layers with (i+1) % step == 0"},
            {"mlp_only_layers", T::index_list, A::none, 0, 0, "layers forced to a dense MLP of intermediate_size"},
            {"norm_topk_prob", T::boolean, A::fixed, 0, 0, "no FLOP effect"}}),
      build_qwen2_moe);
  static const std::vector<const family_adapter*> all = {&qwen2, &qwen2_moe};
  return all;
}

}  // namespace flopmeter::detail
