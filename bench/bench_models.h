// bench/bench_models.h — model specs shared by the hot-path benchmarks (bench_on_microbatch.cpp,
// hot_path_instructions.cpp). Both compile with FLOPMETER_SOURCE_DIR set to the repository root.
#pragma once

#include <cstdint>
#include <string>

#include "flopmeter/model_config.h"

namespace flopmeter::bench {

// A shipped model file of model_configs/, by file name.
inline model_spec shipped_model(const std::string& file) {
  return load_model_spec(std::string(FLOPMETER_SOURCE_DIR "/model_configs/") + file);
}

// gpt-oss-20b's layers split in thirds: sliding 128, chunked 2048 and full attention. The only shipped-size
// model with two window counts, so the case where the hot path counts pairs under both windows.
inline model_spec gpt_oss_20b_with_two_windows() {
  model_spec spec = shipped_model("gpt_oss_20b.toml");
  const std::int64_t third = spec.text.num_hidden_layers / 3;
  spec.text.layer_runs = {{layer_kind::sliding_attention, third},
                          {layer_kind::chunked_attention, third},
                          {layer_kind::full_attention, spec.text.num_hidden_layers - 2 * third}};
  spec.text.attention_chunk_size = 2048;
  return spec;
}

}  // namespace flopmeter::bench
