// plugin/families/apertus.cpp — the Apertus family (model_type "apertus"): Llama's attention (GQA, QK norms:
// element-wise) with a 2-matrix MLP (ApertusMLP: up_proj h -> I, xIELU, down_proj I -> h; no gate), so a layer's
// MLP costs 2*h*I multiply-adds per token, not a SwiGLU's 3*h*I.
// The family's field table (config.json names, in the dialect of families.h), its build step, and its
// registration (apertus_adapters(), listed by registry.cpp); its built specs obey check_family_spec's rules.

#include <optional>
#include <vector>

#include "families/decoder_kit.h"
#include "families/families.h"

namespace flopmeter::detail {
namespace {

using F = family_field;

std::optional<spec_violation> build_apertus(const field_values& v, model_spec& spec) {
  if (auto bad = build_decoder(v, spec)) return bad;
  spec.text.plain_mlp = true;
  return std::nullopt;
}

// intermediate_size is required: transformers' ApertusConfig defaults it to 14336, which is not the 8B
// checkpoint's 21504 (model_configs/apertus_8b.toml).
std::vector<F> apertus_fields() {
  std::vector<F> fields = decoder_fields(false, false);
  for (F& f : fields) {
    if (f.key == "intermediate_size") f.meaning = "width of the 2-matrix xIELU MLP (up h -> I, down I -> h)";
  }
  return fields;
}

}  // namespace

const std::vector<const family_adapter*>& apertus_adapters() {
  static const family_adapter apertus("apertus", "Apertus", apertus_fields(), build_apertus);
  static const std::vector<const family_adapter*> all = {&apertus};
  return all;
}

}  // namespace flopmeter::detail
