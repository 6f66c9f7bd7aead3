// plugin/families/families.cpp — the one field-table dialect (families.h): the reading of a document through a
// family's table (every family file's, the Qwen types' of qwen_families.cpp too), and the rules every built spec of
// the decoder families obeys. The tables and build steps are the family files' (llama.cpp, qwen2.cpp, ...), listed
// by registry.cpp.

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
#include "flopmeter/error.h"
#include "flopmeter/flop_model.h"

namespace flopmeter::detail {
namespace {

constexpr std::string_view kText = "text_config";

std::string path(std::string_view key) { return std::string(kText) + "." + std::string(key); }
std::string n(std::int64_t v) { return std::to_string(v); }

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
  // Mamba-2 (the families' build steps refuse these with their own keys first).
  if (t.num_mamba_layers() > 0) {
    const std::pair<std::string_view, std::int64_t> mamba[] = {{"mamba_num_heads", t.mamba_num_heads},
                                                               {"mamba_head_dim", t.mamba_head_dim},
                                                               {"mamba_n_groups", t.mamba_n_groups},
                                                               {"mamba_state_size", t.mamba_state_size},
                                                               {"mamba_conv_kernel", t.mamba_conv_kernel}};
    for (const auto& [member, value] : mamba) {
      if (auto bad = bounded(spec, member, value, 1)) return bad;
    }
    if (t.mamba_num_heads % t.mamba_n_groups != 0) {
      return spec_violation{path("mamba_n_groups"), "must divide mamba_num_heads = " + n(t.mamba_num_heads) + " (got " +
                                                        n(t.mamba_n_groups) + ")"};
    }
    if ((t.mamba_num_heads * t.mamba_head_dim) % 2 != 0 && t.mamba_state_size % 2 != 0) {
      return spec_violation{path("mamba_state_size"),
                            "must be even when mamba_num_heads x mamba_head_dim is odd: the scan is billed as "
                            "Megatron's 3.5 x d_in x state multiply-adds (got " +
                                n(t.mamba_state_size) + ")"};
    }
  }
  if (count_layers_of_kind(t, layer_kind::short_conv, 0, t.num_hidden_layers) > 0) {
    if (auto bad = bounded(spec, "short_conv_kernel", t.short_conv_kernel, 1)) return bad;
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
      if (f.type != field_type::nullable && f.type != field_type::nullable_index_list && f.type != field_type::number) {
        reader.fail(at, "must not be null");
      }
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
        case field_type::index_list:
        case field_type::nullable_index_list: {
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
        case field_type::text: v.names.push_back(reader.string(at)); break;
        case field_type::number: {
          v.real = reader.number(at);
          if (!(v.real > 0) || v.real > static_cast<double>(kMaxSize)) {
            reader.fail(at, "must be a number in (0, 2^31] (got " + std::to_string(v.real) + ")");
          }
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
        case when_absent::fixed:
          v.integer = f.default_value;
          v.real = static_cast<double>(f.default_value);
          break;
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
