// examples/vlm/data.h — synthetic varlen-packed rows for the example VLM trainer (no LibTorch here).
//
// A row is what one micro-batch holds: `row_length` token slots, filled left to right by several documents
// of random length, then padding at the end. Some documents carry one image (or video) each: its merged
// vision tokens (t*h*w / spatial_merge_size^2 placeholder tokens) replace a run of the document's tokens.
// The text is learnable on purpose: document d starts at a random token x0 in [0, pattern_vocab) and
// continues with a fixed stride s in {1, 2, 3}, token(p) = (x0 + s*p) mod pattern_vocab, p counting every
// position of the document (image positions included, so the text resumes the progression after an image).
// Labels are the next token of the same document; no label crosses a document boundary, points at an image
// placeholder, or sits on padding (kIgnoreLabel there).
//
// Everything is deterministic: a row depends only on (seed, rank, step, microbatch), never on the order in
// which rows are generated. Ownership: rows are plain values. Thread-safety: `make_row` is pure.
#pragma once

#include <cstdint>
#include <vector>

#include "flopmeter/model_spec.h"

namespace vlm {

inline constexpr std::int64_t kIgnoreLabel = -100;

// One image or video in patches: t temporal patches of an h x w patch grid (Qwen's grid_thw).
struct image_item {
  std::int64_t t = 1, h = 4, w = 4;
  std::int64_t first_token = 0;  // row position of its first merged token; its run is contiguous
  std::int64_t document = 0;     // index of the document that holds it
  std::int64_t patches() const { return t * h * w; }
};

struct data_options {
  std::int64_t row_length = 256;           // token slots per row (= per micro-batch)
  std::int64_t min_document_length = 16;   // tokens; the last document may be shorter to fill the row
  std::int64_t max_document_length = 96;
  std::int64_t min_padding_tokens = 1;     // padding at the end of every row, drawn uniformly in [min, max]
  std::int64_t max_padding_tokens = 24;
  double image_probability = 0.5;          // chance that a document (long enough) carries one image
  std::int64_t pattern_vocab = 64;         // text tokens are in [0, pattern_vocab); must be < vocab_size - 1
  std::vector<image_item> image_grids;     // the grids images are drawn from; empty: image_grid_menu()
  std::uint64_t seed = 1234;
};

struct packed_row {
  std::vector<std::int64_t> input_ids;         // row_length; image placeholders = image_token_id, padding = 0
  std::vector<std::int64_t> labels;            // row_length; kIgnoreLabel where there is no label
  std::vector<std::int64_t> document_lengths;  // the documents in row order; their sum + padding = row_length
  std::int64_t padding_tokens = 0;
  std::vector<image_item> images;              // in row order
  // Pixel values of every patch of every image, image after image, patch-major: patches x patch_input_size
  // floats. Within each temporal patch the patches are in merge-block order (each consecutive
  // spatial_merge_size^2 patches form one merge block), as Qwen's image processor lays them out.
  std::vector<float> pixel_patches;
  std::int64_t image_token_id = 0;

  std::int64_t real_tokens() const;    // sum of document_lengths
  std::int64_t label_tokens() const;   // labels that are not kIgnoreLabel
  std::int64_t patches() const;        // sum over images of t*h*w
  std::int64_t merged_tokens() const;  // placeholders in the row
};

// The grids images are drawn from (h, w multiples of spatial_merge_size = 2): 1x4x4, 1x4x8, 2x4x4, 1x8x8.
const std::vector<image_item>& image_grid_menu();

// Builds the row for (rank, step, microbatch). Throws std::invalid_argument for options the spec cannot
// hold (pattern_vocab >= vocab_size - 1, row shorter than a document, an image grid the merge size does not
// divide, ...).
packed_row make_row(const data_options& options, const flopmeter::model_spec& spec, std::int64_t rank,
                    std::int64_t step, std::int64_t microbatch);

}  // namespace vlm
