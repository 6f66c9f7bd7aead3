// plugin/families/decoder_kit.cpp — the parts the decoder family files share (decoder_kit.h).

#include "families/decoder_kit.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "util/printable_text.h"

namespace flopmeter::detail {
namespace {

constexpr std::string_view kFull = "full_attention";
constexpr std::string_view kSliding = "sliding_attention";

using T = field_type;
using A = when_absent;

std::string n(std::int64_t v) { return std::to_string(v); }

}  // namespace

std::string text_key(std::string_view key) { return "text_config." + std::string(key); }

// The decoder fields every family has, in SCHEMA.md order.
std::vector<family_field> decoder_fields(bool head_dim_required, bool tie_default) {
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

std::vector<family_field> with(std::vector<family_field> fields, std::initializer_list<family_field> more) {
  fields.insert(fields.end(), more.begin(), more.end());
  return fields;
}

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
        return spec_violation{text_key("num_attention_heads"), "must divide hidden_size = " + n(t.hidden_size) +
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
    return spec_violation{text_key("layer_types"), "has " + n(static_cast<std::int64_t>(names.size())) +
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
      return spec_violation{text_key("layer_types") + "[" + n(static_cast<std::int64_t>(i)) + "]",
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
    return spec_violation{text_key("sliding_window"),
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

bool any_sliding(const std::vector<layer_run>& runs) {
  return std::any_of(runs.begin(), runs.end(),
                     [](const layer_run& r) { return r.kind == layer_kind::sliding_attention; });
}

std::vector<layer_run> every_nth_full(std::int64_t pattern, std::int64_t layers) {
  if (pattern == 1) return {{layer_kind::full_attention, layers}};
  std::vector<layer_run> runs;
  for (std::int64_t p = 0; p < layers / pattern; ++p) {
    runs.push_back({layer_kind::sliding_attention, pattern - 1});
    runs.push_back({layer_kind::full_attention, 1});
  }
  if (layers % pattern > 0) runs.push_back({layer_kind::sliding_attention, layers % pattern});
  return runs;
}

}  // namespace flopmeter::detail
