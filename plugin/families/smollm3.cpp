// plugin/families/smollm3.cpp — the SmolLM3 family (model_type "smollm3"): Llama's decoder with NoPE layers (every
// no_rope_layer_interval-th layer skips RoPE: no FLOP change, RoPE is element-wise) and an optional window on them.
// The family's field table (config.json names, in the dialect of families.h), its build step, and its
// registration (smollm3_adapters(), listed by registry.cpp); its built specs obey check_family_spec's rules.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "families/decoder_kit.h"
#include "families/families.h"

namespace flopmeter::detail {
namespace {

using F = family_field;
using T = field_type;
using A = when_absent;

std::string n(std::int64_t v) { return std::to_string(v); }

// SmolLM3Config: no_rope_layers[i] is 1 where layer i uses RoPE, 0 where it is a NoPE layer; absent, layer i is NoPE
// iff (i+1) % no_rope_layer_interval == 0. Without layer_types, layer i slides iff use_sliding_window, sliding_window
// is set and layer i is NoPE; otherwise every layer attends fully (the released SmolLM3-3B: all full). A written
// layer_types with sliding layers while the window is off attends fully in transformers: refused, as for Qwen2.
std::optional<spec_violation> build_smollm3(const field_values& v, model_spec& spec) {
  if (auto bad = build_decoder(v, spec)) return bad;
  text_spec& t = spec.text;
  const std::vector<std::int64_t>& nope = v["no_rope_layers"].indexes;
  if (v["no_rope_layers"].present) {
    if (static_cast<std::int64_t>(nope.size()) != t.num_hidden_layers) {
      return spec_violation{text_key("no_rope_layers"), "has " + n(static_cast<std::int64_t>(nope.size())) +
                                                            " entries but num_hidden_layers = " +
                                                            n(t.num_hidden_layers) + " (one 0 or 1 per layer)"};
    }
    for (std::size_t i = 0; i < nope.size(); ++i) {
      if (nope[i] != 0 && nope[i] != 1) {
        return spec_violation{text_key("no_rope_layers") + "[" + n(static_cast<std::int64_t>(i)) + "]",
                              "must be 1 (RoPE) or 0 (NoPE) (got " + n(nope[i]) + ")"};
      }
    }
  }
  const bool use = v.boolean("use_sliding_window");
  const bool has_window = use && !v["sliding_window"].null;
  std::vector<layer_run> runs;
  if (v["layer_types"].present) {
    if (auto bad = runs_of_names(v, t, runs)) return bad;
    if (any_sliding(runs) && !has_window) {
      return spec_violation{text_key("layer_types"),
                            "has \"sliding_attention\" layers but use_sliding_window is false or sliding_window is "
                            "null: transformers attends fully there; write \"full_attention\" or turn the window on"};
    }
  } else if (has_window) {
    if (t.num_hidden_layers > (std::int64_t{1} << 17)) {
      return spec_violation{
          text_key("num_hidden_layers"),
          "more than 131072 layers with NoPE windows are not supported (got " + n(t.num_hidden_layers) + ")"};
    }
    const std::int64_t interval = v.integer("no_rope_layer_interval");
    for (std::int64_t i = 0; i < t.num_hidden_layers; ++i) {
      const bool is_nope =
          v["no_rope_layers"].present ? nope[static_cast<std::size_t>(i)] == 0 : (i + 1) % interval == 0;
      const layer_kind kind = is_nope ? layer_kind::sliding_attention : layer_kind::full_attention;
      if (!runs.empty() && runs.back().kind == kind) {
        ++runs.back().count;
      } else {
        runs.push_back({kind, 1});
      }
    }
  }
  set_layout(t, std::move(runs), has_window ? v.integer("sliding_window") : 0);
  return std::nullopt;
}

}  // namespace

const std::vector<const family_adapter*>& smollm3_adapters() {
  static const family_adapter smollm3(
      "smollm3", "SmolLM3",
      with(decoder_fields(false, true),
           {kUseSlidingWindow,
            {"sliding_window", T::nullable, A::none, 0, 1, "window of the NoPE layers when use_sliding_window"},
            {"max_window_layers", T::integer, A::fixed, 28, 0, "no FLOP effect (transformers does not read it)"},
            {"no_rope_layers", T::index_list, A::none, 0, 0,
             "1 (RoPE) or 0 (NoPE) per layer; absent: NoPE iff (i+1) % no_rope_layer_interval == 0"},
            {"no_rope_layer_interval", T::integer, A::fixed, 4, 1,
             "every n-th layer is NoPE when no_rope_layers is absent"},
            kLayerTypes}),
      build_smollm3);
  static const std::vector<const family_adapter*> all = {&smollm3};
  return all;
}

}  // namespace flopmeter::detail
