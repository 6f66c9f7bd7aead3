// plugin/families/gemma3.cpp — the Gemma 3 decoder (model_type "gemma3_text", also the decoder of the gemma3
// vision-language type): Gemma3TextConfig's defaults, and the sliding/full layer pattern.
// The family's field table (config.json names, in the dialect of families.h), its build step, and its
// registration (gemma3_adapters(), listed by registry.cpp); its built specs obey check_family_spec's rules.

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

std::string path(std::string_view key) { return text_key(key); }
std::string n(std::int64_t v) { return std::to_string(v); }

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

}  // namespace

const std::vector<const family_adapter*>& gemma3_adapters() {
  static const family_adapter gemma3(
      "gemma3_text", "Gemma 3",
      with(gemma3_text_fields(),
           {{"sliding_window", T::nullable, A::fixed, 4096, 1, "window of the sliding (local) layers"},
            kLayerTypes,
            {"sliding_window_pattern", T::integer, A::fixed, 6, 1,
             "without layer_types: every N-th layer is full attention, the others slide"}}),
      build_gemma3);
  static const std::vector<const family_adapter*> all = {&gemma3};
  return all;
}

}  // namespace flopmeter::detail
