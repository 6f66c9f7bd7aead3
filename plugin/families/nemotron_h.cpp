// plugin/families/nemotron_h.cpp — the Nemotron-H family (model_type "nemotron_h": NVIDIA-Nemotron-Nano-9B-v2,
// Nemotron-3-Nano-30B-A3B): every layer is one block, a Mamba-2 mixer ("M"), GQA attention ("*"), a 2-matrix
// squared-ReLU MLP ("-") or an MoE block ("E") of 2-matrix experts with an ungated 2-matrix shared expert.
// The family's field table (config.json names, in the dialect of families.h), its build step, and its
// registration (nemotron_h_adapters(), listed by registry.cpp); its built specs obey check_family_spec's rules.

#include <algorithm>
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

void append(std::vector<layer_run>& runs, layer_kind kind) {
  if (!runs.empty() && runs.back().kind == kind) {
    ++runs.back().count;
  } else {
    runs.push_back({kind, 1});
  }
}

// The block pattern: layers_block_type ("mamba", "attention", "mlp", "moe" per layer) or the legacy
// hybrid_override_pattern (one letter per layer: M, *, -, E), one entry per layer; both written must agree.
std::optional<spec_violation> block_runs(const field_values& v, std::int64_t layers, std::vector<layer_run>& runs) {
  const field_value& listed = v["layers_block_type"];
  const field_value& pattern = v["hybrid_override_pattern"];
  if (!listed.present && !pattern.present) {
    return spec_violation{text_key("hybrid_override_pattern"),
                          "is missing: give the block of every layer (hybrid_override_pattern or layers_block_type)"};
  }
  std::vector<layer_run> from_pattern, from_list;
  if (pattern.present) {
    const std::string& letters = pattern.names.front();
    if (static_cast<std::int64_t>(letters.size()) != layers) {
      return spec_violation{text_key("hybrid_override_pattern"), "has " + n(static_cast<std::int64_t>(letters.size())) +
                                                                     " letters but num_hidden_layers = " + n(layers) +
                                                                     " (one letter per layer)"};
    }
    for (std::size_t i = 0; i < letters.size(); ++i) {
      switch (letters[i]) {
        case 'M': append(from_pattern, layer_kind::mamba); break;
        case '*': append(from_pattern, layer_kind::full_attention); break;
        case '-': append(from_pattern, layer_kind::mlp_only); break;
        case 'E': append(from_pattern, layer_kind::moe_only); break;
        default:
          return spec_violation{text_key("hybrid_override_pattern"),
                                "has an unknown letter " + quoted(std::string(1, letters[i])) + " at position " +
                                    n(static_cast<std::int64_t>(i)) +
                                    " (expected M: Mamba-2, *: attention, -: MLP, E: MoE)"};
      }
    }
  }
  if (listed.present) {
    if (static_cast<std::int64_t>(listed.names.size()) != layers) {
      return spec_violation{text_key("layers_block_type"), "has " + n(static_cast<std::int64_t>(listed.names.size())) +
                                                               " entries but num_hidden_layers = " + n(layers) +
                                                               " (one entry per layer)"};
    }
    for (std::size_t i = 0; i < listed.names.size(); ++i) {
      const std::string& name = listed.names[i];
      if (name == "mamba") {
        append(from_list, layer_kind::mamba);
      } else if (name == "attention") {
        append(from_list, layer_kind::full_attention);
      } else if (name == "mlp") {
        append(from_list, layer_kind::mlp_only);
      } else if (name == "moe") {
        append(from_list, layer_kind::moe_only);
      } else {
        return spec_violation{
            text_key("layers_block_type") + "[" + n(static_cast<std::int64_t>(i)) + "]",
            "unknown block " + quoted(name) + " (expected \"mamba\", \"attention\", \"mlp\" or \"moe\")"};
      }
    }
  }
  if (listed.present && pattern.present) {
    const bool same =
        from_list.size() == from_pattern.size() &&
        std::equal(from_list.begin(), from_list.end(), from_pattern.begin(),
                   [](const layer_run& a, const layer_run& b) { return a.kind == b.kind && a.count == b.count; });
    if (!same) {
      return spec_violation{text_key("layers_block_type"),
                            "contradicts hybrid_override_pattern (write the block pattern once)"};
    }
  }
  runs = listed.present ? std::move(from_list) : std::move(from_pattern);
  return std::nullopt;
}

