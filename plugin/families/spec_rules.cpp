// plugin/families/spec_rules.cpp — the model_spec rules, written once (see spec_rules.h): the model types, the dispatch
// to each type's adapter (families.h: a field table, a build step and the rules; vlm_families.h for the
// vision-language types) and the coefficient bounds. The loaders (model_toml.cpp for TOML, hf_config.cpp for
// config.json, both through read_model_spec) and validate_model_spec() all come here.

#include "families/spec_rules.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "families/families.h"
#include "families/vlm_families.h"
#include "flopmeter/error.h"
#include "flopmeter/flop_model.h"

namespace flopmeter::detail {

bool is_supported_model_type(std::string_view model_type) {
  return find_family(model_type) != nullptr || find_vlm_family(model_type) != nullptr;
}

bool is_text_only_model_type(std::string_view model_type) { return find_family(model_type) != nullptr; }

std::string text_model_type(std::string_view model_type) {
  return is_text_only_model_type(model_type) ? std::string(model_type) : std::string(model_type) + "_text";
}

std::string model_family_name(std::string_view model_type) {
  if (const family_adapter* family = find_family(model_type)) return std::string(family->family);
  if (const vlm_family* family = find_vlm_family(model_type)) return std::string(family->family);
  return std::string(model_type);
}

// The Qwen3 vision-language types first (their vision tower is optional), then the decoder families, then the other
// vision-language types: the order of the registries.
std::string supported_model_types_text() {
  std::string text;
  const auto add = [&text](std::string_view type) { text += (text.empty() ? "" : ", ") + detail::quoted(type); };
  for (const vlm_family* family : all_vlm_families()) {
    if (family->vision_optional) add(family->model_type);
  }
  for (const family_adapter* family : all_families()) add(family->model_type);
  for (const vlm_family* family : all_vlm_families()) {
    if (!family->vision_optional) add(family->model_type);
  }
  return text;
}

std::optional<spec_violation> check_model_spec(const model_spec& spec) {
  if (!is_supported_model_type(spec.model_type)) {
    return spec_violation{"model_type", "unknown model type " + detail::quoted(spec.model_type) +
                                            " (supported: " + supported_model_types_text() + ")"};
  }
  if (find_family(spec.model_type) != nullptr) return check_family_spec(spec);
  return check_vlm_spec(spec);
}

model_spec read_model_spec(const field_reader& reader, const std::string& model_type) {
  if (const family_adapter* family = find_family(model_type)) return read_family_spec(reader, *family);
  const vlm_family* family = find_vlm_family(model_type);
  if (family == nullptr)
    reader.fail("", "unknown model type " + detail::quoted(model_type));  // the callers check first
  return read_vlm_spec(reader, *family);
}

std::optional<spec_violation> check_coefficients(const model_spec& spec) {
  // MTP layers are counted as if trained: a plugin config can turn that on after loading.
  model_spec trained = spec;
  trained.train_mtp_layers = true;
  try {
    (void)compute_coefficients(trained);
  } catch (const coefficient_overflow& e) {
    std::string fields;
    std::string first;
    std::vector<std::string> also;
    for (const std::string& field : e.fields()) {
      // The FLOP model names model_spec members ("text.X", "vision.X"): the schema paths are "text_config.X"
      // and "vision_config.X".
      const bool vision = field.rfind("vision.", 0) == 0;
      const std::string path =
          std::string(vision ? "vision_config." : "text_config.") + field.substr(field.find('.') + 1);
      fields += (fields.empty() ? "" : ", ") + path;
      if (first.empty()) {
        first = path;
      } else {
        also.push_back(path);
      }
    }
    return spec_violation{
        first.empty() ? std::string("text_config") : first,
        "coefficient " + e.coefficient() + " would exceed 2^63 FLOPs: the product of " + fields + " is too large",
        also};
  }
  return std::nullopt;
}

}  // namespace flopmeter::detail
