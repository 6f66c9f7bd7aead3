// The counts of one micro-batch event (count_event.h).
#include "accounting/count_event.h"

#include <cstddef>

#include "flopmeter/error.h"

namespace flopmeter::detail {

namespace {

// grid_thw, or the deprecated image_grids of a caller written before 0.3 (never both).
array_view<image_grid> item_grids(const microbatch_event& event) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  const array_view<image_grid> old_name = event.image_grids;
#pragma GCC diagnostic pop
  if (old_name.empty()) return event.grid_thw;
  if (!event.grid_thw.empty()) throw error("a micro-batch gives both grid_thw and its deprecated name image_grids");
  return old_name;
}

}  // namespace

batch_counts count_event(const microbatch_event& event, const vision_geometry& geometry, const count_plan& plan) {
  const array_view<image_grid> grids = item_grids(event);
  const std::size_t formats = (event.document_lengths.empty() ? 0 : 1) + (event.cu_seqlens.empty() ? 0 : 1) +
                              (event.positions.empty() ? 0 : 1) + (event.positions_int32.empty() ? 0 : 1);
  if (formats > 1) throw error("a micro-batch gives more than one of document_lengths, cu_seqlens, positions");
  if (!event.cu_seqlens.empty()) {
    return plan.from_cu_seqlens(event.cu_seqlens, event.padding_tokens, grids, geometry);
  }
  if (!event.positions.empty()) {
    return count_from_positions(event.positions, event.padding_tokens, grids, geometry);
  }
  if (!event.positions_int32.empty()) {
    return count_from_positions(event.positions_int32, event.padding_tokens, grids, geometry);
  }
  return plan.from_lengths(event.document_lengths, event.padding_tokens, grids, geometry);
}

// The default plan is count_from_lengths and count_from_cu_seqlens themselves.
batch_counts count_event(const microbatch_event& event, const vision_geometry& geometry) {
  return count_event(event, geometry, count_plan{});
}

}  // namespace flopmeter::detail
