// plugin/arch/model_spec.cpp — model_spec's methods (flopmeter/model_spec.h): the layer layout and the sizes
// derived from the fields, all arithmetic (nothing is stored per layer). The bottom of the core's model chain:
// it needs nothing but the spec itself, and the rules, the loaders and the FLOP model all call it.

#include "flopmeter/model_spec.h"

#include "arch/architecture.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace flopmeter {

layer_kind text_spec::layer_type(std::int64_t index) const {
  if (!layer_runs.empty()) {
    std::int64_t start = 0;
    for (const layer_run& run : layer_runs) {
      if (index < start + run.count) return run.kind;
      start += run.count;
    }
    return layer_runs.back().kind;
  }
  return full_attention_interval <= 0 || (index + 1) % full_attention_interval == 0 ? layer_kind::full_attention
                                                                                    : layer_kind::linear_attention;
}

// Counted arithmetically (arch/architecture.cpp): layers i in [0, L) with (i+1) % k == 0 are floor(L/k); run
// lengths add; the MoE stride gives num_hidden_layers / decoder_sparse_step MoE layers above
// first_k_dense_replace, less the distinct mlp_only_layers entries that sit on the stride.
std::int64_t text_spec::num_full_attention_layers() const {
  if (num_hidden_layers < 1) return 0;
  return detail::count_layers_of_kind(*this, layer_kind::full_attention, 0, num_hidden_layers);
}

std::int64_t text_spec::num_linear_attention_layers() const {
  if (num_hidden_layers < 1) return 0;
  return detail::count_layers_of_kind(*this, layer_kind::linear_attention, 0, num_hidden_layers);
}

std::int64_t text_spec::num_attention_layers() const {
  if (num_hidden_layers < 1) return 0;
  if (layer_runs.empty()) return num_hidden_layers - num_linear_attention_layers();
  return detail::count_layers_of_kind(*this, layer_kind::full_attention, 0, num_hidden_layers) +
         detail::count_layers_of_kind(*this, layer_kind::sliding_attention, 0, num_hidden_layers) +
         detail::count_layers_of_kind(*this, layer_kind::chunked_attention, 0, num_hidden_layers);
}
std::int64_t text_spec::num_dense_mlp_layers() const {
  if (block_layers) return detail::count_layers_of_kind(*this, layer_kind::mlp_only, 0, num_hidden_layers);
  return num_hidden_layers - num_moe_layers();
}
std::int64_t text_spec::num_mamba_layers() const {
  if (num_hidden_layers < 1) return 0;
  return detail::count_layers_of_kind(*this, layer_kind::mamba, 0, num_hidden_layers) +
         (mamba_beside_attention ? num_attention_layers() : 0);
}
std::int64_t text_spec::num_moe_layers() const {
  if (num_hidden_layers < 1) return 0;
  return detail::count_moe_layers(*this, 0, num_hidden_layers);
}

std::int64_t vision_spec::patch_input_size() const {
  return in_channels * temporal_patch_size * patch_size * patch_size;
}

std::int64_t vision_spec::num_mergers() const { return 1 + static_cast<std::int64_t>(deepstack_visual_indexes.size()); }

std::int64_t vision_spec::num_window_blocks() const {
  return window_size > 0 ? depth - static_cast<std::int64_t>(fullatt_block_indexes.size()) : 0;
}

}  // namespace flopmeter
