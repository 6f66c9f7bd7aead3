// plugin/families/vlm_families.cpp — the vision-language families (vlm_families.h): their vision field tables in the
// config.json's names, the build steps that follow transformers' modeling code, and the rules of their towers.
//
// What each build step reads (transformers' modeling files; METRICS.md says the same for users):
//   qwen3_vl    Qwen3VLVisionModel (and Qwen3.5's, which deletes the DeepStack mergers): blocks LayerNorm +
//               attention + LayerNorm + a plain GELU MLP of intermediate_size; every block attends per frame; the
//               patch merger to out_hidden_size, plus one DeepStack merger per deepstack_visual_indexes entry.
//   qwen2_vl    Qwen2VisionTransformerPretrainedModel: embed_dim is the ViT's width and hidden_size the merger's
//               OUTPUT width; blocks LayerNorm + attention + LayerNorm + fc1 embed_dim -> embed_dim * mlp_ratio,
//               QuickGELU, fc2; every block attends per temporal frame; PatchMerger (no DeepStack).
//   qwen2_5_vl  Qwen2_5_VisionTransformerPretrainedModel: hidden_size is the ViT's width; RMSNorm and a gated SiLU
//               MLP of intermediate_size (gate, up, down); blocks in fullatt_block_indexes attend per frame, the
//               others inside windows of window_size / patch_size / spatial_merge_size merged tokens a side
//               (get_window_index); the same patch merger to out_hidden_size.
//   internvl    InternVLVisionModel: a CLS token prepended to the (image_size / patch_size)^2 patches of every
//               448-pixel tile, LayerNorm, attention, LayerNorm, fc1, GELU, fc2; the CLS token is dropped after the
//               tower, pixel shuffle by downsample_ratio (1 / downsample_ratio patches a side per token), then
//               the projector LayerNorm, Linear(4 hv -> text hidden), GELU, Linear(text hidden -> text hidden).
//   gemma3      SiglipVisionModel over each image_size image (one bidirectional sequence of (image_size /
//               patch_size)^2 patches), AvgPool2d to mm_tokens_per_image tokens, RMSNorm, one projection
//               hv -> text hidden; in the decoder each image's tokens attend to each other (token_type_ids).

#include "families/vlm_families.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/printable_text.h"
#include "families/qwen_families.h"
#include "flopmeter/error.h"

