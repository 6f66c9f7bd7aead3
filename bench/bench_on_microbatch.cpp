// Cost of the micro-batch hook: one 32768-token row of 11 documents and 8 images, as lengths, cu_seqlens and
// positions, through the throughput plugin. Also counts heap allocations made inside the timed loop (global
// operator new is replaced in this program) — the target is none, and under 1 microsecond per call.
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "flopmeter/model_config.h"
#include "flopmeter/throughput.h"

namespace {
std::atomic<std::uint64_t> g_allocations{0};
}  // namespace

void* operator new(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace {

using namespace flopmeter;

// 11 documents summing to 32768 tokens, 8 images (Qwen grids in patches, h and w even).
const std::vector<std::int64_t> kLengths = {8192, 6000, 4096, 3500, 3000, 2600, 2000, 1500, 1024, 600, 256};
const std::vector<image_grid> kGrids = {{1, 32, 32}, {1, 16, 24}, {2, 16, 16}, {1, 8, 8},
                                        {1, 24, 32}, {4, 12, 12}, {1, 10, 14}, {1, 2, 2}};

std::shared_ptr<throughput_plugin> make_plugin(const char* model = FLOPMETER_SOURCE_DIR
                                               "/model_configs/qwen3_vl_2b.toml") {
  throughput_options o;
  o.model = load_model_spec(model);
  o.peak_tflops_per_gpu = 989.4;
  return throughput_plugin::create(std::move(o), make_local_communicator());
}

void run_counters(benchmark::State& state, std::size_t documents) {
  state.counters["ns_per_document"] = benchmark::Counter(static_cast<double>(state.iterations() * documents),
                                                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void run(benchmark::State& state, const microbatch_event& event, std::size_t documents,
         std::shared_ptr<throughput_plugin> plugin = make_plugin()) {
  const std::uint64_t before = g_allocations.load();
  for (auto _ : state) plugin->on_microbatch(event);
  const std::uint64_t allocations = g_allocations.load() - before;
  state.counters["allocs_per_call"] =
      benchmark::Counter(static_cast<double>(allocations) / static_cast<double>(state.iterations()));
  run_counters(state, documents);
  if (plugin->health().bad_microbatches != 0) state.SkipWithError("the benchmark batch was rejected");
}

void BM_on_microbatch_lengths(benchmark::State& state) {
  microbatch_event e;
  e.document_lengths = kLengths;
  e.grid_thw = kGrids;
  e.samples = 11;
  run(state, e, kLengths.size());
}

void BM_on_microbatch_cu_seqlens(benchmark::State& state) {
  std::vector<std::int64_t> cu = {0};
  for (const std::int64_t l : kLengths) cu.push_back(cu.back() + l);
  microbatch_event e;
  e.cu_seqlens = cu;
  e.grid_thw = kGrids;
  run(state, e, kLengths.size());
}

// Positions are one entry per token: 32768 entries to scan, so this is the per-token cost.
void BM_on_microbatch_positions(benchmark::State& state) {
  std::vector<std::int64_t> positions;
  for (const std::int64_t l : kLengths) {
    for (std::int64_t p = 0; p < l; ++p) positions.push_back(p);
  }
  microbatch_event e;
  e.positions = positions;
  e.grid_thw = kGrids;
  run(state, e, kLengths.size());
}

// The counting step of on_microbatch with cu_seqlens (count_from_cu_seqlens and the sum into the interval)
// for a full-attention model (range(0) = 0) and a two-window one (1: sliding 4096 and chunked 8192, as a
// geometry_of would give): what windows add to the hook. Issue 30's target is on_microbatch for a two-window
// model <= 1.15x the full-attention one; (on_microbatch + this difference) / on_microbatch is that ratio.
void BM_count_cu_seqlens(benchmark::State& state) {
  std::vector<std::int64_t> cu = {0};
  for (const std::int64_t l : kLengths) cu.push_back(cu.back() + l);
  vision_geometry g;
  g.has_vision = true;
  g.spatial_merge_size = 2;
  if (state.range(0) == 1) {
    g.window_count = 2;
    g.windows[0] = {window_kind::sliding, 4096};
    g.windows[1] = {window_kind::chunked, 8192};
  }
  state.SetLabel(state.range(0) == 1 ? "two windows" : "full attention");
  batch_counts interval;
  for (auto _ : state) {
    benchmark::DoNotOptimize(cu.data());
    interval += count_from_cu_seqlens(cu, 0, kGrids, g);
    benchmark::DoNotOptimize(interval);
  }
  run_counters(state, kLengths.size());
}

// The same batch (8 image grids, one of them a 4-frame video) on Qwen3-VL-2B (range(0) = 0) and on Qwen2.5-VL-3B
// (1), whose ViT adds window pairs per grid in closed form (issue 31's target: Qwen2.5-VL <= 1.2x Qwen3-VL).
void BM_on_microbatch_vlm(benchmark::State& state) {
  std::vector<std::int64_t> cu = {0};
  for (const std::int64_t l : kLengths) cu.push_back(cu.back() + l);
  microbatch_event e;
  e.cu_seqlens = cu;
  e.grid_thw = kGrids;
  const bool qwen25 = state.range(0) == 1;
  state.SetLabel(qwen25 ? "qwen2_5_vl_3b (window blocks)" : "qwen3_vl_2b");
  run(state, e, kLengths.size(),
      make_plugin(qwen25 ? FLOPMETER_SOURCE_DIR "/model_configs/qwen2_5_vl_3b.toml"
                         : FLOPMETER_SOURCE_DIR "/model_configs/qwen3_vl_2b.toml"));
}

BENCHMARK(BM_on_microbatch_lengths);
BENCHMARK(BM_on_microbatch_cu_seqlens);
BENCHMARK(BM_on_microbatch_positions);
BENCHMARK(BM_count_cu_seqlens)->Arg(0)->Arg(1);
BENCHMARK(BM_on_microbatch_vlm)->Arg(0)->Arg(1);

}  // namespace

BENCHMARK_MAIN();
