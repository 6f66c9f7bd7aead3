// plugin/families/llama.cpp — the Llama family (model_type "llama"): the plain decoder every other family extends (GQA, a
// SwiGLU MLP, no window).
// The family's field table (config.json names, in the dialect of families.h), its build step, and its
// registration (llama_adapters(), listed by registry.cpp); its built specs obey check_family_spec's rules.

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

std::optional<spec_violation> build_llama(const field_values& v, model_spec& spec) { return build_decoder(v, spec); }

}  // namespace

const std::vector<const family_adapter*>& llama_adapters() {
  static const family_adapter llama("llama", "Llama", decoder_fields(false, false), build_llama);
  static const std::vector<const family_adapter*> all = {&llama};
  return all;
}

}  // namespace flopmeter::detail
