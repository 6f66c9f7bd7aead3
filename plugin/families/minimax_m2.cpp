// plugin/families/minimax_m2.cpp — the MiniMax-M2 family (model_type "minimax_m2"): GQA softmax attention on every
// layer (attn_type_list all 1; QK norms and partial RoPE are element-wise) and an MoE block on every layer: the
// router h -> num_local_experts (sigmoid scores, a routing bias: element-wise), num_experts_per_tok SwiGLU experts of
// intermediate_size (Mixtral's naming), no shared expert. The checkpoint's MTP modules (num_mtp_modules) are not
// built by transformers and are not billed.
// The family's field table (config.json names, in the dialect of families.h), its build step, and its
// registration (minimax_m2_adapters(), listed by registry.cpp); its built specs obey check_family_spec's rules.

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

std::optional<spec_violation> build_minimax_m2(const field_values& v, model_spec& spec) {
  if (auto bad = build_decoder(v, spec)) return bad;
  text_spec& t = spec.text;
  // attn_type_list: 1 = softmax attention per layer. MiniMax-M2 has no other kind (MiniMax-01's 0 = lightning
  // attention is another model type).
  const field_value& kinds = v["attn_type_list"];
  if (kinds.present) {
    if (static_cast<std::int64_t>(kinds.indexes.size()) != t.num_hidden_layers) {
      return spec_violation{text_key("attn_type_list"), "has " + n(static_cast<std::int64_t>(kinds.indexes.size())) +
                                                            " entries but num_hidden_layers = " +
                                                            n(t.num_hidden_layers) + " (one per decoder layer)"};
    }
    for (std::size_t i = 0; i < kinds.indexes.size(); ++i) {
      if (kinds.indexes[i] != 1) {
        return spec_violation{
            text_key("attn_type_list") + "[" + n(static_cast<std::int64_t>(i)) + "]",
            "must be 1 (softmax attention; MiniMax-M2 has no lightning attention) (got " + n(kinds.indexes[i]) + ")"};
      }
    }
  }
  if (v.integer("shared_intermediate_size") != 0) {
    return spec_violation{text_key("shared_intermediate_size"),
                          "must be 0: transformers' MiniMax-M2 builds no shared expert (got " +
                              n(v.integer("shared_intermediate_size")) + ")"};
  }
  t.num_experts = v.integer("num_local_experts");
  t.num_experts_per_tok = v.integer("num_experts_per_tok");
  t.moe_intermediate_size = t.intermediate_size;
  t.intermediate_size = 0;
  t.decoder_sparse_step = 1;
  return std::nullopt;
}

std::vector<F> minimax_m2_fields() {
  std::vector<F> fields = decoder_fields(false, false);
  for (F& f : fields) {
    if (f.key == "intermediate_size") f.meaning = "width of one expert (a gated MLP)";
  }
  return with(std::move(fields),
              {{"num_local_experts", T::integer, A::required, 0, 1, "experts; the router is h -> num_local_experts"},
               {"num_experts_per_tok", T::integer, A::required, 0, 1, "experts each token visits (top-k)"},
               {"attn_type_list", T::index_list, A::none, 0, 0, "1 (softmax attention) per layer"},
               {"shared_intermediate_size", T::integer, A::fixed, 0, 0, "must be 0 (no shared expert)"}});
}

}  // namespace

const std::vector<const family_adapter*>& minimax_m2_adapters() {
  static const family_adapter minimax_m2("minimax_m2", "MiniMax-M2", minimax_m2_fields(), build_minimax_m2);
  static const std::vector<const family_adapter*> all = {&minimax_m2};
  return all;
}

}  // namespace flopmeter::detail
