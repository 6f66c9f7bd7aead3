// The positions scan against a plain sum over the same array: the positions path should run at memory speed.
//
// Rows of positions (the bench_on_microbatch row of 11 documents, 32,768 tokens, and the same documents
// repeated to 1,048,576 tokens) as int64 and as int32. For each, a plain sum of the entries (the floor: the
// least work that reads every entry once, compiled here with the project's own flags) and the scan with each
// kernel this CPU has (scalar reference, SSE2 baseline, AVX2 when present) plus count_from_positions, which
// dispatches to the best kernel. Counter ns_per_token; scripts/bench.sh prints the ratios to the plain sum.
// BM_positions_scan_windows: the best kernel without windows and with one or two attention windows, in one run.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "count/positions_scan.h"
#include "flopmeter/flop_model.h"

namespace {

using namespace flopmeter;
using detail::positions_kernel;

const std::vector<std::int64_t> kLengths = {8192, 6000, 4096, 3500, 3000, 2600, 2000, 1500, 1024, 600, 256};

template <class T>
std::vector<T> positions_row(std::size_t tokens) {
  std::vector<T> positions;
  positions.reserve(tokens);
  while (positions.size() < tokens) {
    for (const std::int64_t l : kLengths) {
      for (std::int64_t p = 0; p < l && positions.size() < tokens; ++p) positions.push_back(static_cast<T>(p));
    }
  }
  return positions;
}

template <class T>
__attribute__((noinline)) std::int64_t plain_sum(const T* values, std::size_t n) {
  std::int64_t sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += values[i];
  return sum;
}

void per_token(benchmark::State& state, std::size_t tokens) {
  state.counters["ns_per_token"] = benchmark::Counter(static_cast<double>(state.iterations() * tokens),
                                                      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

template <class T>
void BM_plain_sum(benchmark::State& state) {
  const auto tokens = static_cast<std::size_t>(state.range(0));
  const std::vector<T> row = positions_row<T>(tokens);
  for (auto _ : state) {
    benchmark::DoNotOptimize(row.data());
    benchmark::DoNotOptimize(plain_sum(row.data(), row.size()));
  }
  per_token(state, tokens);
}

template <class T>
void BM_positions_scan(benchmark::State& state) {
  const auto kernel = static_cast<positions_kernel>(state.range(0));
  const auto tokens = static_cast<std::size_t>(state.range(1));
  if (!detail::available(kernel)) {
    state.SkipWithError("kernel not available on this CPU");
    for (auto _ : state) {
    }
    return;
  }
  state.SetLabel(detail::name_of(kernel));
  const std::vector<T> row = positions_row<T>(tokens);
  for (auto _ : state) {
    benchmark::DoNotOptimize(row.data());
    benchmark::DoNotOptimize(detail::scan_positions(array_view<T>(row), kernel));
  }
  per_token(state, tokens);
}

template <class T>
void BM_count_from_positions(benchmark::State& state) {
  const auto tokens = static_cast<std::size_t>(state.range(0));
  const std::vector<T> row = positions_row<T>(tokens);
  for (auto _ : state) {
    benchmark::DoNotOptimize(row.data());
    benchmark::DoNotOptimize(count_from_positions(array_view<T>(row), 0, {}, vision_geometry{}));
  }
  per_token(state, tokens);
}

// The scan with 0, 1 or 2 windows (issue 30's target: one sliding window at most 1.3x the scan without), best
// kernel. Windows: sliding 4096 (Mistral's), then chunked 8192 (range(1) = 3: two sliding, 4096 and 1024; 4: chunked
// 2048 alone).
template <class T>
void BM_positions_scan_windows(benchmark::State& state) {
  const auto tokens = static_cast<std::size_t>(state.range(0));
  const auto count = static_cast<std::size_t>(state.range(1));
  const attention_window sliding_chunked[] = {{window_kind::sliding, 4096}, {window_kind::chunked, 8192}};
  const attention_window two_sliding[] = {{window_kind::sliding, 4096}, {window_kind::sliding, 1024}};
  const attention_window chunked[] = {{window_kind::chunked, 2048}};
  const array_view<attention_window> windows = count == 3   ? array_view<attention_window>(two_sliding, 2)
                                               : count == 4 ? array_view<attention_window>(chunked, 1)
                                                            : array_view<attention_window>(sliding_chunked, count);
  state.SetLabel(count == 0   ? "full"
                 : count == 1 ? "sliding"
                 : count == 2 ? "sliding+chunked"
                 : count == 3 ? "sliding+sliding"
                              : "chunked");
  const std::vector<T> row = positions_row<T>(tokens);
  for (auto _ : state) {
    benchmark::DoNotOptimize(row.data());
    benchmark::DoNotOptimize(detail::scan_positions(array_view<T>(row), windows));
  }
  per_token(state, tokens);
}

void sizes_and_windows(benchmark::internal::Benchmark* b) {
  for (const int tokens : {32768, 1 << 20}) {
    for (const int windows : {0, 1, 3, 2, 4}) b->Args({tokens, windows});
  }
}

void kernels_and_sizes(benchmark::internal::Benchmark* b) {
  for (const int kernel : {0, 1, 2}) {
    for (const int tokens : {32768, 1 << 20}) b->Args({kernel, tokens});
  }
}

BENCHMARK_TEMPLATE(BM_plain_sum, std::int64_t)->Arg(32768)->Arg(1 << 20);
BENCHMARK_TEMPLATE(BM_positions_scan, std::int64_t)->Apply(kernels_and_sizes);
BENCHMARK_TEMPLATE(BM_count_from_positions, std::int64_t)->Arg(32768)->Arg(1 << 20);
BENCHMARK_TEMPLATE(BM_plain_sum, std::int32_t)->Arg(32768)->Arg(1 << 20);
BENCHMARK_TEMPLATE(BM_positions_scan, std::int32_t)->Apply(kernels_and_sizes);
BENCHMARK_TEMPLATE(BM_count_from_positions, std::int32_t)->Arg(32768)->Arg(1 << 20);
BENCHMARK_TEMPLATE(BM_positions_scan_windows, std::int64_t)->Apply(sizes_and_windows);
BENCHMARK_TEMPLATE(BM_positions_scan_windows, std::int32_t)->Apply(sizes_and_windows);

}  // namespace

BENCHMARK_MAIN();
