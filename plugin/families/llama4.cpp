// plugin/families/llama4.cpp — the Llama 4 text decoder (model_type "llama4_text"): chunked attention on the RoPE layers
// and full attention on the NoPE ones, MoE layers of top-k routed experts plus one shared expert, dense layers of
// intermediate_size_mlp.
// The family's field table (config.json names, in the dialect of families.h), its build step, and its
// registration (llama4_adapters(), listed by registry.cpp); its built specs obey check_family_spec's rules.

#include <cstdint>
#include <optional>
#include <set>
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

std::string n(std::int64_t v) { return std::to_string(v); }

// Llama4TextConfig / Llama4TextDecoderLayer, as transformers builds them:
//   attention  no_rope_layers[i] = 1: RoPE and chunked attention inside chunks of attention_chunk_size; 0: NoPE and
//              full causal attention. Absent: layer i uses RoPE iff (i + 1) % no_rope_layer_interval != 0 (3 chunked
//              : 1 full by the default interval 4). attention_chunk_size null: every layer attends fully.
//   MLP        layer i is MoE iff i is in moe_layers (absent: iff (i + 1) % interleave_moe_layer_step == 0): the
//              router h -> num_local_experts, num_experts_per_tok experts of intermediate_size (fused gate_up h -> 2I,
//              down I -> h) and one ungated shared expert of intermediate_size; the other layers a SwiGLU of
//              intermediate_size_mlp. (transformers runs every expert on every token and zeroes the unchosen ones:
//              hardware work METRICS.md states beside the model FLOPs billed here.)
std::optional<spec_violation> build_llama4_text(const field_values& v, model_spec& spec) {
  if (auto bad = build_decoder(v, spec)) return bad;
  text_spec& t = spec.text;
  const std::int64_t layers = t.num_hidden_layers;
  if (layers > (std::int64_t{1} << 17)) {
    return spec_violation{text_key("num_hidden_layers"),
                          "more than 131072 Llama 4 layers are not supported (got " + n(layers) + ")"};
  }
  // Attention layout.
  const field_value& rope = v["no_rope_layers"];
  std::vector<bool> chunked(static_cast<std::size_t>(layers));
  if (rope.present) {
    if (static_cast<std::int64_t>(rope.indexes.size()) != layers) {
      return spec_violation{text_key("no_rope_layers"), "has " + n(static_cast<std::int64_t>(rope.indexes.size())) +
                                                            " entries but num_hidden_layers = " + n(layers) +
                                                            " (one 0 / 1 per decoder layer)"};
    }
    for (std::size_t i = 0; i < rope.indexes.size(); ++i) {
      if (rope.indexes[i] != 0 && rope.indexes[i] != 1) {
        return spec_violation{
            text_key("no_rope_layers") + "[" + n(static_cast<std::int64_t>(i)) + "]",
            "must be 0 (NoPE, full attention) or 1 (RoPE, chunked attention) (got " + n(rope.indexes[i]) + ")"};
      }
      chunked[i] = rope.indexes[i] == 1;
    }
  } else {
    const std::int64_t interval = v.integer("no_rope_layer_interval");
    for (std::int64_t i = 0; i < layers; ++i) chunked[static_cast<std::size_t>(i)] = (i + 1) % interval != 0;
  }
  const field_value& chunk = v["attention_chunk_size"];
  if (!chunk.null) {
    std::vector<layer_run> runs;
    for (std::int64_t i = 0; i < layers; ++i) {
      const layer_kind kind =
          chunked[static_cast<std::size_t>(i)] ? layer_kind::chunked_attention : layer_kind::full_attention;
      if (!runs.empty() && runs.back().kind == kind) {
        ++runs.back().count;
      } else {
        runs.push_back({kind, 1});
      }
    }
    const bool any_chunked = runs.size() > 1 || (!runs.empty() && runs[0].kind == layer_kind::chunked_attention);
    if (any_chunked) {
      t.layer_runs = std::move(runs);
      t.attention_chunk_size = chunk.integer;
    }
  }
  // MLP layout.
  t.num_experts = v.integer("num_local_experts");
  t.num_experts_per_tok = v.integer("num_experts_per_tok");
  t.moe_intermediate_size = t.intermediate_size;
  t.n_shared_experts = 1;
  t.intermediate_size = v.integer("intermediate_size_mlp");
  const field_value& moe = v["moe_layers"];
  if (moe.present) {
    std::set<std::int64_t> listed;
    for (std::size_t i = 0; i < moe.indexes.size(); ++i) {
      const std::int64_t index = moe.indexes[i];
      const std::string at = text_key("moe_layers") + "[" + n(static_cast<std::int64_t>(i)) + "]";
      if (index < 0 || index >= layers) {
        return spec_violation{
            at, "must be a decoder layer index in [0, num_hidden_layers = " + n(layers) + ") (got " + n(index) + ")"};
      }
      if (!listed.insert(index).second) return spec_violation{at, "duplicate layer index " + n(index)};
    }
    t.decoder_sparse_step = 1;
    for (std::int64_t i = 0; i < layers; ++i) {
      if (listed.count(i) == 0) t.mlp_only_layers.push_back(i);
    }
  } else {
    t.decoder_sparse_step = v.integer("interleave_moe_layer_step");
  }
  return std::nullopt;
}

std::vector<F> llama4_text_fields() {
  std::vector<F> fields = decoder_fields(true, false);
  for (F& f : fields) {
    if (f.key == "intermediate_size") f.meaning = "width of one routed expert and of the shared expert";
  }
  return with(
      std::move(fields),
      {{"intermediate_size_mlp", T::integer, A::fixed, 16384, 1, "SwiGLU width of the dense (non-MoE) layers"},
       {"num_local_experts", T::integer, A::required, 0, 1, "routed experts; the router is h -> num_local_experts"},
       {"num_experts_per_tok", T::integer, A::fixed, 1, 1, "experts each token visits (top-k)"},
       {"interleave_moe_layer_step", T::integer, A::fixed, 1, 1,
        "without moe_layers: layer i is MoE iff (i + 1) % step == 0"},
       {"moe_layers", T::index_list, A::none, 0, 0, "the MoE layers' indexes (the others are dense)"},
       {"no_rope_layers", T::index_list, A::none, 0, 0,
        "per layer 1: RoPE and chunked attention, 0: NoPE and full attention"},
       {"no_rope_layer_interval", T::integer, A::fixed, 4, 1,
        "without no_rope_layers: layer i is NoPE (full) iff (i + 1) % interval == 0"},
       {"attention_chunk_size", T::nullable, A::fixed, 8192, 1, "chunk of the RoPE layers; null: no chunking"}});
}

}  // namespace

const std::vector<const family_adapter*>& llama4_adapters() {
  static const family_adapter llama4_text("llama4_text", "Llama 4 (text)", llama4_text_fields(), build_llama4_text);
  static const std::vector<const family_adapter*> all = {&llama4_text};
  return all;
}

}  // namespace flopmeter::detail