// NemotronHConfig / NemotronHForCausalLM: Mamba-2 layers of mamba_num_heads x mamba_head_dim (expand is unused),
// attention layers of head_dim, MLP layers up h -> intermediate_size, relu2, down; MoE layers: the router
// h -> n_routed_experts, num_experts_per_tok experts (up, relu2, down) of moe_intermediate_size, a shared expert
// (an MLP of moe_shared_expert_intermediate_size, no gate).
std::optional<spec_violation> build_nemotron_h(const field_values& v, model_spec& spec) {
  if (auto bad = build_decoder(v, spec)) return bad;
  text_spec& t = spec.text;
  std::vector<layer_run> runs;
  if (auto bad = block_runs(v, t.num_hidden_layers, runs)) return bad;
  const auto has = [&runs](layer_kind kind) {
    return std::any_of(runs.begin(), runs.end(), [kind](const layer_run& r) { return r.kind == kind; });
  };
  if (!has(layer_kind::mamba) && !has(layer_kind::full_attention)) {
    return spec_violation{text_key("hybrid_override_pattern"), "has no Mamba (M) and no attention (*) layer"};
  }
  if (auto bad =
          build_mamba2(v, {"mamba_num_heads", "mamba_head_dim", "n_groups", "ssm_state_size", "conv_kernel"}, t)) {
    return bad;
  }
  if (!has(layer_kind::mamba)) {
    t.mamba_num_heads = t.mamba_head_dim = t.mamba_n_groups = t.mamba_state_size = t.mamba_conv_kernel = 0;
  }
  if (!v["moe_latent_size"].null) {
    return spec_violation{text_key("moe_latent_size"),
                          "is set: latent MoE projections are not billed yet; null or absent only"};
  }
  const bool moe_layers = has(layer_kind::moe_only), mlp_layers = has(layer_kind::mlp_only);
  t.layer_runs = std::move(runs);
  t.block_layers = true;
  t.plain_mlp = true;
  if (moe_layers) {
    for (const char* key : {"n_routed_experts", "num_experts_per_tok", "moe_intermediate_size"}) {
      if (v[key].null) {
        return spec_violation{text_key(key), "is missing: hybrid_override_pattern has MoE (E) layers"};
      }
    }
    t.num_experts = v.integer("n_routed_experts");
    t.num_experts_per_tok = v.integer("num_experts_per_tok");
    t.moe_intermediate_size = v.integer("moe_intermediate_size");
    t.shared_expert_intermediate_size =
        v["moe_shared_expert_intermediate_size"].null ? 0 : v.integer("moe_shared_expert_intermediate_size");
    t.shared_expert_ungated = true;
    t.decoder_sparse_step = 1;
    if (t.num_experts_per_tok > t.num_experts) {
      return spec_violation{text_key("num_experts_per_tok"), "must be <= n_routed_experts = " + n(t.num_experts) +
                                                                 " (got " + n(t.num_experts_per_tok) + ")"};
    }
  }
  if (!mlp_layers) t.intermediate_size = 0;
  return std::nullopt;
}

std::vector<F> nemotron_h_fields() {
  std::vector<F> fields = decoder_fields(true, false);
  for (F& f : fields) {
    if (f.key == "intermediate_size") f.meaning = "width of the MLP (\"-\") layers: up h -> I, relu2, down I -> h";
  }
  return with(
      std::move(fields),
      {{"hybrid_override_pattern", T::text, A::none, 0, 0,
        "one letter per layer: M Mamba-2, * attention, - MLP, E MoE"},
       {"layers_block_type", T::layer_types, A::none, 0, 0, "\"mamba\", \"attention\", \"mlp\" or \"moe\" per layer"},
       {"mamba_num_heads", T::integer, A::required, 0, 1, "Mamba-2 heads"},
       {"mamba_head_dim", T::integer, A::required, 0, 1, "Mamba-2 head width; d_in = mamba_num_heads x mamba_head_dim"},
       {"n_groups", T::integer, A::required, 0, 1, "Mamba-2 B/C groups; divides mamba_num_heads"},
       {"ssm_state_size", T::integer, A::required, 0, 1, "Mamba-2 state size N"},
       {"conv_kernel", T::integer, A::fixed, 4, 1, "Mamba-2 depthwise conv kernel"},
       {"n_routed_experts", T::nullable, A::none, 0, 1, "routed experts of the MoE (E) layers"},
       {"num_experts_per_tok", T::nullable, A::none, 0, 1, "experts each token visits (top-k)"},
       {"moe_intermediate_size", T::nullable, A::none, 0, 1, "width of one expert (up, relu2, down)"},
       {"moe_shared_expert_intermediate_size", T::nullable, A::none, 0, 1,
        "width of the shared expert (no gate); null: none"},
       {"moe_latent_size", T::nullable, A::none, 0, 1, "latent MoE width; only null (not billed yet)"}});
}

}  // namespace

const std::vector<const family_adapter*>& nemotron_h_adapters() {
  static const family_adapter nemotron_h("nemotron_h", "Nemotron-H", nemotron_h_fields(), build_nemotron_h);
  static const std::vector<const family_adapter*> all = {&nemotron_h};
  return all;
}

}  // namespace flopmeter::detail
