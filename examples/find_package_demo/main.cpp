// flopmeter_demo — the C++ API from an installed flopmeter (find_package(flopmeter) + flopmeter::flopmeter):
// a throughput plugin over a local (one-process) communicator, a few micro-batches and logs on a
// deterministic clock, metrics to the console (through the demo's own spdlog logger, which
// find_package(flopmeter) makes available: spdlog::spdlog comes with flopmeter::flopmeter), a JSONL file and a
// callback. It checks the numbers it can derive by hand and exits non-zero when one is off.
//
//   flopmeter_demo MODEL.toml OUT.jsonl
#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "flopmeter/communicator.h"
#include "flopmeter/flop_model.h"
#include "flopmeter/model_config.h"
#include "flopmeter/sinks.h"
#include "flopmeter/throughput.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: " << argv[0] << " MODEL.toml OUT.jsonl\n";
    return 2;
  }
  try {
    double now = 0;  // seconds on the demo's clock; each step below takes exactly 1 s
    std::vector<flopmeter::metrics_record> records;
    flopmeter::throughput_options options;
    options.model = flopmeter::load_model_spec(argv[1]);
    options.peak_tflops_per_gpu = 0.5;
    options.tpi_multiplier = 2;
    options.topk = 0;
    options.clock_seconds = [&now] { return now; };
    std::remove(argv[2]);
    std::ostringstream console;
    auto logger = std::make_shared<spdlog::logger>("demo", std::make_shared<spdlog::sinks::ostream_sink_mt>(console));
    options.logger = logger;
    options.sinks = {
        flopmeter::make_console_sink(logger), flopmeter::make_jsonl_sink(argv[2]),
        flopmeter::make_callback_sink([&records](const flopmeter::metrics_record& r) { records.push_back(r); })};
    auto plugin = flopmeter::throughput_plugin::create(options, flopmeter::make_local_communicator());

    // Each micro-batch: documents of 100, 60 and 40 tokens, 56 padding tokens, one 1x4x4 image.
    const std::vector<std::int64_t> lengths = {100, 60, 40};
    const std::vector<flopmeter::image_grid> grids = {{1, 4, 4}};
    flopmeter::microbatch_event batch;
    batch.document_lengths = lengths;
    batch.padding_tokens = 56;
    batch.grid_thw = grids;
    batch.samples = 3;
    batch.loss_sum = 400.0;
    batch.label_tokens = 197;
    for (std::int64_t step = 1; step <= 3; ++step) {
      plugin->on_microbatch(batch);
      plugin->on_microbatch(batch);
      now += 1.0;
      flopmeter::log_event log;
      log.step = step;
      log.learning_rate = 1e-3;
      plugin->on_log(log);
    }
    plugin->flush();

    // By hand: 2 x 200 real tokens per 1 s step; FLOPs from the FLOP model for the same two micro-batches.
    const flopmeter::batch_counts counts = flopmeter::count_from_lengths(lengths, 56, grids, flopmeter::geometry_of(options.model));
    const double flops = 2 * flopmeter::compute_flops(plugin->flop_coefficients(), counts, options.scope).total();
    int failures = 0;
    const auto expect = [&failures](const char* what, const double* got, double want) {
      const bool ok = got != nullptr && std::fabs(*got - want) <= 1e-9 * std::fabs(want);
      std::printf("%-28s %-14s expected %.6g\n", what, got ? std::to_string(*got).c_str() : "(missing)", want);
      if (!ok) ++failures;
    };
    if (records.size() != 3) {
      std::printf("expected 3 records, got %zu\n", records.size());
      return 1;
    }
    for (const flopmeter::metrics_record& r : records) {
      std::printf("-- step %lld\n", static_cast<long long>(r.step));
      expect("perf/tokens_per_second", r.find("perf/tokens_per_second"), 400.0);
      expect("perf/tflops_per_second", r.find("perf/tflops_per_second"), flops / 1e12);
      expect("perf/mfu", r.find("perf/mfu"), flops / 1e12 / 0.5 * 100);
      expect("train/loss", r.find("train/loss"), 800.0 / 394.0);
      expect("train/batch_efficiency", r.find("train/batch_efficiency"), 400.0 / 512.0);
    }
    std::printf("-- %s\n", argv[2]);
    std::ifstream jsonl(argv[2]);
    std::string line;
    int lines = 0;
    while (std::getline(jsonl, line)) {
      std::printf("%s\n", line.c_str());
      ++lines;
    }
    if (lines != 3) {
      std::printf("expected 3 JSONL lines, got %d\n", lines);
      ++failures;
    }
    std::printf("-- console\n%s", console.str().c_str());
    if (console.str().find("step 3 | tok/s 400.0") == std::string::npos) {
      std::printf("expected the console line of step 3 in the demo's logger\n");
      ++failures;
    }
    if (failures == 0) {
      std::printf("flopmeter_demo: OK\n");
    } else {
      std::printf("flopmeter_demo: %d check(s) failed\n", failures);
    }
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "flopmeter_demo: " << e.what() << "\n";
    return 1;
  }
}
