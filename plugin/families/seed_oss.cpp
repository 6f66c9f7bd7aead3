// plugin/families/seed_oss.cpp — the Seed-OSS family (model_type "seed_oss"): Llama's decoder with heads of their own
// width. The family's field table (config.json names, in the dialect of families.h), its build step, and its
// registration (seed_oss_adapters(), listed by registry.cpp); its built specs obey check_family_spec's rules.

#include <vector>

#include "families/decoder_kit.h"
#include "families/families.h"

namespace flopmeter::detail {
namespace {

// Seed-OSS (transformers' SeedOssConfig, modeling_seed_oss.py): GQA with head_dim written, so num_attention_heads x
// head_dim may exceed hidden_size (Seed-OSS-36B: 80 x 128 = 10,240 = 2 x 5,120), and a SwiGLU MLP; no window.
// attention_bias (q, k, v) and attention_out_bias add biases, element-wise and not billed. Every size is required:
// the class default hidden_size (4096) is not the 36B checkpoint's, so an absent size is an error, not a default.
// That includes num_key_value_heads, whose class default is 8 (not num_attention_heads); a null one is
// num_attention_heads, as in every family.
std::vector<family_field> seed_oss_fields() {
  std::vector<family_field> fields = decoder_fields(true, false);
  for (family_field& f : fields) {
    if (f.key == "num_key_value_heads") {
      f.absent = when_absent::required;
      f.meaning = "key/value heads (GQA); null: num_attention_heads";
    }
  }
  return fields;
}

}  // namespace

const std::vector<const family_adapter*>& seed_oss_adapters() {
  static const family_adapter seed_oss("seed_oss", "Seed-OSS", seed_oss_fields(), build_decoder);
  static const std::vector<const family_adapter*> all = {&seed_oss};
  return all;
}

}  // namespace flopmeter::detail
