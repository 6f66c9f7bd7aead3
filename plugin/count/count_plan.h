// plugin/count/count_plan.h — internal (not installed): the count functions of one geometry, chosen once.
//
// count_from_lengths and count_from_cu_seqlens check the geometry's windows and pick the loop for their kinds on
// every call. A plan does both once, when a model is built (the throughput plugin makes one in its
// constructor), and then points at the loop compiled for those windows: a micro-batch of a model with windows
// pays an indirect call, not the check and the dispatch. Counts and errors are those of count_from_*.
// Thread-safety: an immutable value; the functions are pure.
#pragma once

#include <cstdint>

#include "flopmeter/array_view.h"
#include "flopmeter/flop_model.h"

namespace flopmeter::detail {

struct count_plan {
  using count_function = batch_counts (*)(array_view<std::int64_t> documents, std::int64_t padding_tokens,
                                          array_view<image_grid> grids, const vision_geometry& geometry);
  count_function from_lengths = count_from_lengths;        // what count_from_lengths does for this geometry
  count_function from_cu_seqlens = count_from_cu_seqlens;  // likewise count_from_cu_seqlens
};

// The plan for `geometry` (which the plan's functions must then be given). Throws flopmeter::error for windows
// the count functions refuse (size < 1, an unknown kind, more than kMaxAttentionWindows).
count_plan count_plan_of(const vision_geometry& geometry);

}  // namespace flopmeter::detail
