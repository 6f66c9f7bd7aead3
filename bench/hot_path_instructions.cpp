// The hot paths' instructions per call under valgrind's callgrind (bench/hot_path_instructions.py runs it and
// prints the ratios). An instruction count does not move with the machine's load, so it compares two builds,
// or two models in one build, on a shared machine where CPU time does not.
//
// Usage: hot_path_instructions CASE [ITERATIONS]
//   on_microbatch:MODEL:FORMAT   throughput_plugin::on_microbatch, the bench_on_microbatch row (11 documents,
//                                32768 tokens) as FORMAT = lengths | cu_seqlens | positions, on
//                                MODEL = full (qwen3_8b), sliding_full (gpt_oss_20b: sliding 128 + full),
//                                gemma (gemma_3_4b_text: sliding 1024 + full), sliding (mistral_7b_v0_1: every
//                                layer slides), two_windows (gpt_oss_20b's layers as sliding 128, chunked 2048
//                                and full: two window counts), vlm (qwen3_vl_2b with the row's 8 images), dsa
//                                (deepseek_v3_2_exp: MLA over a top-2048 sliding window + the indexer's causal
//                                pairs), llama4 (llama_4_scout_17b_16e_text: chunks of 8192 + full) or mamba
//                                (nemotron_nano_9b_v2: a Mamba-2 hybrid)
//   count:GEOMETRY               count_from_cu_seqlens of the row with its 8 images and the sum into an
//                                interval (bench_on_microbatch's BM_count_cu_seqlens), GEOMETRY = full |
//                                two_windows (sliding 4096 + chunked 8192)
//   scan:TYPE:WINDOWS            detail::scan_positions of the row as TYPE = int64 | int32 positions, best kernel,
//                                WINDOWS = full | sliding (4096) | chunked (2048) | sliding_chunked (4096, 2048)
// callgrind's counters are zeroed after one warm-up call and dumped after ITERATIONS more (client requests,
// no-ops outside valgrind), so the dump holds those calls and this loop alone.
#include <valgrind/callgrind.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench_models.h"
#include "count/positions_scan.h"
#include "flopmeter/error.h"
#include "flopmeter/model_config.h"
#include "flopmeter/throughput.h"