namespace flopmeter::detail {
namespace {

using T = vlm_field_type;
std::string n(std::int64_t v) { return std::to_string(v); }

// The decoder adapter of a document of `family`.
const family_adapter& decoder_of(const field_reader& reader, const vlm_family& family) {
  std::string type(family.decoder);
  if (type.empty()) {
    if (!reader.has("text_config.model_type")) {
      throw error(reader.where_missing("text_config"),
                  "required key 'text_config.model_type' is missing: " + std::string(family.family) +
                      " names its decoder's family there (\"qwen2\" for InternVL3)");
    }
    type = reader.string("text_config.model_type");
  } else if (!family.flat && reader.has("text_config.model_type") && reader.string("text_config.model_type") != type &&
             (find_decoder(type) == nullptr || find_decoder(type)->field("model_type") == nullptr)) {
    // (A decoder whose table has model_type checks it itself: Qwen3-VL's is "qwen3_vl_text".)
    reader.fail("text_config.model_type", "must be " + quoted(type) + " for model_type " +
                                              quoted(std::string(family.model_type)) + " (got " +
                                              quoted(reader.string("text_config.model_type")) + ")");
  }
  const family_adapter* adapter = family.decoder.empty() ? find_family(type) : find_decoder(type);
  // InternVL's decoders are the families of families.cpp; a Qwen3 decoder there is not modelled (not yet tested).
  if (adapter != nullptr && family.decoder.empty() && adapter->check != nullptr) adapter = nullptr;
  if (adapter == nullptr) {
    reader.fail("text_config.model_type", "unsupported decoder " + quoted(type) + " for " + std::string(family.family) +
                                              " (flopmeter models the decoder families " +
                                              supported_model_types_text() + ")");
  }
  return *adapter;  // gemma3_text's table carries Gemma3TextConfig's defaults itself (families.cpp)
}

vlm_value read_value(const field_reader& reader, const vlm_field& f) {
  vlm_value v;
  v.present = reader.has(f.path);
  const std::string at(f.path);
  if (!v.present) {
    if (f.required) {
      const std::size_t dot = at.rfind('.');
      throw error(reader.where_missing(dot == std::string::npos ? "" : at.substr(0, dot)),
                  "required key '" + at + "' is missing" + std::string(f.missing_note));
    }
    v.number = f.default_value;
    return v;
  }
  switch (f.type) {
    case T::integer: {
      const std::int64_t i = reader.integer(at);
      if (i < 1) reader.fail(at, "must be > 0 (got " + n(i) + ")");
      if (i > kMaxSize) reader.fail(at, "too large: must be <= 2^31 = " + n(kMaxSize) + " (got " + n(i) + ")");
      v.number = static_cast<double>(i);
      break;
    }
    case T::side: {
      std::int64_t side = 0;
      if (reader.is_array(at)) {
        if (reader.array_size(at) != 2) reader.fail(at, "must be one integer or a list [height, width] of two");
        const std::int64_t h = reader.integer(at + "[0]"), w = reader.integer(at + "[1]");
        if (h != w) {
          reader.fail(at, "must be square (got [" + n(h) + ", " + n(w) + "]): flopmeter bills square tiles");
        }
        side = h;
      } else {
        side = reader.integer(at);
      }
      if (side < 1 || side > kMaxSize) reader.fail(at, "must be in [1, 2^31] (got " + n(side) + ")");
      v.number = static_cast<double>(side);
      break;
    }
    case T::ratio:
    case T::number: {
      const double x = reader.number(at);
      if (!(x > 0) || (f.type == T::ratio && x > 1) || !(x <= static_cast<double>(kMaxSize))) {
        reader.fail(at, f.type == T::ratio ? "must be in (0, 1]" : "must be > 0 and <= 2^31");
      }
      v.number = x;
      break;
    }
    case T::index_list: {
      const std::size_t count = reader.array_size(at);
      for (std::size_t i = 0; i < count && i <= static_cast<std::size_t>(kMaxSize); ++i) {
        v.indexes.push_back(reader.integer(at + "[" + std::to_string(i) + "]"));
      }
      break;
    }
  }
  return v;
}

std::optional<spec_violation> check_vision(const model_spec& spec) {
  const std::string& type = spec.model_type;
  const vlm_family* family = find_vlm_family(type);
  if (!spec.vision && family != nullptr && family->vision_optional) return std::nullopt;
  if (!spec.vision) return spec_violation{"vision_config", "required for model_type " + quoted(type)};
  const vision_tower_kind tower = family != nullptr ? family->tower : vision_tower_kind{};
  const auto key_of = [family](std::string_view member) {
    return family != nullptr ? family->key_of(member) : "vision_config." + std::string(member);
  };
  if (tower.qwen3) return check_qwen3_vision(spec);
  const vision_spec& v = *spec.vision;
  const std::pair<std::string_view, std::int64_t> sizes[] = {{"depth", v.depth},
                                                             {"hidden_size", v.hidden_size},
                                                             {"num_heads", v.num_heads},
                                                             {"intermediate_size", v.intermediate_size},
                                                             {"out_hidden_size", v.out_hidden_size},
                                                             {"patch_size", v.patch_size},
                                                             {"temporal_patch_size", v.temporal_patch_size},
                                                             {"spatial_merge_size", v.spatial_merge_size},
                                                             {"in_channels", v.in_channels}};
  for (const auto& [member, value] : sizes) {
    if (value < 1 || value > kMaxSize) {
      return spec_violation{key_of(member), "must be in [1, 2^31] (got " + n(value) + ")"};
    }
  }
  if (v.hidden_size % v.num_heads != 0) {
    return spec_violation{key_of("num_heads"),
                          "must divide the ViT's width " + n(v.hidden_size) + " (got " + n(v.num_heads) + ")"};
  }
  if (v.out_hidden_size != spec.text.hidden_size) {
    return spec_violation{key_of("out_hidden_size"),
                          "must equal the decoder's hidden_size = " + n(spec.text.hidden_size) +
                              " (the projector writes its tokens into the decoder's embeddings; got " +
                              n(v.out_hidden_size) + ")"};
  }
  if (!v.deepstack_visual_indexes.empty()) {
    return spec_violation{"vision_config.deepstack_visual_indexes",
                          "not allowed for model_type " + quoted(type) + ", which has no DeepStack mergers"};
  }
  // Windows (Qwen2.5-VL).
  const bool windowed = tower.windowed;
  if (!windowed && (v.window_size != 0 || !v.fullatt_block_indexes.empty())) {
    return spec_violation{"vision_config.window_size",
                          "not allowed for model_type " + quoted(type) + ", whose ViT has no window attention"};
  }
  if (windowed) {
    const std::int64_t unit = v.patch_size * v.spatial_merge_size;  // <= 2^62
    if (v.window_size < 1 || v.window_size > kMaxSize || v.window_size % unit != 0) {
      return spec_violation{"vision_config.window_size",
                            "must be a positive multiple of patch_size * spatial_merge_size = " + n(unit) +
                                " (windows are whole merged tokens; got " + n(v.window_size) + ")"};
    }
    std::set<std::int64_t> seen;
    for (std::size_t i = 0; i < v.fullatt_block_indexes.size(); ++i) {
      const std::int64_t index = v.fullatt_block_indexes[i];
      const std::string at = "vision_config.fullatt_block_indexes[" + n(static_cast<std::int64_t>(i)) + "]";
      if (index < 0 || index >= v.depth) {
        return spec_violation{
            at, "block index " + n(index) + " is outside the depth: must be in [0, depth = " + n(v.depth) + ")"};
      }
      if (!seen.insert(index).second) return spec_violation{at, "block index " + n(index) + " is listed twice"};
    }
  }
  // MLP, CLS token, tiles and projector: what the family's tower is.
  const bool tiled = tower.tiled;
  if ((v.mlp == vision_mlp_kind::gated) != tower.gated || v.cls_token != tower.cls || v.projector != tower.projector ||
      v.bidirectional_image != tower.image_block) {
    return spec_violation{"vision_config", "the vision tower's MLP, CLS token, projector or image block is not what " +
                                               quoted(type) + " builds"};
  }
  if (tiled) {
    if (v.image_size < 1 || v.image_size > kMaxSize || v.image_size % v.patch_size != 0 ||
        (v.image_size / v.patch_size) % v.spatial_merge_size != 0) {
      return spec_violation{"vision_config.image_size", "must be a multiple of patch_size = " + n(v.patch_size) +
                                                            " whose patch grid (image_size / "
                                                            "patch_size a side) is a multiple of " +
                                                            key_of("spatial_merge_size") + "'s " +
                                                            n(v.spatial_merge_size) + " (got " + n(v.image_size) + ")"};
    }
    if (v.temporal_patch_size != 1) {
      return spec_violation{"vision_config.patch_size", "a 2-D patch embedding has temporal_patch_size 1"};
    }
  } else if (v.image_size != 0) {
    return spec_violation{"vision_config.image_size",
                          "not allowed for model_type " + quoted(type) + " (Qwen's grids have any size)"};
  }
  // Image blocks (Gemma 3): the sliding layers' window must hold an image, so that its block adds n(n-1)/2 pairs
  // in every layer.
  if (tower.image_block && spec.text.sliding_window > 0) {
    const std::int64_t side = v.image_size / v.patch_size / v.spatial_merge_size;
    if (side * side > spec.text.sliding_window) {
      return spec_violation{"mm_tokens_per_image",
                            "must be <= text_config.sliding_window = " + n(spec.text.sliding_window) +
                                " (an image must fit the sliding window; got " + n(side * side) + ")"};
    }
  }
  return std::nullopt;
}

}  // namespace

const vlm_field* vlm_family::field(std::string_view path) const {
  for (const vlm_field& f : fields) {
    if (f.path == path) return &f;
  }
  return nullptr;
}

std::string vlm_family::key_of(std::string_view member) const {
  for (const vlm_member_key& k : keys) {
    if (k.member == member) return std::string(k.key);
  }
  return "vision_config." + std::string(member);
}

const vlm_family* find_vlm_family(std::string_view model_type) {
  for (const vlm_family* f : all_vlm_families()) {
    if (f->model_type == model_type) return f;
  }
  return nullptr;
}

std::optional<spec_violation> check_vlm_spec(const model_spec& spec) {
  model_spec decoder = spec;
  decoder.vision.reset();
  if (auto bad = check_family_spec(decoder)) return bad;
  return check_vision(spec);
}

model_spec read_vlm_spec(const field_reader& reader, const vlm_family& family) {
  const bool vision = reader.has_table("vision_config");
  if (!vision && !family.vision_optional) {
    throw error(reader.where_missing(""), "required table 'vision_config' is missing: model_type " +
                                              quoted(std::string(family.model_type)) + " has a vision tower");
  }
  if (!reader.has_table("text_config")) reader.fail("", "required table [text_config] is missing");
  const family_adapter& decoder = decoder_of(reader, family);
  model_spec spec = read_family_decoder(reader, decoder);
  spec.model_type = std::string(family.model_type);
  if (vision) {
    vlm_values values;
    values.family = &family;
    for (const vlm_field& f : family.fields) values.values.push_back(read_value(reader, f));
    vision_spec& v = spec.vision.emplace();
    if (auto bad = family.build(values, spec.text, v)) reader.fail(bad->field, bad->what);
    if (auto bad = check_vision(spec)) reader.fail(bad->field, bad->what);
  }
  if (auto bad = check_coefficients(spec)) {
    // The FLOP model names vision_spec members ("vision_config.X"): in this family's config.json names. Qwen3-VL's
    // is cited where the document sets the first of the fields (a field left at its default is not in it).
    const auto in_keys = [&family](const std::string& field) {
      return field.rfind("vision_config.", 0) == 0 ? family.key_of(field.substr(14)) : field;
    };
    std::string at = in_keys(bad->field);
    if (family.tower.qwen3) {
      for (const std::string& other : bad->also) {
        if (reader.has(at)) break;
        at = in_keys(other);
      }
      if (!reader.has(at)) at = bad->field;
    } else if (!reader.has(at)) {
      at = "vision_config";
    }
    reader.fail(at, bad->what);
  }
  return spec;
}

}  // namespace flopmeter::detail
