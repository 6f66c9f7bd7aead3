// flopmeter/tensorboard.h — a sink that writes TensorBoard event files (what Megatron users already open).
//
// Each record becomes one event at step = the record's step, with one scalar per metric tagged with the
// metric's name (perf/tokens_per_second, perf/mfu, ...), so TensorBoard draws one chart per metric. Values
// are stored as TensorBoard scalars (float32: about 7 significant digits); non-finite values (which the JSONL
// sink writes as null) are left out of that step. The plugin config's `[sinks] tensorboard = "DIR"` creates
// one with "{rank}" in DIR replaced by the rank.
//
// Ownership and threads: the sink owns its file; it is a `sink` (sinks.h), so write() locks and never throws.
// Files: DIR (created with its parents) gets a new file events.out.tfevents.<unix seconds>.<host>.<pid>.<n>
// per sink. A failed write (a full disk) drops that record, counted, and cuts off any part of it, so the file
// stays readable and the next record tries the same file again (no new file per failure). A file or directory
// removed during the run is noticed before the next record, which goes to a new file (the directory is
// recreated) after one warning: never into the deleted file. Costs records, never the run.
#pragma once

#include <memory>
#include <string>

#include "flopmeter/export.h"
#include "flopmeter/sinks.h"

namespace flopmeter FLOPMETER_EXPORT {

// Throws flopmeter::error when `directory` is empty, exists and is not a directory (a FIFO, /dev/null, a
// file), or cannot be created, or the first file cannot be
// opened, or when this build of flopmeter has no TensorBoard support (built without protobuf).
// Failures after that are logged through `logger` (the trainer's, or a private one) when the file stops
// and when it resumes.
std::shared_ptr<sink> make_tensorboard_sink(const std::string& directory,
                                            std::shared_ptr<spdlog::logger> logger = nullptr);

}  // namespace FLOPMETER_EXPORT
