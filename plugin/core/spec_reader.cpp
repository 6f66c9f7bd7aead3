// plugin/core/spec_reader.cpp — reading a model_spec from any config document through a field_reader
// (read_model_spec, spec_rules.h): types and presence of every field, the defaults each model type has, the
// fields a document may write outside text_config, then the rules of spec_rules.cpp, each violation cited where
// the document sets the field. schema_fields() lists what it reads.

#include "core/spec_rules.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/families.h"
#include "core/vlm_families.h"
#include "core/spec_fields.h"
#include "flopmeter/error.h"

namespace flopmeter::detail {

model_spec read_model_spec(const field_reader& reader, const std::string& model_type) {
  if (const family_adapter* family = find_family(model_type)) return read_family_spec(reader, *family);
  if (const vlm_family* family = find_vlm_family(model_type)) return read_vlm_spec(reader, *family);
  model_spec spec;
  spec.model_type = model_type;
  text_spec& t = spec.text;

  if (!reader.has_table(kText)) reader.fail("", "required table [text_config] is missing");
  if (reader.has("text_config.model_type")) {
    const std::string expected = text_model_type(model_type);
    const std::string value = reader.string("text_config.model_type");
    if (value != expected) {
      reader.fail("text_config.model_type", "must be " + in_quotes(expected) + " for " + reader.model_type_path() +
                                                " " + in_quotes(model_type) + " (got " + in_quotes(value) + ")");
    }
  }
  // Types and presence first; a field of another model type is read too, so that check_fields can refuse it
  // (at its neutral value, 0 or false, it states the absence of the feature and is accepted).
  const auto missing = [&](const std::string& path) -> void {
    throw error(reader.where_missing(kText), reader.in_document_terms("required key '" + path + "' is missing"));
  };
  for (const text_int& field : kTextInts) {
    const std::string path = path_of(kText, field.key);
    if (reader.has(path)) {
      t.*field.member = reader.integer(path);
    } else if (applies(field.owner, spec)) {
      const bool defaulted_interval = field.presence == need::interval && model_type == kQwen3Next;
      if (field.presence == need::required || (field.presence == need::interval && !defaulted_interval) ||
          (field.presence == need::dense_mlp && !is_moe(spec))) {
        missing(path);
      }
      if (field.presence == need::step) t.*field.member = 1;
      if (defaulted_interval) t.*field.member = kQwen3NextDefaultInterval;
    }
  }
  if (reader.has("text_config.mlp_only_layers")) {
    const std::size_t count = reader.array_size("text_config.mlp_only_layers");
    for (std::size_t i = 0; i < count; ++i) {
      t.mlp_only_layers.push_back(reader.integer("text_config.mlp_only_layers[" + std::to_string(i) + "]"));
    }
  }
  if (reader.has("text_config.norm_topk_prob")) {
    t.norm_topk_prob = reader.boolean("text_config.norm_topk_prob");
  } else {
    // transformers' default: true for the MoE types but Qwen3MoeConfig's false (no FLOP effect either way).
    t.norm_topk_prob = is_moe(spec) && model_type != kQwen3Moe;
  }
  // Where the document sets each field a rule may refuse, when that is not the field's own path (a
  // top-level key of config.json): a violation is cited there.
  std::vector<std::pair<std::string, std::string>> written_at;
  // A text field the document may write inside text_config or at the top level: the path it is read from
  // (empty when neither has it); text_config's value wins. When `both_must_agree` (a field that changes the
  // work), two different values are refused: the one ignored would be a silent change of the count.
  const auto text_or_top_level = [&](const std::string& path, bool both_must_agree) -> std::string {
    const std::optional<std::string> top = reader.top_level_key(path);
    if (!top) return reader.has(path) ? path : std::string();
    if (!reader.has(path)) {
      written_at.emplace_back(path, *top);
      return *top;
    }
    const bool inside = reader.boolean(path);
    if (both_must_agree && reader.boolean(*top) != inside) {
      reader.fail(*top, std::string("contradicts ") + path + " = " + (inside ? "true" : "false") +
                            " (write the value once, in text_config)");
    }
    return path;
  };
  // No FLOP effect (the logits matmul runs either way): checkpoints that disagree load.
  const std::string tie_at = text_or_top_level("text_config.tie_word_embeddings", false);
  if (!tie_at.empty()) {
    t.tie_word_embeddings = reader.boolean(tie_at);
  } else if (const std::optional<bool> fallback = reader.default_bool("text_config.tie_word_embeddings")) {
    t.tie_word_embeddings = *fallback;
  } else {
    throw error(reader.where_missing(kText), "required key 'text_config.tie_word_embeddings' is missing");
  }
  // Absent, the output gate is what the model type has: always on Qwen3.5 (see check_fields), never on
  // Qwen3-VL. A value written is checked against that, wherever it is written.
  const std::string gate_at = text_or_top_level("text_config.attn_output_gate", true);
  t.attn_output_gate = gate_at.empty() ? is_hybrid(spec) : reader.boolean(gate_at);

  // layer_types as written: type-checked here, compared with the interval by check_written_layer_types()
  // (the spec stores no per-layer list).
  std::optional<std::vector<layer_kind>> written_layers;
  if (reader.has("text_config.layer_types")) {
    const std::size_t count = reader.array_size("text_config.layer_types");
    written_layers.emplace();
    written_layers->reserve(std::min<std::size_t>(count, 1 << 16));
    for (std::size_t i = 0; i < count; ++i) {
      const std::string path = "text_config.layer_types[" + std::to_string(i) + "]";
      const std::string value = reader.string(path);
      if (value == kFullAttention) {
        written_layers->push_back(layer_kind::full_attention);
      } else if (value == kLinearAttention) {
        written_layers->push_back(layer_kind::linear_attention);
      } else if (value == kSlidingAttention) {
        reader.fail(path, std::string(kNoSlidingWindow));
      } else {
        reader.fail(path, "expected \"linear_attention\" or \"full_attention\", got " + in_quotes(value));
      }
    }
  }

  // Qwen3 and Qwen3-MoE attend over a sliding window where use_sliding_window is true (transformers marks
  // those layers "sliding_attention"); Qwen3-Next's attention has no window (it deletes the setting).
  if ((model_type == kQwen3 || model_type == kQwen3Moe) && reader.has("text_config.use_sliding_window") &&
      reader.boolean("text_config.use_sliding_window")) {
    reader.fail("text_config.use_sliding_window", std::string(kNoSlidingWindow));
  }

  if (reader.has_table(kVision) && is_text_only_model_type(model_type)) {
    spec.vision.emplace();  // refused by check_fields, at the table
  } else if (reader.has_table(kVision)) {
    vision_spec& v = spec.vision.emplace();
    for (const vision_int& field : kVisionInts) {
      const std::string path = path_of(kVision, field.key);
      if (!reader.has(path)) throw error(reader.where_missing(kVision), "required key '" + path + "' is missing");
      v.*field.member = reader.integer(path);
    }
    if (reader.has("vision_config.deepstack_visual_indexes")) {
      const std::size_t count = reader.array_size("vision_config.deepstack_visual_indexes");
      for (std::size_t i = 0; i < count; ++i) {
        v.deepstack_visual_indexes.push_back(
            reader.integer("vision_config.deepstack_visual_indexes[" + std::to_string(i) + "]"));
      }
    } else if (!is_hybrid(spec)) {
      // Qwen3-VL merges DeepStack features from the ViT blocks this list names: one merger each, the largest
      // vision term after the blocks. Reading an absent list as [] undercounts it (4x for the usual three);
      // transformers itself would fill in its class default, [8, 16, 24], which a config.json saved with only
      // its differences from the defaults leaves out. Neither guess is safe: the file must say which.
      throw error(reader.where_missing(kVision),
                  "required key 'vision_config.deepstack_visual_indexes' is missing: Qwen3-VL adds one merger per "
                  "listed ViT block (transformers' default is [8, 16, 24]; write [] for none)");
    }
    // Qwen3.5 has no DeepStack: an absent list is [] (its checkpoints write [] or leave it out).
  }

  if (auto violation = check_fields(spec)) {
    // An MoE model needs intermediate_size only for its dense layers: the rule finds it 0, the file left it out.
    if (violation->field == "text_config.intermediate_size" && !reader.has(violation->field)) missing(violation->field);
    for (const auto& [field, at] : written_at) {
      if (field == violation->field) reader.fail(at, violation->what);
    }
    reader.fail(violation->field, violation->what);
  }
  if (auto violation = check_invariants(spec)) reader.fail(violation->field, violation->what);
  if (written_layers) {
    if (auto violation = check_written_layer_types(spec, *written_layers))
      reader.fail(violation->field, violation->what);
  }
  if (auto violation = check_coefficients(spec)) {
    // Cited where the file sets the first of the fields (a field left at its default is not in the file).
    std::string at = violation->field;
    for (const std::string& other : violation->also) {
      if (reader.has(at)) break;
      at = other;
    }
    if (!reader.has(at)) at = violation->field;
    reader.fail(at, violation->what);
  }
  return spec;
}

const std::vector<schema_field>& schema_fields() {
  static const std::vector<schema_field> fields = [] {
    std::vector<schema_field> all;
    all.push_back({kText, "model_type"});
    for (const text_int& field : kTextInts) {
      all.push_back({kText, field.key});
      if (field.key == "vocab_size") {
        all.push_back({kText, "tie_word_embeddings"});
        all.push_back({kText, "attn_output_gate"});
      }
      if (field.key == "full_attention_interval") all.push_back({kText, "layer_types"});
      if (field.key == "decoder_sparse_step") {
        all.push_back({kText, "mlp_only_layers"});
        all.push_back({kText, "norm_topk_prob"});
      }
    }
    for (const vision_int& field : kVisionInts) {
      all.push_back({kVision, field.key});
      if (field.key == "out_hidden_size") all.push_back({kVision, "deepstack_visual_indexes"});
    }
    return all;
  }();
  return fields;
}

}  // namespace flopmeter::detail
