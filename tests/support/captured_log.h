// A private spdlog logger that keeps what it was given, one "<level>|<message>" line each, so a test can
// check what the plugin or a sink logged (and that a rate limit held) without touching the global registry.
#pragma once

#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace flopmeter::testing {

struct captured_log {
  std::ostringstream stream;
  std::shared_ptr<spdlog::logger> logger;

  explicit captured_log(const std::string& name = "test")
      : logger(std::make_shared<spdlog::logger>(name, std::make_shared<spdlog::sinks::ostream_sink_mt>(stream))) {
    logger->set_pattern("%l|%v");
  }

  std::string text() const { return stream.str(); }

  std::vector<std::string> lines() const {
    std::vector<std::string> out;
    std::istringstream in(stream.str());
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }
};

}  // namespace flopmeter::testing