namespace {

using namespace flopmeter;

// bench_on_microbatch's row: 11 documents summing to 32768 tokens, 8 images (Qwen grids in patches).
const std::vector<std::int64_t> kLengths = {8192, 6000, 4096, 3500, 3000, 2600, 2000, 1500, 1024, 600, 256};
const std::vector<image_grid> kGrids = {{1, 32, 32}, {1, 16, 24}, {2, 16, 16}, {1, 8, 8},
                                        {1, 24, 32}, {4, 12, 12}, {1, 10, 14}, {1, 2, 2}};

// Keeps `value` alive for the compiler (the loop's result is otherwise unused).
template <class T>
void keep(const T& value) {
  asm volatile("" : : "r"(&value) : "memory");
}

std::vector<std::int64_t> cu_seqlens_of_row() {
  std::vector<std::int64_t> cu = {0};
  for (const std::int64_t l : kLengths) cu.push_back(cu.back() + l);
  return cu;
}

template <class T>
std::vector<T> positions_of_row() {
  std::vector<T> positions;
  for (const std::int64_t l : kLengths) {
    for (std::int64_t p = 0; p < l; ++p) positions.push_back(static_cast<T>(p));
  }
  return positions;
}

model_spec model_named(const std::string& name) {
  if (name == "full") return bench::shipped_model("qwen3_8b.toml");
  if (name == "sliding_full") return bench::shipped_model("gpt_oss_20b.toml");
  if (name == "gemma") return bench::shipped_model("gemma_3_4b_text.toml");
  if (name == "sliding") return bench::shipped_model("mistral_7b_v0_1.toml");
  if (name == "vlm") return bench::shipped_model("qwen3_vl_2b.toml");
  if (name == "mamba") return bench::shipped_model("nemotron_nano_9b_v2.toml");
  if (name == "two_windows") return bench::gpt_oss_20b_with_two_windows();
  if (name == "dsa") return bench::shipped_model("deepseek_v3_2_exp.toml");
  if (name == "llama4") return bench::shipped_model("llama_4_scout_17b_16e_text.toml");
  throw error("unknown model " + name);
}

template <class F>
void measure(const std::string& name, long iterations, F&& call) {
  call();  // warm-up: lazy binding, the positions kernel's CPU check
  CALLGRIND_ZERO_STATS;
  for (long i = 0; i < iterations; ++i) call();
  CALLGRIND_DUMP_STATS_AT(name.c_str());
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (std::size_t colon; (colon = text.find(':', start)) != std::string::npos; start = colon + 1) {
    parts.push_back(text.substr(start, colon - start));
  }
  parts.push_back(text.substr(start));
  return parts;
}

void run_on_microbatch(const std::string& name, const std::string& model, const std::string& format, long n) {
  throughput_options o;
  o.model = model_named(model);
  o.peak_tflops_per_gpu = 989.4;
  const std::shared_ptr<throughput_plugin> plugin = throughput_plugin::create(std::move(o), make_local_communicator());
  const std::vector<std::int64_t> cu = cu_seqlens_of_row();
  const std::vector<std::int64_t> positions = positions_of_row<std::int64_t>();
  microbatch_event e;
  if (format == "lengths") {
    e.document_lengths = kLengths;
  } else if (format == "cu_seqlens") {
    e.cu_seqlens = cu;
  } else if (format == "positions") {
    e.positions = positions;
  } else {
    throw error("unknown format " + format);
  }
  if (model == "vlm") e.grid_thw = kGrids;
  e.samples = 11;
  measure(name, n, [&] { plugin->on_microbatch(e); });
  if (plugin->health().bad_microbatches != 0) throw error(name + ": the row was rejected");
}

void run_count(const std::string& name, const std::string& geometry_name, long n) {
  vision_geometry g;
  g.has_vision = true;
  g.spatial_merge_size = 2;
  if (geometry_name == "two_windows") {
    g.window_count = 2;
    g.windows[0] = {window_kind::sliding, 4096};
    g.windows[1] = {window_kind::chunked, 8192};
  } else if (geometry_name != "full") {
    throw error("unknown geometry " + geometry_name);
  }
  const std::vector<std::int64_t> cu = cu_seqlens_of_row();
  batch_counts interval;
  measure(name, n, [&] {
    interval += count_from_cu_seqlens(cu, 0, kGrids, g);
    keep(interval);
  });
}

template <class T>
void run_scan(const std::string& name, const std::string& windows_name, long n) {
  std::vector<attention_window> windows;
  if (windows_name == "sliding" || windows_name == "sliding_chunked") windows.push_back({window_kind::sliding, 4096});
  if (windows_name == "chunked" || windows_name == "sliding_chunked") windows.push_back({window_kind::chunked, 2048});
  if (windows.empty() && windows_name != "full") throw error("unknown windows " + windows_name);
  const std::vector<T> positions = positions_of_row<T>();
  measure(name, n, [&] {
    const detail::positions_totals totals =
        detail::scan_positions(array_view<T>(positions), array_view<attention_window>(windows.data(), windows.size()));
    keep(totals);
  });
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: hot_path_instructions CASE [ITERATIONS]\n");
    return 2;
  }
  const std::string name = argv[1];
  const std::vector<std::string> parts = split(name);
  try {
    const long n = argc == 3 ? std::strtol(argv[2], nullptr, 10) : 1000;
    if (parts[0] == "on_microbatch" && parts.size() == 3) {
      run_on_microbatch(name, parts[1], parts[2], n);
    } else if (parts[0] == "count" && parts.size() == 2) {
      run_count(name, parts[1], n);
    } else if (parts[0] == "scan" && parts.size() == 3 && parts[1] == "int64") {
      run_scan<std::int64_t>(name, parts[2], n);
    } else if (parts[0] == "scan" && parts.size() == 3 && parts[1] == "int32") {
      run_scan<std::int32_t>(name, parts[2], n);
    } else {
      throw error("unknown case " + name);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hot_path_instructions: %s\n", e.what());
    return 1;
  }
  return 0;
}
