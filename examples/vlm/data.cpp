// Synthetic packed rows; see data.h for the layout and the learnable pattern.
#include "data.h"

#include <algorithm>
#include <random>
#include <stdexcept>
#include <string>

namespace vlm {
namespace {

// SplitMix64: decorrelates the (seed, rank, step, microbatch) tuple into one generator seed.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::int64_t uniform(std::mt19937_64& rng, std::int64_t lo, std::int64_t hi) {
  return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
}

void check(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("vlm::make_row: " + what);
}

}  // namespace

std::int64_t packed_row::real_tokens() const {
  std::int64_t n = 0;
  for (const std::int64_t l : document_lengths) n += l;
  return n;
}

std::int64_t packed_row::label_tokens() const {
  return static_cast<std::int64_t>(
      std::count_if(labels.begin(), labels.end(), [](std::int64_t l) { return l != kIgnoreLabel; }));
}

std::int64_t packed_row::patches() const {
  std::int64_t n = 0;
  for (const image_item& image : images) n += image.patches();
  return n;
}

std::int64_t packed_row::merged_tokens() const {
  return static_cast<std::int64_t>(
      std::count(input_ids.begin(), input_ids.end(), image_token_id));
}

const std::vector<image_item>& image_grid_menu() {
  static const std::vector<image_item> menu = {
      {1, 4, 4, 0, 0}, {1, 4, 8, 0, 0}, {2, 4, 4, 0, 0}, {1, 8, 8, 0, 0}};
  return menu;
}

packed_row make_row(const data_options& o, const flopmeter::model_spec& spec, std::int64_t rank,
                    std::int64_t step, std::int64_t microbatch) {
  const std::int64_t vocab = spec.text.vocab_size;
  check(o.pattern_vocab >= 1 && o.pattern_vocab < vocab - 1,
        "pattern_vocab must be in [1, vocab_size - 1) = [1, " + std::to_string(vocab - 1) + ")");
  check(o.min_document_length >= 2 && o.max_document_length >= o.min_document_length,
        "document lengths must satisfy 2 <= min <= max");
  check(o.min_padding_tokens >= 0 && o.max_padding_tokens >= o.min_padding_tokens, "bad padding range");
  check(o.row_length >= o.max_padding_tokens + o.min_document_length,
        "row_length must hold max_padding_tokens + min_document_length");

  std::mt19937_64 rng(mix(mix(mix(mix(o.seed) ^ static_cast<std::uint64_t>(rank)) ^ static_cast<std::uint64_t>(step)) ^
                          static_cast<std::uint64_t>(microbatch)));
  packed_row row;
  row.image_token_id = vocab - 1;
  row.input_ids.assign(static_cast<std::size_t>(o.row_length), 0);
  row.labels.assign(static_cast<std::size_t>(o.row_length), kIgnoreLabel);

  // Documents fill row_length - padding; a remainder too short for a document joins the last one.
  row.padding_tokens = uniform(rng, o.min_padding_tokens, o.max_padding_tokens);
  std::int64_t available = o.row_length - row.padding_tokens;
  while (available > 0) {
    std::int64_t length = std::min(uniform(rng, o.min_document_length, o.max_document_length), available);
    if (available - length < o.min_document_length) length = available;
    row.document_lengths.push_back(length);
    available -= length;
  }

  const std::int64_t merge = spec.vision ? spec.vision->spatial_merge_size : 1;
  std::int64_t start = 0;
  for (std::size_t d = 0; d < row.document_lengths.size(); ++d) {
    const std::int64_t length = row.document_lengths[d];
    const std::int64_t x0 = uniform(rng, 0, o.pattern_vocab - 1);
    const std::int64_t stride = uniform(rng, 1, 3);
    for (std::int64_t p = 0; p < length; ++p) {
      row.input_ids[static_cast<std::size_t>(start + p)] = (x0 + stride * p) % o.pattern_vocab;
    }
    // At most one image per document, with at least one text token on each side of its run.
    const bool wants_image = std::bernoulli_distribution(o.image_probability)(rng);
    if (spec.vision && wants_image) {
      std::vector<image_item> fits;
      for (const image_item& g : o.image_grids.empty() ? image_grid_menu() : o.image_grids) {
        check(g.h % merge == 0 && g.w % merge == 0, "an image grid is not divisible by spatial_merge_size");
        if (g.patches() / (merge * merge) <= length - 2) fits.push_back(g);
      }
      if (!fits.empty()) {
        image_item image = fits[static_cast<std::size_t>(uniform(rng, 0, static_cast<std::int64_t>(fits.size()) - 1))];
        const std::int64_t merged = image.patches() / (merge * merge);
        image.first_token = start + uniform(rng, 1, length - 1 - merged);
        image.document = static_cast<std::int64_t>(d);
        for (std::int64_t i = 0; i < merged; ++i) {
          row.input_ids[static_cast<std::size_t>(image.first_token + i)] = row.image_token_id;
        }
        row.images.push_back(image);
      }
    }
    // Next-token labels inside the document only; never a placeholder as target.
    for (std::int64_t p = 0; p + 1 < length; ++p) {
      const std::int64_t target = row.input_ids[static_cast<std::size_t>(start + p + 1)];
      if (target != row.image_token_id) row.labels[static_cast<std::size_t>(start + p)] = target;
    }
    start += length;
  }

  if (spec.vision) {
    const std::int64_t width = spec.vision->patch_input_size();
    row.pixel_patches.resize(static_cast<std::size_t>(row.patches() * width));
    std::normal_distribution<float> pixel(0.0F, 1.0F);
    for (float& v : row.pixel_patches) v = pixel(rng);
  }
  return row;
}

}  // namespace vlm
