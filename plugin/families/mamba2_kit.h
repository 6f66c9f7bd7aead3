// plugin/families/mamba2_kit.h — internal: what the Mamba-2 hybrid family files (nemotron_h.cpp,
// granitemoehybrid.cpp, falcon_h1.cpp) share: the Mamba-2 mixer's sizes from each family's own config.json keys
// into text_spec, with the rules that name those keys.
// Not installed. Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string_view>

#include "families/families.h"
#include "flopmeter/model_spec.h"

namespace flopmeter::detail {

// The config.json keys of one family's Mamba-2 sizes (Nemotron-H: "mamba_num_heads", Granite: "mamba_n_heads", ...).
struct mamba2_keys {
  std::string_view heads, head_dim, n_groups, state_size, conv_kernel;
};

// Reads the five sizes into t.mamba_* (each >= 1 by its field's bound); refuses, naming the family's key, a group
// count that does not divide the heads and an odd state size when heads x head_dim is odd (the scan's 3.5 x d_in x N
// multiply-adds must be whole).
std::optional<spec_violation> build_mamba2(const field_values& v, const mamba2_keys& keys, text_spec& t);

}  // namespace flopmeter::detail
