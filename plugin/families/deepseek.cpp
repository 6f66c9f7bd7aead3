// plugin/families/deepseek.cpp — the DeepSeek-V3 family (model_types "deepseek_v3", "kimi_k2" and "glm4_moe"): MLA
// (DeepSeek-V3, Kimi-K2) or GQA (GLM-4.5), a dense prefix, then routed and shared experts; and its sparse-attention
// variants "deepseek_v32" (DeepSeek-V3.2) and "glm_moe_dsa" (GLM-5): MLA over an indexer's top-k keys.
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

std::vector<F> deepseek_fields();

// DSA (DeepSeek-V3.2's deepseek_v32, GLM-5's glm_moe_dsa): DeepSeek-V3's MLA and MoE plus the lightning indexer
// (index_n_heads x index_head_dim, reading the query latent: q_lora_rank must be set) and its top index_topk keys per
// query. GLM's indexer_types ("full" / "shared" per layer; absent: layer i is "full" iff max(i - offset + 1, 0) %
// index_topk_freq == 0, offset = index_skip_topk_offset, transformers' GlmMoeDsaConfig rule) marks the layers that
// reuse the previous layer's indices; layer 0 must compute its own. mlp_layer_types, when written, must say what
// first_k_dense_replace says (dense below it, sparse from it on).
std::optional<spec_violation> build_dsa(const field_values& v, model_spec& spec) {
  if (auto bad = build_deepseek_v3(v, spec)) return bad;
  text_spec& t = spec.text;
  if (t.q_lora_rank == 0) {
    return spec_violation{text_key("q_lora_rank"),
                          "must be set for model_type " + quoted(spec.model_type) +
                              ": the sparse-attention indexer reads the query latent (got none)"};
  }
  t.index_topk = v.integer("index_topk");
  t.index_n_heads = v.integer("index_n_heads");
  t.index_head_dim = v.integer("index_head_dim");
  const field_value& types = v["indexer_types"];
  if (types.present) {
    if (static_cast<std::int64_t>(types.names.size()) != t.num_hidden_layers) {
      return spec_violation{text_key("indexer_types"), "has " + std::to_string(types.names.size()) +
                                                           " entries but num_hidden_layers = " +
                                                           std::to_string(t.num_hidden_layers) + " (one per layer)"};
    }
    for (std::size_t i = 0; i < types.names.size(); ++i) {
      const std::string at = text_key("indexer_types") + "[" + std::to_string(i) + "]";
      if (types.names[i] == "shared") {
        if (i == 0) return spec_violation{at, "layer 0 has no earlier layer whose indices it could reuse"};
        t.indexer_shared_layers.push_back(static_cast<std::int64_t>(i));
      } else if (types.names[i] != "full") {
        return spec_violation{at,
                              "unknown indexer type " + quoted(types.names[i]) + " (expected \"full\" or \"shared\")"};
      }
    }
  } else if (v.adapter->field("index_topk_freq") != nullptr) {
    const std::int64_t freq = v.integer("index_topk_freq"), offset = v.integer("index_skip_topk_offset");
    for (std::int64_t i = 1; i < t.num_hidden_layers; ++i) {
      if (std::max<std::int64_t>(i - offset + 1, 0) % freq != 0) t.indexer_shared_layers.push_back(i);
    }
  }
  const field_value& mlp_types = v["mlp_layer_types"];
  if (mlp_types.present) {
    if (static_cast<std::int64_t>(mlp_types.names.size()) != t.num_hidden_layers) {
      return spec_violation{text_key("mlp_layer_types"), "has " + std::to_string(mlp_types.names.size()) +
                                                             " entries but num_hidden_layers = " +
                                                             std::to_string(t.num_hidden_layers) + " (one per layer)"};
    }
    for (std::size_t i = 0; i < mlp_types.names.size(); ++i) {
      const bool dense = static_cast<std::int64_t>(i) < t.first_k_dense_replace;
      if (mlp_types.names[i] != (dense ? "dense" : "sparse")) {
        return spec_violation{text_key("mlp_layer_types") + "[" + std::to_string(i) + "]",
                              "must be " + quoted(dense ? "dense" : "sparse") +
                                  " (first_k_dense_replace = " + std::to_string(t.first_k_dense_replace) + "; got " +
                                  quoted(mlp_types.names[i]) + ")"};
      }
    }
  }
  return std::nullopt;
}

std::vector<F> dsa_fields(bool glm) {
  std::vector<F> fields =
      with(deepseek_fields(),
           {{"index_topk", T::integer, A::required, 0, 1, "keys each query's sparse attention keeps (top-k)"},
            {"index_n_heads", T::integer, A::required, 0, 1, "the indexer's heads"},
            {"index_head_dim", T::integer, A::required, 0, 1, "the indexer's head width"}});
  if (glm) {
    fields = with(
        std::move(fields),
        {{"indexer_types", T::layer_types, A::none, 0, 0,
          "\"full\" / \"shared\" per layer (shared: reuses the previous layer's indices, runs no indexer)"},
         {"index_topk_freq", T::integer, A::fixed, 1, 1, "without indexer_types: the indexer runs every k-th layer"},
         {"index_skip_topk_offset", T::integer, A::fixed, 2, 0,
          "without indexer_types: layer i runs it iff max(i - offset + 1, 0) % index_topk_freq == 0"},
         {"mlp_layer_types", T::layer_types, A::none, 0, 0,
          "\"dense\" / \"sparse\" per layer; must agree with first_k_dense_replace"}});
  }
  return fields;
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
  static const family_adapter deepseek_v32("deepseek_v32", "DeepSeek-V3.2 (MLA with indexer-selected sparse attention)",
                                           dsa_fields(false), build_dsa);
  static const family_adapter glm_moe_dsa("glm_moe_dsa", "GLM-5 (MLA with indexer-selected sparse attention)",
                                          dsa_fields(true), build_dsa);
  static const std::vector<const family_adapter*> all = {&deepseek_v3, &kimi_k2, &glm4_moe, &deepseek_v32,
                                                         &glm_moe_dsa};
  return all;
}

}  // namespace flopmeter::detail
