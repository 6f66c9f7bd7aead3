// plugin/families/falcon_h1.cpp — the Falcon-H1 family (model_type "falcon_h1"): every layer runs GQA attention and
// a Mamba-2 mixer side by side on the same normed input, then a SwiGLU of intermediate_size.
// The family's field table (config.json names, in the dialect of families.h), its build step, and its
// registration (falcon_h1_adapters(), listed by registry.cpp); its built specs obey check_family_spec's rules.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "families/decoder_kit.h"
#include "families/families.h"
#include "families/mamba2_kit.h"

namespace flopmeter::detail {
namespace {

using F = family_field;
using T = field_type;
using A = when_absent;

std::string n(std::int64_t v) { return std::to_string(v); }

// FalconH1Config: the Mamba-2 inner width is mamba_d_ssm (absent: the class's 1024; null: int(mamba_expand x
// hidden_size)), split into mamba_n_heads heads of mamba_d_head (the two must agree). attn_layer_indices other than
// null (attention on every layer) and mamba_use_mlp = false are not modelled: refused.
std::optional<spec_violation> build_falcon_h1(const field_values& v, model_spec& spec) {
  if (auto bad = build_decoder(v, spec)) return bad;
  text_spec& t = spec.text;
  if (v["attn_layer_indices"].present && !v["attn_layer_indices"].null) {
    return spec_violation{text_key("attn_layer_indices"),
                          "is set: only null (attention beside Mamba on every layer) is modelled"};
  }
  if (!v.boolean("mamba_use_mlp")) {
    return spec_violation{text_key("mamba_use_mlp"), "is false: only Falcon-H1 layers with their MLP are modelled"};
  }
  if (auto bad =
          build_mamba2(v, {"mamba_n_heads", "mamba_d_head", "mamba_n_groups", "mamba_d_state", "mamba_d_conv"}, t)) {
    return bad;
  }
  const std::int64_t d_in =
      v["mamba_d_ssm"].null ? v.integer("mamba_expand") * t.hidden_size : v.integer("mamba_d_ssm");
  if (d_in != t.mamba_num_heads * t.mamba_head_dim) {
    return spec_violation{text_key("mamba_d_ssm"),
                          "gives d_in = " + n(d_in) + " (absent: the class default 1024)" +
                              " but mamba_n_heads x mamba_d_head = " + n(t.mamba_num_heads * t.mamba_head_dim) +
                              "; they must agree (null: mamba_expand x hidden_size)"};
  }
  t.mamba_beside_attention = true;
  return std::nullopt;
}

std::vector<F> falcon_h1_fields() {
  return with(
      decoder_fields(false, false),
      {{"mamba_d_ssm", T::nullable, A::fixed, 1024, 1,
        "Mamba-2 inner width d_in; absent: 1024 (the class's default); null: mamba_expand x hidden_size"},
       {"mamba_n_heads", T::integer, A::required, 0, 1, "Mamba-2 heads"},
       {"mamba_d_head", T::integer, A::required, 0, 1, "Mamba-2 head width"},
       {"mamba_n_groups", T::integer, A::required, 0, 1, "Mamba-2 B/C groups; divides mamba_n_heads"},
       {"mamba_d_state", T::integer, A::required, 0, 1, "Mamba-2 state size N"},
       {"mamba_d_conv", T::integer, A::fixed, 4, 1, "Mamba-2 depthwise conv kernel"},
       {"mamba_expand", T::integer, A::fixed, 2, 1, "d_in = mamba_expand x hidden_size when mamba_d_ssm is null"},
       {"mamba_use_mlp", T::boolean, A::fixed, 1, 0, "true: every layer has its SwiGLU (false is refused)"},
       {"attn_layer_indices", T::nullable_index_list, A::none, 0, 0,
        "null: attention on every layer (a list is refused)"}});
}

}  // namespace

const std::vector<const family_adapter*>& falcon_h1_adapters() {
  static const family_adapter falcon_h1("falcon_h1", "Falcon-H1", falcon_h1_fields(), build_falcon_h1);
  static const std::vector<const family_adapter*> all = {&falcon_h1};
  return all;
}

}  // namespace flopmeter::detail
