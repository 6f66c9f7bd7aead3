// plugin/families/mistral.cpp — the Mistral family (model_types "mistral" and "mixtral"): Llama's decoder with every layer
// in one window, and Mixtral's experts.
// The family's field table (config.json names, in the dialect of families.h), its build step, and its
// registration (mistral_adapters(), listed by registry.cpp); its built specs obey check_family_spec's rules.

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

const F kSlidingWindowNullable{"sliding_window",
                               T::nullable,
                               A::fixed,
                               4096,
                               1,
                               "window w of the sliding layers (query i attends to keys i-w < j <= i); null: none"};

// Mistral / Mixtral: when sliding_window is set, every layer slides (no layer_types).
void every_layer_slides(const field_values& v, text_spec& t) {
  if (v["sliding_window"].null) return;
  set_layout(t, {{layer_kind::sliding_attention, t.num_hidden_layers}}, v.integer("sliding_window"));
}

std::optional<spec_violation> build_mistral(const field_values& v, model_spec& spec) {
  if (auto bad = build_decoder(v, spec)) return bad;
  every_layer_slides(v, spec.text);
  return std::nullopt;
}

// Mixtral: every layer is an MoE block of num_local_experts SwiGLU experts of intermediate_size, top
// num_experts_per_tok; no dense MLP, no shared expert.
std::optional<spec_violation> build_mixtral(const field_values& v, model_spec& spec) {
  if (auto bad = build_decoder(v, spec)) return bad;
  text_spec& t = spec.text;
  t.num_experts = v.integer("num_local_experts");
  t.num_experts_per_tok = v.integer("num_experts_per_tok");
  t.moe_intermediate_size = t.intermediate_size;
  t.intermediate_size = 0;
  t.decoder_sparse_step = 1;
  every_layer_slides(v, t);
  return std::nullopt;
}

}  // namespace

const std::vector<const family_adapter*>& mistral_adapters() {
  static const family_adapter mistral("mistral", "Mistral",
                                      with(decoder_fields(false, false), {kSlidingWindowNullable}), build_mistral);
  std::vector<F> mixtral_fields = decoder_fields(false, false);
  for (F& f : mixtral_fields) {
    if (f.key == "intermediate_size") f.meaning = "width of one expert (a gated MLP)";
  }
  static const family_adapter mixtral(
      "mixtral", "Mixtral",
      with(std::move(mixtral_fields),
           {{"num_local_experts", T::integer, A::required, 0, 1, "experts; the router is h -> num_local_experts"},
            {"num_experts_per_tok", T::integer, A::required, 0, 1, "experts each token visits (top-k)"},
            {"sliding_window", T::nullable, A::none, 0, 1, "window of every layer; null: none"}}),
      build_mixtral);
  static const std::vector<const family_adapter*> all = {&mistral, &mixtral};
  return all;
}

}  // namespace flopmeter::detail
