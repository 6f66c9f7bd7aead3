// plugin/core/model_spec.cpp — model_spec's methods (flopmeter/model_spec.h): the layer layout and the sizes
// derived from the fields, all arithmetic (nothing is stored per layer). The bottom of the core's model chain:
// it needs nothing but the spec itself, and the rules, the loaders and the FLOP model all call it.

#include "flopmeter/model_spec.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace flopmeter {

layer_kind text_spec::layer_type(std::int64_t index) const {
  return full_attention_interval <= 0 || (index + 1) % full_attention_interval == 0 ? layer_kind::full_attention
                                                                                    : layer_kind::linear_attention;
}

// Layers i in [0, L) with (i+1) % k == 0 are i+1 = k, 2k, ..., floor(L/k)*k: floor(L/k) of them.
std::int64_t text_spec::num_full_attention_layers() const {
  if (num_hidden_layers < 1) return 0;
  return full_attention_interval <= 0 ? num_hidden_layers : num_hidden_layers / full_attention_interval;
}

// Counted arithmetically (no per-layer storage): the stride gives num_hidden_layers / decoder_sparse_step MoE
// layers ((i+1) % step == 0 for i in [0, L)), less the distinct mlp_only_layers entries that sit on the stride.
std::int64_t text_spec::num_moe_layers() const {
  if (!is_moe() || decoder_sparse_step < 1 || num_hidden_layers < 1) return 0;
  std::int64_t count = num_hidden_layers / decoder_sparse_step;
  std::vector<std::int64_t> forced_dense = mlp_only_layers;
  std::sort(forced_dense.begin(), forced_dense.end());
  forced_dense.erase(std::unique(forced_dense.begin(), forced_dense.end()), forced_dense.end());
  for (const std::int64_t index : forced_dense) {
    if (index >= 0 && index < num_hidden_layers && (index + 1) % decoder_sparse_step == 0) --count;
  }
  return count;
}

std::int64_t vision_spec::patch_input_size() const {
  return in_channels * temporal_patch_size * patch_size * patch_size;
}

std::int64_t vision_spec::num_mergers() const { return 1 + static_cast<std::int64_t>(deepstack_visual_indexes.size()); }

}  // namespace flopmeter
