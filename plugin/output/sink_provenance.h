// plugin/output/sink_provenance.h — internal (not installed): what the plugin TOML loader knows about a
// [sinks] table beyond the sink_config it fills: where each path was written, and the files no sink may
// write into. Loader bookkeeping, kept out of the public sink_config; make_sinks(config, provenance, ...)
// reports a path it cannot open at its file:line:col. Thread-safety: plain data; make_sinks is reentrant.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "flopmeter/error.h"
#include "flopmeter/sinks.h"

namespace flopmeter::detail {

struct sink_provenance {
  // Where each path was written (the plugin file, the value's line and column, and the key "sinks.jsonl" /
  // "sinks.tensorboard"). Empty for a config built in code: errors then name the key alone.
  error_location jsonl_at;
  error_location tensorboard_at;
  // Files no sink may write into: the plugin file and the model config it names. make_sinks refuses a JSONL
  // path that is one of them, compared by device and inode (so a link or another spelling of the same file is
  // caught): appending records would corrupt the next run's config.
  std::vector<std::string> config_files;
};

// flopmeter::make_sinks (sinks.h), with its errors located at `provenance`'s locations and a JSONL path that
// is one of provenance.config_files refused. make_sinks(config, rank, logger) is this with no provenance.
// Throws flopmeter::error.
std::vector<std::shared_ptr<sink>> make_sinks(const sink_config& config, const sink_provenance& provenance, int rank,
                                              std::shared_ptr<spdlog::logger> logger);

}  // namespace flopmeter::detail
