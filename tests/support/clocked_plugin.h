// A throughput plugin whose records go to a capture_sink and whose clock reads `now`, a number the test sets
// before each event: every interval's length, and so every rate derived from it, is exact. A test names the
// parts with `auto& [sink, now, plugin] = run;` and drives `plugin` as a trainer would.
#pragma once

#include <memory>
#include <utility>

#include "flopmeter/communicator.h"
#include "flopmeter/throughput.h"
#include "capture_sink.h"

namespace flopmeter::testing {

struct clocked_plugin {
  std::shared_ptr<capture_sink> sink = std::make_shared<capture_sink>();
  double now = 0;  // seconds, as the plugin's clock_seconds reads them
  std::shared_ptr<throughput_plugin> plugin;

  // `options` with its sinks replaced by `sink` and its clock by `now`.
  clocked_plugin(throughput_options options, std::shared_ptr<communicator> comm) {
    options.sinks = {sink};
    options.clock_seconds = [this] { return now; };
    plugin = throughput_plugin::create(std::move(options), std::move(comm));
  }
  clocked_plugin(const clocked_plugin&) = delete;
  clocked_plugin& operator=(const clocked_plugin&) = delete;
};

}  // namespace flopmeter::testing
