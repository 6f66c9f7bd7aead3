// Cost of the per-log derivation alone (plugin/accounting/derive.h): gathered rows to one metrics record,
// top-k included, at 1,024, 16,384 and 131,072 ranks. Every rank runs the derivation at every log, so this
// is what on_log spends besides the collective. The goal: at most 1 ms at 16,384 ranks, growing linearly
// (scripts/bench.sh prints the per-rank cost and the ratio between the sizes).
//
// The rows are those of a plausible job: tp 2, every rank one micro-batch of a few documents with
// different token counts, memory, trainer-reported times and log waits, so that every top-k (tps, step time,
// TFLOP/s, MFU, memory, forward+backward, data, log wait) is computed with k = 3, the default.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "flopmeter/model_config.h"
#include "accounting/derive.h"
#include "accounting/row_layout.h"

namespace {

using namespace flopmeter;
using namespace flopmeter::detail;

std::vector<double> job_rows(std::int64_t world) {
  std::vector<double> rows(static_cast<std::size_t>(world) * kRowFields, 0.0);
  std::uint64_t state = 0x9e3779b97f4a7c15ull;  // a fixed xorshift sequence: the same rows in every run
  const auto next = [&state] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  for (std::int64_t r = 0; r < world; ++r) {
    double* x = rows.data() + static_cast<std::size_t>(r) * kRowFields;
    batch_counts n;
    n.real_tokens = 30000 + static_cast<std::int64_t>(next() % 2768);
    n.padding_tokens = 32768 - n.real_tokens;
    n.documents = 11;
    n.causal_pairs = n.real_tokens * n.real_tokens / 22;
    n.items = 8;
    n.patches = 8 * 1024;
    n.merged_tokens = 8 * 256;
    n.vision_pairs_per_frame = 8 * 1024 * 1024;
    n.vision_pairs_whole = 8 * 1024 * 1024;
    counts_to_row(n, x);
    x[row_samples_seen] = 11;
    x[row_loss_sum] = 2.5 * static_cast<double>(n.real_tokens);
    x[row_label_tokens] = static_cast<double>(n.real_tokens);
    x[row_microbatches] = 1;
    x[row_interval_seconds] = 1.0 + static_cast<double>(next() % 1000) * 1e-6;
    x[row_peak_memory_bytes] = 6e10 + static_cast<double>(next() % 1000000);
    x[row_data_seconds] = 0.01 + static_cast<double>(next() % 1000) * 1e-6;
    x[row_forward_backward_seconds] = 0.9 + static_cast<double>(next() % 1000) * 1e-6;
    x[row_present] = 5;
    x[row_step] = 50;
    x[row_log_wait_ms] = static_cast<double>(next() % 1000) * 1e-3;
  }
  return rows;
}

// range(0): ranks.
void BM_derive(benchmark::State& state) {
  const std::int64_t world = state.range(0);
  const model_spec model = load_model_spec(FLOPMETER_SOURCE_DIR "/model_configs/qwen3_vl_2b.toml");
  derive_setup setup;
  setup.flop_coefficients = compute_coefficients(model);
  setup.tp = 2;
  for (std::int64_t r = 0; r < world; r += 2) setup.dp_group.push_back(r);
  setup.peak_tflops_per_gpu = 989.4;
  setup.topk = 3;
  metrics_deriver deriver(setup);
  const std::vector<double> rows = job_rows(world);
  derive_context context;
  context.step = 50;
  std::size_t values = 0;
  for (auto _ : state) {
    derive_result result = deriver.derive(rows.data(), world, context);
    if (!result.derived) state.SkipWithError(result.why.c_str());
    values = result.record.values.size();
    benchmark::DoNotOptimize(result);
  }
  state.counters["ns_per_rank"] = benchmark::Counter(
      static_cast<double>(world), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.counters["values"] = static_cast<double>(values);
}
BENCHMARK(BM_derive)->Arg(1024)->Arg(16384)->Arg(131072)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
