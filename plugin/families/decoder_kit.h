// plugin/families/decoder_kit.h — internal: what the decoder family files (llama.cpp, qwen2.cpp, ...) share, in the
// one field-table dialect of families.h: the decoder fields every family has, the layout fields, and the common
// parts of a build step (the decoder sizes, a written layer_types list, the sliding layout). A family file combines
// them with its own fields and rules; nothing here knows a model type.
// Not installed. Thread-safety: constant tables and pure functions.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "families/families.h"
#include "families/spec_rules.h"
#include "flopmeter/model_spec.h"

namespace flopmeter::detail {

// "text_config.<key>": the schema path of a decoder field.
std::string text_key(std::string_view key);

// The decoder fields every family has, in SCHEMA.md order: head_dim required (a family whose heads need not be
// hidden_size / num_attention_heads wide) or derived; tie_word_embeddings' default.
std::vector<family_field> decoder_fields(bool head_dim_required, bool tie_default);
// `fields` followed by `more`.
std::vector<family_field> with(std::vector<family_field> fields, std::initializer_list<family_field> more);

inline constexpr family_field kUseSlidingWindow{"use_sliding_window",
                                                field_type::boolean,
                                                when_absent::fixed,
                                                0,
                                                0,
                                                "false: no layer slides (sliding_window is ignored)"};
inline constexpr family_field kMaxWindowLayers{"max_window_layers",
                                               field_type::integer,
                                               when_absent::fixed,
                                               28,
                                               0,
                                               "layers below it attend fully; the rest slide when use_sliding_window"};
inline constexpr family_field kLayerTypes{
    "layer_types",
    field_type::layer_types,
    when_absent::derived,
    0,
    0,
    "\"full_attention\" / \"sliding_attention\" per layer; absent: the family's rule"};

// The decoder fields into spec.text; head_dim and num_key_value_heads derived as transformers does.
std::optional<spec_violation> build_decoder(const field_values& v, model_spec& spec);
// layer_types as written: each entry full or sliding, one per layer, appended to `runs` as runs.
std::optional<spec_violation> runs_of_names(const field_values& v, text_spec& t, std::vector<layer_run>& runs);
// Whether a run of `runs` slides.
bool any_sliding(const std::vector<layer_run>& runs);
// Sets the layout: `runs` with `window` (empty or all full: every layer attends fully, no window).
void set_layout(text_spec& t, std::vector<layer_run> runs, std::int64_t window);
// The window a sliding layer uses: sliding_window, which must then be set.
std::optional<spec_violation> window_of(const field_values& v, std::int64_t& window);
// [first kind x a, second kind x b], without empty runs.
std::vector<layer_run> two_runs(layer_kind first, std::int64_t a, layer_kind second, std::int64_t b);
// Layer i is full attention iff (i + 1) % pattern == 0, sliding otherwise (pattern 1: every layer full). The
// caller bounds layers / pattern (one run pair per period).
std::vector<layer_run> every_nth_full(std::int64_t pattern, std::int64_t layers);

}  // namespace flopmeter::detail
