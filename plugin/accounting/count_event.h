// plugin/accounting/count_event.h — internal (not installed): the counts of one micro-batch event, by the one
// rule every entry point follows (the plugin's on_microbatch, the C ABI's flopmeter_model_count): exactly one
// of document_lengths, cu_seqlens, positions, positions_int32 (none: no documents), then count_from_*.
// Thread-safety: pure.
#pragma once

#include "count/count_plan.h"
#include "flopmeter/events.h"
#include "flopmeter/flop_model.h"

namespace flopmeter::detail {

// Throws flopmeter::error naming the bad entry (flop_model.h), or that more than one format was given.
batch_counts count_event(const microbatch_event& event, const vision_geometry& geometry);
// The same through a plan made for `geometry` (count_plan_of): lengths and cu_seqlens by the plan's functions.
batch_counts count_event(const microbatch_event& event, const vision_geometry& geometry, const count_plan& plan);

}  // namespace flopmeter::detail
