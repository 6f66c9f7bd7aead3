// plugin/families/granitemoehybrid.cpp — the Granite 4.0-H family (model_type "granitemoehybrid"): layer_types
// picks a Mamba-2 mixer or GQA attention per layer; every layer then has the shared MLP (input_linear
// h -> 2 x shared_intermediate_size, gated, output_linear back) and, with num_local_experts > 0, an MoE block beside
// it (the router h -> num_local_experts, num_experts_per_tok gated experts of intermediate_size).
// The family's field table (config.json names, in the dialect of families.h), its build step, and its
// registration (granitemoehybrid_adapters(), listed by registry.cpp); its built specs obey check_family_spec's rules.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "families/decoder_kit.h"
#include "families/families.h"
#include "families/mamba2_kit.h"
#include "util/printable_text.h"

namespace flopmeter::detail {
namespace {

using F = family_field;
using T = field_type;
using A = when_absent;

std::string n(std::int64_t v) { return std::to_string(v); }

// GraniteMoeHybridConfig: d_in = int(mamba_expand x hidden_size), split into mamba_n_heads heads of mamba_d_head
// (the two must agree). The shared MLP is the MoE block's shared expert (no gate on it); without experts it is the
// layer's dense SwiGLU.
std::optional<spec_violation> build_granitemoehybrid(const field_values& v, model_spec& spec) {
  if (auto bad = build_decoder(v, spec)) return bad;
  text_spec& t = spec.text;
  const std::vector<std::string>& names = v["layer_types"].names;
  if (static_cast<std::int64_t>(names.size()) != t.num_hidden_layers) {
    return spec_violation{text_key("layer_types"), "has " + n(static_cast<std::int64_t>(names.size())) +
                                                       " entries but num_hidden_layers = " + n(t.num_hidden_layers) +
                                                       " (one entry per decoder layer)"};
  }
  std::vector<layer_run> runs;
  bool mamba = false;
  for (std::size_t i = 0; i < names.size(); ++i) {
    layer_kind kind;
    if (names[i] == "mamba") {
      kind = layer_kind::mamba;
      mamba = true;
    } else if (names[i] == "attention") {
      kind = layer_kind::full_attention;
    } else {
      return spec_violation{text_key("layer_types") + "[" + n(static_cast<std::int64_t>(i)) + "]",
                            "unknown layer type " + quoted(names[i]) + " (expected \"mamba\" or \"attention\")"};
    }
    if (!runs.empty() && runs.back().kind == kind) {
      ++runs.back().count;
    } else {
      runs.push_back({kind, 1});
    }
  }
  if (mamba) {
    if (auto bad =
            build_mamba2(v, {"mamba_n_heads", "mamba_d_head", "mamba_n_groups", "mamba_d_state", "mamba_d_conv"}, t)) {
      return bad;
    }
    const std::int64_t d_in = v.integer("mamba_expand") * t.hidden_size;
    if (d_in != t.mamba_num_heads * t.mamba_head_dim) {
      return spec_violation{text_key("mamba_expand"),
                            "x hidden_size = " + n(d_in) + " must equal mamba_n_heads x mamba_d_head = " +
                                n(t.mamba_num_heads * t.mamba_head_dim) + " (the Mamba-2 inner width)"};
    }
  }
  if (runs.size() > 1 || runs.front().kind != layer_kind::full_attention) t.layer_runs = std::move(runs);
  const std::int64_t experts = v.integer("num_local_experts");
  const std::int64_t shared = v.integer("shared_intermediate_size");
  if (experts == 0) {
    t.intermediate_size = shared;
    return std::nullopt;
  }
  t.num_experts = experts;
  t.num_experts_per_tok = v.integer("num_experts_per_tok");
  if (t.num_experts_per_tok > experts) {
    return spec_violation{text_key("num_experts_per_tok"),
                          "must be <= num_local_experts = " + n(experts) + " (got " + n(t.num_experts_per_tok) + ")"};
  }
  t.moe_intermediate_size = t.intermediate_size;
  t.intermediate_size = 0;
  t.shared_expert_intermediate_size = shared;
  t.shared_expert_ungated = true;
  t.decoder_sparse_step = 1;
  return std::nullopt;
}

std::vector<F> granitemoehybrid_fields() {
  std::vector<F> fields = decoder_fields(false, false);
  for (F& f : fields) {
    if (f.key == "intermediate_size") f.meaning = "width of one expert (input_linear h -> 2I, output_linear I -> h)";
  }
  return with(std::move(fields),
              {{"layer_types", T::layer_types, A::required, 0, 0, "\"mamba\" or \"attention\" per layer"},
               {"num_local_experts", T::integer, A::fixed, 0, 0, "experts per layer; 0: the shared MLP only"},
               {"num_experts_per_tok", T::integer, A::fixed, 0, 0, "experts each token visits (top-k)"},
               {"shared_intermediate_size", T::integer, A::required, 0, 1,
                "width of the shared MLP on every layer (gated, no sigmoid gate)"},
               {"mamba_n_heads", T::integer, A::required, 0, 1, "Mamba-2 heads"},
               {"mamba_d_head", T::integer, A::required, 0, 1, "Mamba-2 head width"},
               {"mamba_n_groups", T::integer, A::required, 0, 1, "Mamba-2 B/C groups; divides mamba_n_heads"},
               {"mamba_d_state", T::integer, A::required, 0, 1, "Mamba-2 state size N"},
               {"mamba_d_conv", T::integer, A::fixed, 4, 1, "Mamba-2 depthwise conv kernel"},
               {"mamba_expand", T::integer, A::fixed, 2, 1,
                "d_in = mamba_expand x hidden_size = mamba_n_heads x mamba_d_head"}});
}

}  // namespace

const std::vector<const family_adapter*>& granitemoehybrid_adapters() {
  static const family_adapter granitemoehybrid("granitemoehybrid", "Granite 4.0-H", granitemoehybrid_fields(),
                                               build_granitemoehybrid);
  static const std::vector<const family_adapter*> all = {&granitemoehybrid};
  return all;
}

}  // namespace flopmeter::detail
