// plugin/families/deepseek.cpp — the DeepSeek-V3 family (model_types "deepseek_v3", "kimi_k2" and "glm4_moe"): MLA
// (DeepSeek-V3, Kimi-K2) or GQA (GLM-4.5), a dense prefix, then routed and shared experts.
// The family's field table (config.json names, in the dialect of families.h), its build step, and its
// registration (deepseek_adapters(), listed by registry.cpp); its built specs obey check_family_spec's rules.

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

// DeepSeek-V3 / Kimi-K2 and GLM-4.5: the layers below first_k_dense_replace are dense SwiGLUs of intermediate_size,
// the rest MoE blocks: the router over n_routed_experts, num_experts_per_tok experts of moe_intermediate_size and
// an ungated shared expert of n_shared_experts x moe_intermediate_size. transformers ignores moe_layer_freq (every
// layer from first_k_dense_replace on is MoE), and so does flopmeter. num_nextn_predict_layers MTP layers exist in
// the checkpoint; transformers does not run them; they are billed when [flopmeter] train_mtp_layers says so.
void build_deepseek_moe(const field_values& v, text_spec& t) {
  t.num_experts = v.integer("n_routed_experts");
  t.num_experts_per_tok = v.integer("num_experts_per_tok");
  t.moe_intermediate_size = v.integer("moe_intermediate_size");
  t.n_shared_experts = v.integer("n_shared_experts");
  t.first_k_dense_replace = v.integer("first_k_dense_replace");
  t.decoder_sparse_step = 1;
  t.mtp_num_hidden_layers = v.integer("num_nextn_predict_layers");
}

// DeepSeek-V3 MLA: q_lora_rank (null: one q_proj), kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim.
std::optional<spec_violation> build_deepseek_v3(const field_values& v, model_spec& spec) {
  if (auto bad = build_decoder(v, spec)) return bad;
  text_spec& t = spec.text;
  t.q_lora_rank = v["q_lora_rank"].null ? 0 : v.integer("q_lora_rank");
  t.kv_lora_rank = v.integer("kv_lora_rank");
  t.qk_nope_head_dim = v.integer("qk_nope_head_dim");
  t.qk_rope_head_dim = v.integer("qk_rope_head_dim");
  t.v_head_dim = v.integer("v_head_dim");
  t.head_dim = 0;  // MLA's head widths are the three above
  build_deepseek_moe(v, t);
  return std::nullopt;
}

std::optional<spec_violation> build_glm4_moe(const field_values& v, model_spec& spec) {
  if (auto bad = build_decoder(v, spec)) return bad;
  build_deepseek_moe(v, spec.text);
  return std::nullopt;
}

std::vector<F> deepseek_moe_fields() {
  return {
      {"moe_intermediate_size", T::integer, A::required, 0, 1, "width of one routed (and one shared) expert"},
      {"n_routed_experts", T::integer, A::required, 0, 1, "routed experts; the router is h -> n_routed_experts"},
      {"num_experts_per_tok", T::integer, A::required, 0, 1, "experts each token visits (top-k)"},
      {"n_shared_experts", T::integer, A::required, 0, 0, "shared experts on every token (ungated)"},
      {"first_k_dense_replace", T::integer, A::required, 0, 0, "layers below it have a dense MLP"},
      {"moe_layer_freq", T::integer, A::fixed, 1, 1, "ignored, as transformers ignores it"},
      {"num_nextn_predict_layers", T::integer, A::fixed, 0, 0,
       "MTP layers; billed when [flopmeter] train_mtp_layers = true"},
  };
}

std::vector<F> deepseek_fields() {
  std::vector<F> fields = decoder_fields(false, false);
  fields.erase(std::remove_if(fields.begin(), fields.end(), [](const F& f) { return f.key == "head_dim"; }),
               fields.end());
  fields = with(std::move(fields),
                {{"q_lora_rank", T::nullable, A::required, 0, 1, "query latent rank; null: one q_proj h -> q"},
                 {"kv_lora_rank", T::integer, A::required, 0, 1, "key/value latent rank"},
                 {"qk_nope_head_dim", T::integer, A::required, 0, 1, "query/key head width without RoPE"},
                 {"qk_rope_head_dim", T::integer, A::required, 0, 1, "query/key head width with RoPE"},
                 {"v_head_dim", T::integer, A::required, 0, 1, "value head width"}});
  std::vector<F> moe = deepseek_moe_fields();
  fields.insert(fields.end(), moe.begin(), moe.end());
  return fields;
}

}  // namespace

const std::vector<const family_adapter*>& deepseek_adapters() {
  static const family_adapter deepseek_v3("deepseek_v3", "DeepSeek-V3", deepseek_fields(), build_deepseek_v3);
  static const family_adapter kimi_k2("kimi_k2", "Kimi-K2 (DeepSeek-V3 architecture)", deepseek_fields(),
                                      build_deepseek_v3);
  std::vector<F> glm_fields = decoder_fields(true, false);
  std::vector<F> moe = deepseek_moe_fields();
  glm_fields.insert(glm_fields.end(), moe.begin(), moe.end());
  static const family_adapter glm4_moe("glm4_moe", "GLM-4.5", std::move(glm_fields), build_glm4_moe);
  static const std::vector<const family_adapter*> all = {&deepseek_v3, &kimi_k2, &glm4_moe};
  return all;
}

}  // namespace flopmeter::detail
