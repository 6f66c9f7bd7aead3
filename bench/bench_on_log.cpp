// Cost of on_log over a real 4-rank Gloo group, against a bare 1-element Gloo all-reduce measured in the same
// run (ranks are threads over a HashStore, tests/gloo_harness.h). on_log waits for the previous log's
// collective, derives and emits its metrics (to a null sink), and starts the next collective: per log, one
// all-gather of one 21-double row per rank. The target is on_log within 2x of the bare all-reduce.
#include <benchmark/benchmark.h>

#include <chrono>
#include <thread>
#include <vector>

#include "flopmeter/c10d.h"
#include "flopmeter/model_config.h"
#include "flopmeter/throughput.h"
#include "gloo_harness.h"

namespace {

using namespace flopmeter;
using clock_type = std::chrono::steady_clock;
constexpr int kWorld = 4;

class null_sink : public sink {
 protected:
  void write_(const metrics_record&) override {}
};

// Runs `iterations` of `step` on every rank; returns rank 0's mean seconds inside `step`. With a `gap`, each
// rank first sleeps that long before every step, standing in for the training work between two logs; only
// the step itself is timed.
template <class Setup>
double timed_on_ranks(std::int64_t iterations, Setup setup, std::chrono::microseconds gap = {}) {
  double seconds = 0;
  flopmeter_test::run_gloo_ranks(kWorld, [&](int rank, c10::intrusive_ptr<c10d::ProcessGroup> group) {
    auto step = setup(rank, group);
    for (int i = 0; i < 10; ++i) step();  // warm-up: connections, first allocations
    double inside = 0;
    for (std::int64_t i = 0; i < iterations; ++i) {
      if (gap.count() > 0) std::this_thread::sleep_for(gap);
      const auto start = clock_type::now();
      step();
      inside += std::chrono::duration<double>(clock_type::now() - start).count();
    }
    if (rank == 0) seconds = inside / static_cast<double>(iterations);
  });
  return seconds;
}

// range(0): iterations per rank; range(1): doubles per all-reduce.
void BM_gloo_bare_allreduce(benchmark::State& state) {
  const std::int64_t count = state.range(1);
  for (auto _ : state) {
    const double seconds = timed_on_ranks(state.range(0), [count](int, c10::intrusive_ptr<c10d::ProcessGroup> group) {
      auto tensor = at::ones({count}, at::kDouble);
      return [group, tensor]() mutable {
        std::vector<at::Tensor> tensors = {tensor};
        group->allreduce(tensors)->wait();
      };
    });
    state.SetIterationTime(seconds);
  }
}

// range(0): iterations per rank; range(1): microseconds of simulated training between logs (0 = back to back,
// where every on_log waits for the collective the previous one started: pure collective latency).
void BM_on_log_4_ranks(benchmark::State& state) {
  const model_spec spec = load_model_spec(FLOPMETER_SOURCE_DIR "/model_configs/qwen3_vl_2b.toml");
  const std::chrono::microseconds gap(state.range(1));
  for (auto _ : state) {
    const double seconds = timed_on_ranks(state.range(0), [&](int, c10::intrusive_ptr<c10d::ProcessGroup> group) {
      throughput_options o;
      o.model = spec;
      o.peak_tflops_per_gpu = 989.4;
      o.emit = emit_ranks::all;  // every rank derives and writes, the worst case
      o.sinks = {std::make_shared<null_sink>()};
      auto plugin = throughput_plugin::create(std::move(o), make_c10d_communicator(group));
      auto step_number = std::make_shared<std::int64_t>(0);
      return [plugin, step_number]() {
        static const std::vector<std::int64_t> lengths = {8192, 4096, 2048};
        microbatch_event e;
        e.document_lengths = lengths;
        plugin->on_microbatch(e);
        log_event l;
        l.step = ++*step_number;
        plugin->on_log(l);
      };
    }, gap);
    state.SetIterationTime(seconds);
  }
}

// The target compares on_log with a bare 1-element all-reduce. A second bare run with on_log's payload (4 ranks
// x 22 doubles per row, detail::kRowFields) separates Gloo's cost of the larger message from flopmeter's own host work.
BENCHMARK(BM_gloo_bare_allreduce)->Args({2000, 1})->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(3);
BENCHMARK(BM_gloo_bare_allreduce)
    ->Args({2000, kWorld * 22})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(3);
BENCHMARK(BM_on_log_4_ranks)->Args({2000, 0})->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(3);
// With 20 ms of "training" between logs the previous collective has finished when on_log runs: this is the
// hook's own cost in a real loop (derive + emit + start), what the deferral buys.
BENCHMARK(BM_on_log_4_ranks)->Args({200, 20000})->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(2);

}  // namespace

BENCHMARK_MAIN();
