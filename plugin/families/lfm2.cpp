// plugin/families/lfm2.cpp — the LFM2 family (model_type "lfm2"): layers of LFM2's gated short convolution ("conv")
// or GQA attention ("full_attention"), each with a SwiGLU (w1, w3 h -> I', w2 I' -> h) whose width I' follows
// Lfm2MLP's auto-adjust rule.
// The family's field table (config.json names, in the dialect of families.h), its build step, and its
// registration (lfm2_adapters(), listed by registry.cpp); its built specs obey check_family_spec's rules.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "families/decoder_kit.h"
#include "families/families.h"
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

// Lfm2Config / Lfm2ForCausalLM: the MLP width is block_ff_dim (read before intermediate_size); with
// block_auto_adjust_ff_dim it becomes int(2 I / 3), times block_ffn_dim_multiplier (truncated), rounded up to a
// multiple of block_multiple_of. The layers: layer_types ("conv" / "full_attention"), else full_attn_idxs (the
// attention layers; the rest conv), else every layer attention. The short conv's kernel is conv_L_cache.
std::optional<spec_violation> build_lfm2(const field_values& v, model_spec& spec) {
  if (auto bad = build_decoder(v, spec)) return bad;
  text_spec& t = spec.text;
  const field_value& ff = v["block_ff_dim"];
  const field_value& inter = v["intermediate_size"];
  if (ff.null && inter.null) {
    return spec_violation{text_key("block_ff_dim"), "is missing (and intermediate_size too): give the MLP width"};
  }
  std::int64_t width = ff.null ? inter.integer : ff.integer;
  if (v.boolean("block_auto_adjust_ff_dim")) {
    width = 2 * width / 3;
    if (!v["block_ffn_dim_multiplier"].null) {
      width = static_cast<std::int64_t>(v["block_ffn_dim_multiplier"].real * static_cast<double>(width));
    }
    const std::int64_t multiple = v.integer("block_multiple_of");
    width = multiple * ((width + multiple - 1) / multiple);
  }
  t.intermediate_size = width;
  std::vector<layer_run> runs;
  if (v["layer_types"].present) {
    const std::vector<std::string>& names = v["layer_types"].names;
    if (static_cast<std::int64_t>(names.size()) != t.num_hidden_layers) {
      return spec_violation{text_key("layer_types"), "has " + n(static_cast<std::int64_t>(names.size())) +
                                                         " entries but num_hidden_layers = " + n(t.num_hidden_layers) +
                                                         " (one entry per decoder layer)"};
    }
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (names[i] == "conv") {
        append(runs, layer_kind::short_conv);
      } else if (names[i] == "full_attention") {
        append(runs, layer_kind::full_attention);
      } else {
        return spec_violation{text_key("layer_types") + "[" + n(static_cast<std::int64_t>(i)) + "]",
                              "unknown layer type " + quoted(names[i]) + " (expected \"conv\" or \"full_attention\")"};
      }
    }
  } else if (v["full_attn_idxs"].present && !v["full_attn_idxs"].null) {
    const std::vector<std::int64_t>& idxs = v["full_attn_idxs"].indexes;
    if (t.num_hidden_layers > (std::int64_t{1} << 17)) {
      return spec_violation{text_key("num_hidden_layers"),
                            "more than 131072 layers with full_attn_idxs are not "
                            "supported (got " +
                                n(t.num_hidden_layers) + ")"};
    }
    std::set<std::int64_t> attention;
    for (std::size_t i = 0; i < idxs.size(); ++i) {
      if (idxs[i] < 0 || idxs[i] >= t.num_hidden_layers) {
        return spec_violation{text_key("full_attn_idxs") + "[" + n(static_cast<std::int64_t>(i)) + "]",
                              "must be a layer index in [0, num_hidden_layers = " + n(t.num_hidden_layers) + ") (got " +
                                  n(idxs[i]) + ")"};
      }
      attention.insert(idxs[i]);
    }
    for (std::int64_t i = 0; i < t.num_hidden_layers; ++i) {
      append(runs, attention.count(i) != 0 ? layer_kind::full_attention : layer_kind::short_conv);
    }
  }
  const bool conv =
      std::any_of(runs.begin(), runs.end(), [](const layer_run& r) { return r.kind == layer_kind::short_conv; });
  if (conv) {
    t.layer_runs = std::move(runs);
    t.short_conv_kernel = v.integer("conv_L_cache");
  }
  return std::nullopt;
}

std::vector<F> lfm2_fields() {
  std::vector<F> fields = decoder_fields(false, true);
  for (F& f : fields) {
    if (f.key == "intermediate_size") {
      f.type = T::nullable;
      f.absent = A::none;
      f.meaning = "the MLP width when block_ff_dim is absent";
    }
  }
  return with(
      std::move(fields),
      {{"block_ff_dim", T::nullable, A::none, 0, 1, "the MLP width before the auto-adjust (read first)"},
       {"block_auto_adjust_ff_dim", T::boolean, A::fixed, 1, 0, "true: I' = int(2I/3), x multiplier, rounded up"},
       {"block_ffn_dim_multiplier", T::number, A::fixed, 1, 0, "the auto-adjust's multiplier; null: none"},
       {"block_multiple_of", T::integer, A::fixed, 256, 1, "the auto-adjust rounds I' up to a multiple of it"},
       {"conv_L_cache", T::integer, A::fixed, 3, 1, "the short convolution's kernel"},
       {"layer_types", T::layer_types, A::none, 0, 0, "\"conv\" or \"full_attention\" per layer"},
       {"full_attn_idxs", T::nullable_index_list, A::none, 0, 0,
        "the attention layers when layer_types is absent; absent too: every layer attention"},
       {"tie_embedding", T::boolean, A::fixed, 1, 0, "no FLOP effect"}});
}

}  // namespace

const std::vector<const family_adapter*>& lfm2_adapters() {
  static const family_adapter lfm2("lfm2", "LFM2", lfm2_fields(), build_lfm2);
  static const std::vector<const family_adapter*> all = {&lfm2};
  return all;
}

}  // namespace flopmeter::detail
