// plugin/count/count_fields.h — internal: the one table of batch_counts' fields (flopmeter/flop_model.h). Every
// place that goes through the counts field by field reads it: their sums and comparison (batch_counts.cpp), the
// per-log row (accounting/row_layout.h, whose count entries are the table's indexes), `flopmeter estimate`'s
// counts (tools/cli_estimate.cpp), the C ABI's flopmeter_counts (abi/c_api_model.cpp, checked against the table
// at compile time) and, through flopmeter_count_field, the Python package's counts (python/flopmeter/_native.py).
// Not installed. Thread-safety: an immutable table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string_view>
#include <type_traits>
#include <utility>

#include "flopmeter/flop_model.h"

namespace flopmeter::detail {

struct count_field {
  std::string_view name;               // as reports name it ("real_tokens")
  std::int64_t batch_counts::*member;  // the field
  const char* overflow_name;           // what a sum that overflows says: "<overflow_name> overflows a 64-bit count"
};

// batch_counts' fields in declaration order. The first kReportedCountFields are the counts reports show (those of
// `flopmeter estimate` and the C ABI's flopmeter_counts, whose struct_size says how many a caller has); the four
// itemless_* split the text counts by micro-batches without images (regime_coefficients) and travel in the
// per-log row only. The window counts sit right after the nine counts of flopmeter_counts' version 1, so that
// the C struct grew by appending; the three vision counts of 0.3 follow them.
inline constexpr count_field kCountFields[] = {
    {"real_tokens", &batch_counts::real_tokens, "real token count"},
    {"padding_tokens", &batch_counts::padding_tokens, "padding token count"},
    {"documents", &batch_counts::documents, "document count"},
    {"causal_pairs", &batch_counts::causal_pairs, "causal pair count"},
    {"items", &batch_counts::items, "image count"},
    {"patches", &batch_counts::patches, "patch count"},
    {"merged_tokens", &batch_counts::merged_tokens, "merged token count"},
    {"vision_pairs_per_frame", &batch_counts::vision_pairs_per_frame, "vision pair count"},
    {"vision_pairs_whole", &batch_counts::vision_pairs_whole, "vision pair count"},
    {"window_pairs_0", &batch_counts::window_pairs_0, "window pair count"},
    {"window_pairs_1", &batch_counts::window_pairs_1, "window pair count"},
    {"vision_window_pairs", &batch_counts::vision_window_pairs, "vision window pair count"},
    {"vision_cls_tokens", &batch_counts::vision_cls_tokens, "CLS token count"},
    {"image_block_pairs", &batch_counts::image_block_pairs, "image block pair count"},
    {"itemless_device_tokens", &batch_counts::itemless_device_tokens, "device token count"},
    {"itemless_causal_pairs", &batch_counts::itemless_causal_pairs, "causal pair count"},
    {"itemless_window_pairs_0", &batch_counts::itemless_window_pairs_0, "window pair count"},
    {"itemless_window_pairs_1", &batch_counts::itemless_window_pairs_1, "window pair count"},
};
inline constexpr std::size_t kCountFieldCount = std::size(kCountFields);
inline constexpr std::size_t kReportedCountFields = 14;

// Window k's pair count and its itemless part, k < kMaxAttentionWindows (vision_geometry::windows[k]).
inline constexpr std::int64_t batch_counts::*kWindowPairs[] = {&batch_counts::window_pairs_0,
                                                               &batch_counts::window_pairs_1};
inline constexpr std::int64_t batch_counts::*kItemlessWindowPairs[] = {&batch_counts::itemless_window_pairs_0,
                                                                       &batch_counts::itemless_window_pairs_1};
static_assert(std::size(kWindowPairs) == kMaxAttentionWindows &&
                  std::size(kItemlessWindowPairs) == kMaxAttentionWindows,
              "one window_pairs_k and itemless_window_pairs_k per window");

// A field added to batch_counts and not to the table fails here.
static_assert(sizeof(batch_counts) == kCountFieldCount * sizeof(std::int64_t),
              "every batch_counts field has an entry in kCountFields");

// The table's members as compile-time constants, and a loop over them unrolled at compile time: the hot paths
// (batch_counts::operator+=, a row's counts per rank in derive) then read fixed offsets. A run-time loop over
// kCountFields costs a load of each member offset: measured 4x for operator+= and +14% for derive at 131,072
// ranks.
template <std::size_t I>
inline constexpr std::int64_t batch_counts::*kCountMember = kCountFields[I].member;

// Calls f(std::integral_constant<std::size_t, I>{}) for I = 0 .. kCountFieldCount - 1.
template <class F, std::size_t... I>
constexpr void for_each_count_field(F&& f, std::index_sequence<I...>) {
  (f(std::integral_constant<std::size_t, I>{}), ...);
}
template <class F>
constexpr void for_each_count_field(F&& f) {
  for_each_count_field(f, std::make_index_sequence<kCountFieldCount>{});
}

// Whether f(std::integral_constant<std::size_t, I>{}) is true for some I, trying I = 0, 1, ... and stopping at the
// first true (a || fold): the hot path's overflow checks branch once per field and skip the rest, where an |=
// fold evaluates every check (measured +37 instructions per operator+= under callgrind).
template <class F, std::size_t... I>
constexpr bool any_count_field(F&& f, std::index_sequence<I...>) {
  return (f(std::integral_constant<std::size_t, I>{}) || ...);
}
template <class F>
constexpr bool any_count_field(F&& f) {
  return any_count_field(f, std::make_index_sequence<kCountFieldCount>{});
}

// The index of `member` in kCountFields; kCountFieldCount for a member the table lacks.
constexpr std::size_t count_field_index(std::int64_t batch_counts::*member) {
  for (std::size_t i = 0; i < kCountFieldCount; ++i) {
    if (kCountFields[i].member == member) return i;
  }
  return kCountFieldCount;
}

}  // namespace flopmeter::detail
