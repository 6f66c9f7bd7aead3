// plugin/count/vision_counts.h — internal: the image grids' counts of a micro-batch, for the count_from_* functions
// (batch_counts.cpp). Not installed. Thread-safety: a pure function of its arguments.
#pragma once

#include "flopmeter/array_view.h"
#include "flopmeter/flop_model.h"

namespace flopmeter::detail {

// Adds the grids' counts to `counts`: items, patches, merged tokens, ViT pairs per frame and whole, and the vision
// extras the geometry asks for (windows, CLS tokens, image blocks); then, for a micro-batch without items, its
// itemless text counts. Throws flopmeter::error naming grid_thw[i] when a grid is invalid or a count overflows.
void add_grids(batch_counts& counts, array_view<image_grid> grids, const vision_geometry& geometry);

}  // namespace flopmeter::detail
