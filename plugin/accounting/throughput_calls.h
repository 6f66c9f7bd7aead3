// plugin/accounting/throughput_calls.h — internal: the throughput plugin's hooks with their outcome, for the
// code inside the library that must say what became of an event: the C ABI (which returns it to its caller
// as a FLOPMETER_* code) and the tensor path (which forwards a re-entrant call to the plugin). A trainer on
// the C++ API calls the plugin's own hooks, and reads the same outcomes from health().
// Each call does exactly what the plugin's hook of that name does (throughput.h), the counting and logging
// of a refusal included; the plugin decides, so the callers keep no state of their own about it (whether the
// plugin was flushed, whether this thread is inside one of its call-outs).
// Thread-safety: as the plugin's hooks: from any thread, serialized by the plugin's lock; re-entrant calls
// from inside its call-outs are refused, not deadlocked.
#pragma once

#include <string>

#include "flopmeter/throughput.h"

namespace flopmeter::detail {

// What became of one micro-batch.
enum class microbatch_result {
  counted,      // added to the interval
  rejected,     // an invalid description: counted in health().bad_microbatches, in no metric
  after_flush,  // arrived after flush(): counted in health().events_after_flush, ignored
  reentrant,    // called from inside this plugin's own call-out: counted in health().reentrant_calls, ignored
};

// What became of one on_log or flush.
enum class hook_result {
  done,         // the log closed its interval (and started its collective, or was skipped and counted there);
                // the flush emitted the last interval (a second flush does nothing and is done too)
  after_flush,  // an on_log after flush(): counted in health().events_after_flush, ignored
  reentrant,    // called from inside this plugin's own call-out: counted in health().reentrant_calls, ignored
};

struct FLOPMETER_NO_EXPORT throughput_calls {
  // `why` (may be NULL) receives the reason when the result is `rejected` (the message the plugin logs).
  static microbatch_result record_microbatch(throughput_plugin& plugin, const microbatch_event& event,
                                             std::string* why = nullptr) noexcept;
  // A micro-batch that ran but that a layer above refused before it could be counted (the tensor path: a
  // tensor of the wrong dtype or shape, a copy that never arrived): counted, warned and returned as rejected.
  static microbatch_result record_refused_microbatch(throughput_plugin& plugin, const char* why) noexcept;
  static hook_result record_log(throughput_plugin& plugin, const log_event& event) noexcept;
  // `caller` names the call in the warning logged when it is refused as re-entrant ("flush",
  // "flopmeter_destroy").
  static hook_result record_flush(throughput_plugin& plugin, const char* caller = "flush") noexcept;
  // True when the calling thread is inside one of `plugin`'s call-outs (a sink, the logger, the clock or the
  // communicator, called while the plugin holds its lock): a hook called now would be refused.
  static bool in_callout(const throughput_plugin& plugin) noexcept;
};

}  // namespace flopmeter::detail
