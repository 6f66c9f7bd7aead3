// plugin/families/mamba2_kit.cpp — the Mamba-2 sizes the hybrid families share (mamba2_kit.h).

#include "families/mamba2_kit.h"

#include <cstdint>
#include <string>

#include "families/decoder_kit.h"

namespace flopmeter::detail {

std::optional<spec_violation> build_mamba2(const field_values& v, const mamba2_keys& keys, text_spec& t) {
  t.mamba_num_heads = v.integer(keys.heads);
  t.mamba_head_dim = v.integer(keys.head_dim);
  t.mamba_n_groups = v.integer(keys.n_groups);
  t.mamba_state_size = v.integer(keys.state_size);
  t.mamba_conv_kernel = v.integer(keys.conv_kernel);
  if (t.mamba_num_heads % t.mamba_n_groups != 0) {
    return spec_violation{text_key(keys.n_groups), "must divide " + std::string(keys.heads) + " = " +
                                                       std::to_string(t.mamba_num_heads) + " (got " +
                                                       std::to_string(t.mamba_n_groups) + ")"};
  }
  if ((t.mamba_num_heads * t.mamba_head_dim) % 2 != 0 && t.mamba_state_size % 2 != 0) {
    return spec_violation{text_key(keys.state_size),
                          "must be even when " + std::string(keys.heads) + " x " + std::string(keys.head_dim) +
                              " is odd: the scan is billed as Megatron's 3.5 x d_in x state multiply-adds (got " +
                              std::to_string(t.mamba_state_size) + ")"};
  }
  return std::nullopt;
}

}  // namespace flopmeter::detail
