// plugin/families/families.cpp — the family adapters (families.h): each a field table in the config.json's own names
// and a pure build step that follows transformers' config class of that model_type, then the rules every built
// spec of these families obeys and the reading of a document through the table (every family's, the Qwen types'
// of qwen_families.cpp too).

#include "families/families.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "arch/architecture.h"
#include "util/printable_text.h"
#include "families/qwen_families.h"
#include "flopmeter/error.h"
#include "flopmeter/flop_model.h"

namespace flopmeter::detail {
namespace {

constexpr std::string_view kText = "text_config";
constexpr std::string_view kFull = "full_attention";
constexpr std::string_view kSliding = "sliding_attention";

std::string path(std::string_view key) { return std::string(kText) + "." + std::string(key); }
std::string n(std::int64_t v) { return std::to_string(v); }

// ---- the field tables --------------------------------------------------------------------------------------

using F = family_field;
using T = field_type;
using A = when_absent;

// The decoder fields every family has, in SCHEMA.md order.
std::vector<F> decoder_fields(bool head_dim_required, bool tie_default) {
  return {
      {"hidden_size", T::integer, A::required, 0, 1, "width of the residual stream"},
      {"num_hidden_layers", T::integer, A::required, 0, 1, "decoder layers"},
      {"num_attention_heads", T::integer, A::required, 0, 1, "query heads"},
      {"num_key_value_heads", T::nullable, A::derived, 0, 1,
       "key/value heads (GQA); absent or null: num_attention_heads"},
      {"head_dim", head_dim_required ? T::integer : T::nullable, head_dim_required ? A::required : A::derived, 0, 1,
       head_dim_required ? "width of one head (not hidden_size / num_attention_heads)"
                         : "width of one head; absent or null: hidden_size / num_attention_heads"},
      {"intermediate_size", T::integer, A::required, 0, 1, "width of the gated MLP (gate, up h -> I, down I -> h)"},
      {"vocab_size", T::integer, A::required, 0, 1, "LM head width (h -> vocab)"},
      {"tie_word_embeddings", T::boolean, A::fixed, tie_default ? 1 : 0, 0,
       "no FLOP effect: the LM head's matmul runs either way"},
  };
}

std::vector<F> with(std::vector<F> fields, std::initializer_list<F> more) {
  fields.insert(fields.end(), more.begin(), more.end());
  return fields;
}

const F kUseSlidingWindow{
    "use_sliding_window", T::boolean, A::fixed, 0, 0, "false: no layer slides (sliding_window is ignored)"};
const F kMaxWindowLayers{"max_window_layers",
                         T::integer,
                         A::fixed,
                         28,
                         0,
                         "layers below it attend fully; the rest slide when use_sliding_window"};
const F kLayerTypes{"layer_types",
                    T::layer_types,
                    A::derived,
                    0,
                    0,
                    "\"full_attention\" / \"sliding_attention\" per layer; absent: the family's rule"};

// ---- building --------------------------------------------------------------------------------------------

// The decoder fields into spec.text; head_dim and num_key_value_heads derived as transformers does.
std::optional<spec_violation> build_decoder(const field_values& v, model_spec& spec) {
  text_spec& t = spec.text;
  t.hidden_size = v.integer("hidden_size");
  t.num_hidden_layers = v.integer("num_hidden_layers");
  t.num_attention_heads = v.integer("num_attention_heads");
  t.num_key_value_heads = v["num_key_value_heads"].null ? t.num_attention_heads : v.integer("num_key_value_heads");
  if (v.adapter->field("head_dim") != nullptr) {
    if (v["head_dim"].null) {
      if (t.hidden_size % t.num_attention_heads != 0) {
        return spec_violation{path("num_attention_heads"), "must divide hidden_size = " + n(t.hidden_size) +
                                                               " when head_dim is not given (got " +
                                                               n(t.num_attention_heads) + "); write head_dim"};
      }
      t.head_dim = t.hidden_size / t.num_attention_heads;
    } else {
      t.head_dim = v.integer("head_dim");
    }
  }
  if (v.adapter->field("intermediate_size") != nullptr) t.intermediate_size = v.integer("intermediate_size");
  t.vocab_size = v.integer("vocab_size");
  t.tie_word_embeddings = v.boolean("tie_word_embeddings");
  return std::nullopt;
}

// layer_types as written: each entry full or sliding, one per layer, as runs.
std::optional<spec_violation> runs_of_names(const field_values& v, text_spec& t, std::vector<layer_run>& runs) {
  const std::vector<std::string>& names = v["layer_types"].names;
  if (static_cast<std::int64_t>(names.size()) != t.num_hidden_layers) {
    return spec_violation{path("layer_types"), "has " + n(static_cast<std::int64_t>(names.size())) +
                                                   " entries but num_hidden_layers = " + n(t.num_hidden_layers) +
                                                   " (one entry per decoder layer)"};
  }
  for (std::size_t i = 0; i < names.size(); ++i) {
    layer_kind kind;
    if (names[i] == kFull) {
      kind = layer_kind::full_attention;
    } else if (names[i] == kSliding) {
      kind = layer_kind::sliding_attention;
    } else {
      return spec_violation{path("layer_types") + "[" + n(static_cast<std::int64_t>(i)) + "]",
                            "unknown layer type " + quoted(names[i]) +
                                " (expected \"full_attention\" or "
                                "\"sliding_attention\")"};
    }
    if (!runs.empty() && runs.back().kind == kind) {
      ++runs.back().count;
    } else {
      runs.push_back({kind, 1});
    }
  }
  return std::nullopt;
}

// Sets the layout: `runs` (empty or all full: every layer attends fully, no window).
void set_layout(text_spec& t, std::vector<layer_run> runs, std::int64_t window) {
  const bool slides =
      std::any_of(runs.begin(), runs.end(), [](const layer_run& r) { return r.kind == layer_kind::sliding_attention; });
  if (!slides) return;
  t.layer_runs = std::move(runs);
  t.sliding_window = window;
}

// The window a sliding layer uses: sliding_window, which must then be set.
std::optional<spec_violation> window_of(const field_values& v, std::int64_t& window) {
  const field_value& w = v["sliding_window"];
  if (w.null) {
    return spec_violation{path("sliding_window"),
                          "is null but layer_types has \"sliding_attention\" layers: give the window's size"};
  }
  window = w.integer;
  return std::nullopt;
}

// Runs of `count` layers each: [first kind x a, second kind x b].
std::vector<layer_run> two_runs(layer_kind first, std::int64_t a, layer_kind second, std::int64_t b) {
  std::vector<layer_run> runs;
  if (a > 0) runs.push_back({first, a});
  if (b > 0) runs.push_back({second, b});
  return runs;
}

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

std::optional<spec_violation> build_llama(const field_values& v, model_spec& spec) { return build_decoder(v, spec); }

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

// Gemma 3 (Gemma3TextConfig): layer_types, or else the older sliding_window_pattern: layer i is full attention
// iff (i+1) % sliding_window_pattern == 0, sliding otherwise.
std::optional<spec_violation> build_gemma3(const field_values& v, model_spec& spec) {
  if (auto bad = build_decoder(v, spec)) return bad;
  text_spec& t = spec.text;
  std::vector<layer_run> runs;
  if (v["layer_types"].present) {
    if (auto bad = runs_of_names(v, t, runs)) return bad;
  } else {
    const std::int64_t pattern = v.integer("sliding_window_pattern");
    const std::int64_t periods = t.num_hidden_layers / pattern, rest = t.num_hidden_layers % pattern;
    if (pattern == 1) {
      runs.push_back({layer_kind::full_attention, t.num_hidden_layers});
    } else if (periods > (std::int64_t{1} << 16)) {
      return spec_violation{path("sliding_window_pattern"),
                            "gives " + n(periods) + " sliding/full periods; more than 65536 are not supported"};
    } else {
      for (std::int64_t p = 0; p < periods; ++p) {
        runs.push_back({layer_kind::sliding_attention, pattern - 1});
        runs.push_back({layer_kind::full_attention, 1});
      }
      if (rest > 0) runs.push_back({layer_kind::sliding_attention, rest});
    }
  }
  std::int64_t window = 0;
  const bool slides =
      std::any_of(runs.begin(), runs.end(), [](const layer_run& r) { return r.kind == layer_kind::sliding_attention; });
  if (slides) {
    if (auto bad = window_of(v, window)) return bad;
  }
  set_layout(t, std::move(runs), window);
  return std::nullopt;
}

// gpt-oss (GptOssConfig): layer_types, by default alternating sliding (even i) and full (odd i); MoE on every
// layer, num_local_experts experts of intermediate_size (fused gate_up_proj h -> 2I, down_proj I -> h), top
// num_experts_per_tok. The attention sinks (a logit per head) and the biases are element-wise.
std::optional<spec_violation> build_gpt_oss(const field_values& v, model_spec& spec) {
  if (auto bad = build_decoder(v, spec)) return bad;
  text_spec& t = spec.text;
  std::vector<layer_run> runs;
  if (v["layer_types"].present) {
    if (auto bad = runs_of_names(v, t, runs)) return bad;
  } else if (t.num_hidden_layers > (std::int64_t{1} << 17)) {
    return spec_violation{path("num_hidden_layers"),
                          "without layer_types, more than 131072 alternating layers are not supported (got " +
                              n(t.num_hidden_layers) + ")"};
  } else {
    for (std::int64_t i = 0; i < t.num_hidden_layers; ++i) {
      runs.push_back({i % 2 == 0 ? layer_kind::sliding_attention : layer_kind::full_attention, 1});
    }
  }
  std::int64_t window = 0;
  const bool slides =
      std::any_of(runs.begin(), runs.end(), [](const layer_run& r) { return r.kind == layer_kind::sliding_attention; });
  if (slides) {
    if (auto bad = window_of(v, window)) return bad;
  }
  set_layout(t, std::move(runs), window);
  t.num_experts = v.integer("num_local_experts");
  t.num_experts_per_tok = v.integer("num_experts_per_tok");
  t.moe_intermediate_size = t.intermediate_size;
  t.intermediate_size = 0;
  t.decoder_sparse_step = 1;
  return std::nullopt;
}

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

const F kSlidingWindowNullable{"sliding_window",
                               T::nullable,
                               A::fixed,
                               4096,
                               1,
                               "window w of the sliding layers (query i attends to keys i-w < j <= i); null: none"};

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

// Gemma 3's decoder fields carry Gemma3TextConfig's own defaults (transformers' configuration_gemma3.py: vocab_size
// 262208, hidden_size 2304, intermediate_size 9216, num_hidden_layers 26, num_attention_heads 8,
// num_key_value_heads 4, head_dim 256, tie_word_embeddings true), as transformers fills them in for an absent key:
// the published Gemma 3 4B text_config leaves several of them out. head_dim is its own field (not hidden_size /
// num_attention_heads). A num_key_value_heads written null is num_attention_heads, as in every family.
std::vector<F> gemma3_text_fields() {
  std::vector<F> fields = decoder_fields(true, true);
  for (F& f : fields) {
    const auto defaults_to = [&f](T type, std::int64_t value) {
      f.type = type;
      f.absent = A::fixed;
      f.default_value = value;
    };
    if (f.key == "hidden_size") defaults_to(T::integer, 2304);
    if (f.key == "num_hidden_layers") defaults_to(T::integer, 26);
    if (f.key == "num_attention_heads") defaults_to(T::integer, 8);
    if (f.key == "num_key_value_heads") defaults_to(T::nullable, 4);
    if (f.key == "head_dim") defaults_to(T::integer, 256);
    if (f.key == "intermediate_size") defaults_to(T::integer, 9216);
    if (f.key == "vocab_size") defaults_to(T::integer, 262208);
  }
  return fields;
}

const std::vector<const family_adapter*>& registry() {
  static const family_adapter llama("llama", "Llama", decoder_fields(false, false), build_llama);
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
  static const family_adapter gemma3(
      "gemma3_text", "Gemma 3",
      with(gemma3_text_fields(),
           {{"sliding_window", T::nullable, A::fixed, 4096, 1, "window of the sliding (local) layers"},
            kLayerTypes,
            {"sliding_window_pattern", T::integer, A::fixed, 6, 1,
             "without layer_types: every N-th layer is full attention, the others slide"}}),
      build_gemma3);
  std::vector<F> gpt_oss_fields = decoder_fields(true, false);
  for (F& f : gpt_oss_fields) {
    if (f.key == "intermediate_size") f.meaning = "width of one expert (fused gate_up_proj h -> 2I, down_proj I -> h)";
  }
  static const family_adapter gpt_oss(
      "gpt_oss", "gpt-oss",
      with(std::move(gpt_oss_fields),
           {{"sliding_window", T::nullable, A::fixed, 128, 1, "window of the sliding layers"},
            kLayerTypes,
            {"num_local_experts", T::integer, A::required, 0, 1, "experts; the router is h -> num_local_experts"},
            {"num_experts_per_tok", T::integer, A::required, 0, 1, "experts each token visits (top-k)"}}),
      build_gpt_oss);
  static const family_adapter deepseek_v3("deepseek_v3", "DeepSeek-V3", deepseek_fields(), build_deepseek_v3);
  static const family_adapter kimi_k2("kimi_k2", "Kimi-K2 (DeepSeek-V3 architecture)", deepseek_fields(),
                                      build_deepseek_v3);
  std::vector<F> glm_fields = decoder_fields(true, false);
  std::vector<F> moe = deepseek_moe_fields();
  glm_fields.insert(glm_fields.end(), moe.begin(), moe.end());
  static const family_adapter glm4_moe("glm4_moe", "GLM-4.5", std::move(glm_fields), build_glm4_moe);
  static const std::vector<const family_adapter*> all = [&] {
    std::vector<const family_adapter*> list = qwen_text_adapters();
    list.insert(list.end(),
                {&llama, &qwen2, &qwen2_moe, &mistral, &mixtral, &gemma3, &gpt_oss, &deepseek_v3, &kimi_k2, &glm4_moe});
    return list;
  }();
  return all;
}

// ---- the rules of a built spec ----------------------------------------------------------------------------

// The config.json key of a text_spec member on `spec`'s family.
std::string key_of(const model_spec& spec, std::string_view member) {
  const family_adapter* a = find_family(spec.model_type);
  const auto has = [a](std::string_view key) { return a != nullptr && a->field(key) != nullptr; };
  if (member == "num_experts" && has("num_local_experts")) return path("num_local_experts");
  if (member == "num_experts" && has("n_routed_experts")) return path("n_routed_experts");
  if (member == "moe_intermediate_size" && has("num_local_experts")) return path("intermediate_size");
  // (The Qwen adapters, which have rules of their own, name it mtp_num_hidden_layers as text_spec does.)
  if (member == "mtp_num_hidden_layers" && (a == nullptr || a->check == nullptr)) {
    return path("num_nextn_predict_layers");
  }
  return path(member);
}

std::optional<spec_violation> bounded(const model_spec& spec, std::string_view member, std::int64_t value,
                                      std::int64_t minimum) {
  if (value < minimum) {
    return spec_violation{key_of(spec, member), "must be " + (minimum == 1 ? std::string("> 0") : ">= " + n(minimum)) +
                                                    " (got " + n(value) + ")"};
  }
  if (value > kMaxSize) {
    return spec_violation{key_of(spec, member),
                          "too large: must be <= 2^31 = " + n(kMaxSize) + " (got " + n(value) + ")"};
  }
  return std::nullopt;
}

[[noreturn]] void fail_missing(const field_reader& reader, const std::string& at) {
  throw error(reader.where_missing(kText), reader.in_document_terms("required key '" + at + "' is missing"));
}

std::optional<spec_violation> not_in_family(const model_spec& spec, std::string_view member, std::string_view what) {
  return spec_violation{
      path(member), "not allowed for model_type " + quoted(spec.model_type) + ", which has no " + std::string(what)};
}

}  // namespace

const field_value& field_values::operator[](std::string_view key) const {
  static const field_value absent{};
  for (std::size_t i = 0; i < adapter->fields.size() && i < values.size(); ++i) {
    if (adapter->fields[i].key == key) return values[i];
  }
  return absent;
}

const family_field* family_adapter::field(std::string_view key) const {
  for (const family_field& f : fields) {
    if (f.key == key) return &f;
  }
  return nullptr;
}

const std::vector<const family_adapter*>& all_families() { return registry(); }

const family_adapter* find_family(std::string_view model_type) {
  for (const family_adapter* a : registry()) {
    if (a->model_type == model_type) return a;
  }
  return nullptr;
}

const family_adapter* find_decoder(std::string_view model_type) {
  if (const family_adapter* a = find_family(model_type)) return a;
  for (const family_adapter* a : qwen_vlm_decoders()) {
    if (a->model_type == model_type) return a;
  }
  return nullptr;
}

std::string no_vision_tower(const family_adapter& adapter) {
  return "not allowed for model_type " + quoted(adapter.model_type) + ", a text-only " +
         (adapter.vision_hint.empty() ? std::string() : std::string(adapter.family) + " ") +
         "decoder (no vision tower)" + std::string(adapter.vision_hint);
}

std::optional<spec_violation> check_family_spec(const model_spec& spec) {
  const family_adapter* adapter = find_decoder(spec.model_type);
  if (adapter != nullptr && adapter->check != nullptr) return adapter->check(spec);
  const text_spec& t = spec.text;
  if (spec.vision) {
    return spec_violation{"vision_config", "not allowed for model_type " + quoted(spec.model_type) +
                                               ", a text-only decoder (no vision tower)"};
  }
  const std::pair<std::string_view, std::int64_t> sizes[] = {{"hidden_size", t.hidden_size},
                                                             {"num_hidden_layers", t.num_hidden_layers},
                                                             {"num_attention_heads", t.num_attention_heads},
                                                             {"vocab_size", t.vocab_size}};
  for (const auto& [member, value] : sizes) {
    if (auto bad = bounded(spec, member, value, 1)) return bad;
  }
  // Qwen3.5's fields describe what these families do not have.
  if (t.full_attention_interval != 0 || t.linear_num_key_heads != 0 || t.linear_num_value_heads != 0 ||
      t.linear_key_head_dim != 0 || t.linear_value_head_dim != 0 || t.linear_conv_kernel_dim != 0) {
    return not_in_family(spec, "full_attention_interval", "Gated DeltaNet layers");
  }
  if (t.attn_output_gate) return not_in_family(spec, "attn_output_gate", "attention output gate");
  if (t.is_mla()) {
    if (auto bad = bounded(spec, "q_lora_rank", t.q_lora_rank, 0)) return bad;
    if (auto bad = bounded(spec, "kv_lora_rank", t.kv_lora_rank, 1)) return bad;
    if (t.qk_rope_head_dim < 1 || t.qk_nope_head_dim < 1) {
      return spec_violation{path(t.qk_rope_head_dim < 1 ? "qk_rope_head_dim" : "qk_nope_head_dim"),
                            "must be > 0 with kv_lora_rank = " + n(t.kv_lora_rank) +
                                ": MLA splits each query/key head into a RoPE part and a no-RoPE part"};
    }
    if (auto bad = bounded(spec, "qk_nope_head_dim", t.qk_nope_head_dim, 1)) return bad;
    if (auto bad = bounded(spec, "qk_rope_head_dim", t.qk_rope_head_dim, 1)) return bad;
    if (auto bad = bounded(spec, "v_head_dim", t.v_head_dim, 1)) return bad;
    if (!t.layer_runs.empty()) return not_in_family(spec, "layer_types", "sliding-window layers (MLA attends fully)");
  } else {
    if (t.q_lora_rank != 0 || t.qk_nope_head_dim != 0 || t.qk_rope_head_dim != 0 || t.v_head_dim != 0) {
      return spec_violation{path("kv_lora_rank"),
                            "must be > 0 when q_lora_rank, qk_nope_head_dim, qk_rope_head_dim "
                            "or v_head_dim is set (multi-head latent attention)"};
    }
    if (auto bad = bounded(spec, "num_key_value_heads", t.num_key_value_heads, 1)) return bad;
    if (auto bad = bounded(spec, "head_dim", t.head_dim, 1)) return bad;
    if (t.num_attention_heads % t.num_key_value_heads != 0) {
      return spec_violation{
          path("num_key_value_heads"),
          "must divide num_attention_heads = " + n(t.num_attention_heads) + " (got " + n(t.num_key_value_heads) + ")"};
    }
  }
  // Layer layout and windows.
  if (!t.layer_runs.empty()) {
    std::int64_t total = 0;
    for (const layer_run& run : t.layer_runs) {
      if (run.count < 1) return spec_violation{path("layer_types"), "a run of " + n(run.count) + " layers"};
      if (run.kind == layer_kind::linear_attention) return not_in_family(spec, "layer_types", "Gated DeltaNet layers");
      total += run.count;
      if (total > kMaxSize) break;
    }
    if (total != t.num_hidden_layers) {
      return spec_violation{path("layer_types"), "has " + n(total) + " entries but num_hidden_layers = " +
                                                     n(t.num_hidden_layers) + " (one entry per decoder layer)"};
    }
    if (count_layers_of_kind(t, layer_kind::sliding_attention, 0, t.num_hidden_layers) > 0) {
      if (auto bad = bounded(spec, "sliding_window", t.sliding_window, 1)) return bad;
    }
    if (count_layers_of_kind(t, layer_kind::chunked_attention, 0, t.num_hidden_layers) > 0) {
      if (auto bad = bounded(spec, "attention_chunk_size", t.attention_chunk_size, 1)) return bad;
    }
    if (attention_windows(spec).size() > kMaxAttentionWindows) {
      return spec_violation{path("layer_types"), "uses more than " + n(kMaxAttentionWindows) + " distinct windows"};
    }
  } else if (t.sliding_window != 0 || t.attention_chunk_size != 0) {
    return spec_violation{path(t.sliding_window != 0 ? "sliding_window" : "attention_chunk_size"),
                          "is set but no layer uses it (layer_types has no windowed layer)"};
  }
  // MLPs.
  if (t.is_moe()) {
    if (auto bad = bounded(spec, "num_experts", t.num_experts, 1)) return bad;
    if (auto bad = bounded(spec, "num_experts_per_tok", t.num_experts_per_tok, 1)) return bad;
    if (auto bad = bounded(spec, "moe_intermediate_size", t.moe_intermediate_size, 1)) return bad;
    if (t.num_experts_per_tok > t.num_experts) {
      return spec_violation{path("num_experts_per_tok"), "must be <= " + key_of(spec, "num_experts").substr(12) +
                                                             " = " + n(t.num_experts) + " (got " +
                                                             n(t.num_experts_per_tok) + ")"};
    }
    if (auto bad = bounded(spec, "decoder_sparse_step", t.decoder_sparse_step, 1)) return bad;
    if (auto bad = bounded(spec, "shared_expert_intermediate_size", t.shared_expert_intermediate_size, 0)) return bad;
    if (auto bad = bounded(spec, "n_shared_experts", t.n_shared_experts, 0)) return bad;
    if (t.first_k_dense_replace < 0 || t.first_k_dense_replace > t.num_hidden_layers) {
      return spec_violation{path("first_k_dense_replace"),
                            "must be in [0, num_hidden_layers = " + n(t.num_hidden_layers) + "] (got " +
                                n(t.first_k_dense_replace) + ")"};
    }
    std::set<std::int64_t> seen;
    for (std::size_t i = 0; i < t.mlp_only_layers.size(); ++i) {
      const std::int64_t index = t.mlp_only_layers[i];
      const std::string at = path("mlp_only_layers") + "[" + n(static_cast<std::int64_t>(i)) + "]";
      if (index < 0 || index >= t.num_hidden_layers) {
        return spec_violation{at, "must be a decoder layer index in [0, num_hidden_layers = " + n(t.num_hidden_layers) +
                                      ") (got " + n(index) + ")"};
      }
      if (!seen.insert(index).second) return spec_violation{at, "duplicate layer index " + n(index)};
    }
  } else if (t.num_experts_per_tok != 0 || t.moe_intermediate_size != 0 || t.first_k_dense_replace != 0 ||
             t.n_shared_experts != 0 || t.shared_expert_intermediate_size != 0 || !t.mlp_only_layers.empty()) {
    return spec_violation{key_of(spec, "num_experts"), "must be > 0 when expert fields are set"};
  }
  // A dense width no layer uses is harmless (DeepSeek with first_k_dense_replace = 0): checked only when used.
  if (t.num_dense_mlp_layers() > 0) {
    if (auto bad = bounded(spec, "intermediate_size", t.intermediate_size, 1)) return bad;
  }
  if (auto bad = bounded(spec, "mtp_num_hidden_layers", t.mtp_num_hidden_layers, 0)) return bad;
  return std::nullopt;
}

// The decoder of a document through `adapter`: every field's type and presence, the build step and the decoder's
// rules (check_family_spec), each violation cited where the document sets it. No coefficient bounds (the caller
// checks them once the whole model is built).
model_spec read_family_decoder(const field_reader& reader, const family_adapter& adapter) {
  field_values values;
  values.adapter = &adapter;
  // Fields read at the top level of a nested config.json: a violation of one is cited there.
  std::vector<std::pair<std::string, std::string>> written_at;
  const auto missing = [&reader](const std::string& at) { fail_missing(reader, at); };
  for (const family_field& f : adapter.fields) {
    field_value v;
    std::string at = path(f.key);
    if (f.top != at_top_level::no) {
      if (const std::optional<std::string> top = reader.top_level_key(at)) {
        if (!reader.has(at)) {
          written_at.emplace_back(at, *top);
          at = *top;
        } else if (f.top == at_top_level::must_agree) {
          const bool inside = reader.boolean(at);
          if (reader.boolean(*top) != inside) {
            reader.fail(*top, "contradicts " + at + " = " + (inside ? "true" : "false") +
                                  " (write the value once, in text_config)");
          }
        }
      }
    }
    v.present = reader.has(at);
    if (v.present && !f.checked_by_rules && reader.is_null(at)) {
      if (f.type != field_type::nullable) reader.fail(at, "must not be null");
      v.null = true;
    } else if (v.present) {
      switch (f.type) {
        case field_type::integer:
        case field_type::nullable: {
          v.integer = reader.integer(at);
          if (f.checked_by_rules) break;
          if (v.integer < f.minimum) {
            reader.fail(at, "must be " + (f.minimum == 1 ? std::string("> 0") : ">= " + n(f.minimum)) + " (got " +
                                n(v.integer) + ")");
          }
          if (v.integer > kMaxSize) {
            reader.fail(at, "too large: must be <= 2^31 = " + n(kMaxSize) + " (got " + n(v.integer) + ")");
          }
          break;
        }
        case field_type::boolean: v.integer = reader.boolean(at) ? 1 : 0; break;
        case field_type::index_list: {
          const std::size_t count = reader.array_size(at);
          for (std::size_t i = 0; i < count; ++i)
            v.indexes.push_back(reader.integer(at + "[" + std::to_string(i) + "]"));
          break;
        }
        case field_type::layer_types: {
          const std::size_t count = reader.array_size(at);
          v.names.reserve(std::min<std::size_t>(count, 1 << 16));
          for (std::size_t i = 0; i < count; ++i) v.names.push_back(reader.string(at + "[" + std::to_string(i) + "]"));
          break;
        }
        case field_type::text_model_type: {
          // The decoder's own model_type: the type itself for a text-only one, else the type + "_text".
          const std::string expected = text_model_type(adapter.model_type);
          const std::string value = reader.string(at);
          if (value != expected) {
            reader.fail(at, "must be " + quoted(expected) + " for " + reader.model_type_path() + " " +
                                quoted(adapter.model_type) + " (got " + quoted(value) + ")");
          }
          v.names.push_back(value);
          break;
        }
      }
    } else {
      switch (f.absent) {
        case when_absent::required: fail_missing(reader, at);
        case when_absent::format_default: {
          const std::optional<bool> fallback = reader.default_bool(at);
          if (!fallback) fail_missing(reader, at);
          v.integer = *fallback ? 1 : 0;
          break;
        }
        case when_absent::fixed: v.integer = f.default_value; break;
        case when_absent::none:
        case when_absent::derived: v.null = true; break;
      }
    }
    values.values.push_back(std::move(v));
  }
  model_spec spec;
  spec.model_type = std::string(adapter.model_type);
  const auto refuse = [&](const spec_violation& bad) {
    // A rule that finds a field the table lets the document leave out (an MoE type's intermediate_size when a
    // layer is dense) at its absent value: the key is missing.
    for (std::size_t i = 0; i < adapter.fields.size(); ++i) {
      const family_field& f = adapter.fields[i];
      if (f.absent == when_absent::none && bad.field == path(f.key) && !values.values[i].present) missing(bad.field);
    }
    for (const auto& [field, at] : written_at) {
      if (field == bad.field) reader.fail(at, bad.what);
    }
    reader.fail(bad.field, bad.what);
  };
  if (auto bad = adapter.build(values, spec)) refuse(*bad);
  if (auto bad = check_family_spec(spec)) refuse(*bad);
  return spec;
}

model_spec read_family_spec(const field_reader& reader, const family_adapter& adapter) {
  if (reader.has_table("vision_config")) reader.fail("vision_config", no_vision_tower(adapter));
  if (!reader.has_table(kText)) reader.fail("", "required table [text_config] is missing");
  model_spec spec = read_family_decoder(reader, adapter);
  if (auto bad = check_coefficients(spec)) {
    // The FLOP model names text_spec members: in this family's config.json names.
    const auto in_keys = [&spec](const std::string& field) {
      return field.rfind("text_config.", 0) == 0 ? key_of(spec, field.substr(12)) : field;
    };
    bad->field = in_keys(bad->field);
    for (std::string& other : bad->also) other = in_keys(other);
    std::string at = bad->field;
    for (const std::string& other : bad->also) {
      if (reader.has(at)) break;
      at = other;
    }
    if (!reader.has(at)) at = bad->field;
    reader.fail(at, bad->what);
  }
  return spec;
}

}  // namespace flopmeter::detail
