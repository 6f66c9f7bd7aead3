// plugin/families/ernie4_5.cpp — the ERNIE 4.5 family (model_types "ernie4_5" and "ernie4_5_moe"): Llama's decoder
// (GQA, SwiGLU; use_bias adds biases, element-wise), and ERNIE-4.5-MoE's experts on a range of layers with ungated
// shared experts.
// The family's field table (config.json names, in the dialect of families.h), its build step, and its
// registration (ernie4_5_adapters(), listed by registry.cpp); its built specs obey check_family_spec's rules.

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

// Ernie4_5Config / Ernie4_5_MoeConfig default head_dim to 128 (absent); null: hidden_size / num_attention_heads.
std::vector<F> ernie_fields() {
  std::vector<F> fields = decoder_fields(false, true);
  for (F& f : fields) {
    if (f.key == "head_dim") {
      f.absent = A::fixed;
      f.default_value = 128;
      f.meaning =
          "width of one head; absent: 128 (the config class's default); null: hidden_size / num_attention_heads";
    }
  }
  return with(std::move(fields),
              {{"use_bias", T::boolean, A::fixed, 0, 0, "no FLOP effect (biases are element-wise)"}});
}

std::optional<spec_violation> build_ernie4_5(const field_values& v, model_spec& spec) { return build_decoder(v, spec); }

// ERNIE-4.5-MoE (Ernie4_5_MoeDecoderLayer): layer i is an MoE block iff (i+1) % moe_layer_interval == 0 and
// moe_layer_start_index <= i <= moe_layer_end_index (-1 or null: the last layer); the other layers are SwiGLUs of
// intermediate_size. An MoE block: the router h -> moe_num_experts, moe_k experts of moe_intermediate_size, and
// moe_num_shared_experts shared experts fused into one ungated SwiGLU of moe_num_shared_experts x
// moe_intermediate_size on every token (DeepSeek's n_shared_experts). In text_spec terms: first_k_dense_replace =
// start, decoder_sparse_step = interval, and the would-be MoE layers after the end listed in mlp_only_layers.
std::optional<spec_violation> build_ernie4_5_moe(const field_values& v, model_spec& spec) {
  if (auto bad = build_decoder(v, spec)) return bad;
  text_spec& t = spec.text;
  const std::int64_t layers = t.num_hidden_layers;
  const std::int64_t start = v.integer("moe_layer_start_index");
  if (start >= layers) {
    return spec_violation{text_key("moe_layer_start_index"),
                          "must be < num_hidden_layers = " + n(layers) + " (got " + n(start) + ")"};
  }
  const field_value& end_value = v["moe_layer_end_index"];
  const std::int64_t end = end_value.null || end_value.integer == -1 ? layers - 1 : end_value.integer;
  if (end < start || end >= layers) {
    return spec_violation{text_key("moe_layer_end_index"),
                          "must be -1 (the last layer) or in [moe_layer_start_index = " + n(start) +
                              ", num_hidden_layers = " + n(layers) + ") (got " + n(end) + ")"};
  }
  const std::int64_t interval = v.integer("moe_layer_interval");
  const std::int64_t experts = v.integer("moe_num_experts"), top_k = v.integer("moe_k");
  if (top_k > experts) {
    return spec_violation{text_key("moe_k"), "must be <= moe_num_experts = " + n(experts) + " (got " + n(top_k) + ")"};
  }
  // The layers after the end that the step rule would make MoE; bounded so the list stays small.
  const std::int64_t after = (layers / interval) - ((end + 1) / interval);
  if (after > (std::int64_t{1} << 16)) {
    return spec_violation{text_key("moe_layer_end_index"),
                          "leaves more than 65536 dense layers after it (got " + n(after) + "); not supported"};
  }
  for (std::int64_t i = end + 1; i < layers; ++i) {
    if ((i + 1) % interval == 0) t.mlp_only_layers.push_back(i);
  }
  t.num_experts = experts;
  t.num_experts_per_tok = top_k;
  t.moe_intermediate_size = v.integer("moe_intermediate_size");
  t.n_shared_experts = v.integer("moe_num_shared_experts");
  t.first_k_dense_replace = start;
  t.decoder_sparse_step = interval;
  return std::nullopt;
}

std::vector<F> ernie_moe_fields() {
  return with(ernie_fields(),
              {{"moe_num_experts", T::integer, A::required, 0, 1, "routed experts; the router is h -> moe_num_experts"},
               {"moe_k", T::integer, A::required, 0, 1, "experts each token visits (top-k)"},
               {"moe_intermediate_size", T::integer, A::required, 0, 1, "width of one routed (and one shared) expert"},
               {"moe_num_shared_experts", T::integer, A::required, 0, 0, "shared experts on every token (ungated)"},
               {"moe_layer_start_index", T::integer, A::required, 0, 0, "the first MoE layer"},
               {"moe_layer_end_index", T::nullable, A::fixed, -1, -1, "the last MoE layer; -1 or null: the last layer"},
               {"moe_layer_interval", T::integer, A::fixed, 1, 1, "MoE on layers with (i+1) % interval == 0"}});
}

}  // namespace

const std::vector<const family_adapter*>& ernie4_5_adapters() {
  static const family_adapter ernie4_5("ernie4_5", "ERNIE 4.5", ernie_fields(), build_ernie4_5);
  static const family_adapter ernie4_5_moe("ernie4_5_moe", "ERNIE-4.5-MoE", ernie_moe_fields(), build_ernie4_5_moe);
  static const std::vector<const family_adapter*> all = {&ernie4_5, &ernie4_5_moe};
  return all;
}

}  // namespace flopmeter::detail
