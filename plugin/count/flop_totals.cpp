// plugin/count/flop_totals.cpp — the FLOPs of a micro-batch's counts (compute_flops, exact_total_flops,
// flopmeter/flop_model.h): coefficient x count per term, formed exactly in 128 bits and rounded once to double,
// or summed exactly as a decimal integer.
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "count/count_fields.h"
#include "count/exact_flops.h"
#include "arch/flop_terms.h"
#include "flopmeter/flop_model.h"

namespace flopmeter {

using detail::exact_product;
using detail::int128;
using detail::uint128;

double flop_breakdown::total() const {
  return text_dense + text_attention + vision_dense + vision_attention + patch_embed + merger + mtp;
}

namespace {

// The products of one micro-batch, term by term: compute_flops rounds each once to double, exact_total_flops
// sums them exactly. One list, so that the two can never disagree on which coefficient meets which count.
struct flop_product {
  double flop_breakdown::*term;
  std::int64_t coefficient;
  std::int64_t count;
};

// At most kMaxFlopProducts products; `out` must hold that many. Returns how many.
std::size_t flop_products(const coefficients& c, const batch_counts& n, flop_scope scope, flop_product* out) {
  std::size_t k = 0;
  // Padding tokens run through every projection and the MLP (the device computes them), so they cost dense
  // FLOPs; they belong to no document, so they add no attention pairs.
  out[k++] = {&flop_breakdown::text_dense, c.dense_per_token, n.device_tokens()};
  out[k++] = {&flop_breakdown::text_attention, c.text_attn_pair, n.causal_pairs};
  // Windowed layers: per pair under each window (0 x 0 for a model without windows).
  out[k++] = {&flop_breakdown::text_attention, c.window_attn_pair[0], n.window_pairs_0};
  out[k++] = {&flop_breakdown::text_attention, c.window_attn_pair[1], n.window_pairs_1};
  out[k++] = {&flop_breakdown::vision_dense, c.vision_per_patch, n.patches};
  if (scope == flop_scope::seed) {
    // The reference bills every ViT block over the whole item, windowed or not.
    out[k++] = {&flop_breakdown::vision_attention, c.vision_attn_pair, n.vision_pairs_whole};
    out[k++] = {&flop_breakdown::vision_attention, c.vision_window_attn_pair, n.vision_pairs_whole};
    return k;
  }
  // Gemma 3's image blocks: the pairs the bidirectional block adds to the causal ones, in the decoder's layers.
  out[k++] = {&flop_breakdown::text_attention, c.image_block_pair, n.image_block_pairs};
  // InternViT's CLS token runs through every block like a patch.
  out[k++] = {&flop_breakdown::vision_dense, c.vision_per_patch, n.vision_cls_tokens};
  out[k++] = {&flop_breakdown::vision_attention, c.vision_attn_pair, n.vision_pairs_per_frame};
  out[k++] = {&flop_breakdown::vision_attention, c.vision_window_attn_pair, n.vision_window_pairs};
  out[k++] = {&flop_breakdown::patch_embed, c.patch_embed_per_patch, n.patches};
  out[k++] = {&flop_breakdown::merger, c.merger_per_merged_token, n.merged_tokens};
  out[k++] = {&flop_breakdown::mtp, c.mtp_per_token, n.device_tokens()};
  out[k++] = {&flop_breakdown::mtp, c.mtp_attn_pair, n.causal_pairs};
  return k;
}

constexpr std::size_t kMaxFlopProducts = 16;

}  // namespace

flop_breakdown compute_flops(const coefficients& c, const batch_counts& n, flop_scope scope) {
  flop_product products[kMaxFlopProducts];
  const std::size_t count = flop_products(c, n, scope, products);
  flop_breakdown f;
  for (std::size_t i = 0; i < count; ++i)
    f.*products[i].term += exact_product(products[i].coefficient, products[i].count);
  // The re-executed forward (hardware FLOPs only): the same counts as the four terms it repeats.
  const coefficients::recompute_terms& r = c.recompute;
  f.recompute.text_dense = exact_product(r.text_per_token, n.device_tokens());
  f.recompute.text_attention = exact_product(r.text_attn_pair, n.causal_pairs) +
                               exact_product(r.window_attn_pair[0], n.window_pairs_0) +
                               exact_product(r.window_attn_pair[1], n.window_pairs_1);
  f.recompute.vision_dense = exact_product(r.vision_per_patch, n.patches);
  f.recompute.vision_attention =
      exact_product(r.vision_attn_pair, scope == flop_scope::seed ? n.vision_pairs_whole : n.vision_pairs_per_frame);
  if (scope == flop_scope::complete) {
    f.recompute.text_attention += exact_product(r.image_block_pair, n.image_block_pairs);
    f.recompute.vision_attention += exact_product(r.vision_window_attn_pair, n.vision_window_pairs);
  } else {
    f.recompute.vision_attention += exact_product(r.vision_window_attn_pair, n.vision_pairs_whole);
  }
  return f;
}

flop_breakdown compute_flops(const regime_coefficients& rc, const batch_counts& n, flop_scope scope) {
  flop_breakdown f = compute_flops(rc.with_items, n, scope);
  const coefficients& with = rc.with_items;
  const coefficients& without = rc.without_items;
  // One set for every micro-batch (every regime but a frozen decoder): exactly compute_flops(with_items, ...),
  // bit for bit (two rounded products would not always sum to the one rounded product above 2^53).
  const bool same = with.dense_per_token == without.dense_per_token && with.text_attn_pair == without.text_attn_pair &&
                    with.window_attn_pair[0] == without.window_attn_pair[0] &&
                    with.window_attn_pair[1] == without.window_attn_pair[1] &&
                    with.mtp_per_token == without.mtp_per_token && with.mtp_attn_pair == without.mtp_attn_pair &&
                    with.recompute.text_per_token == without.recompute.text_per_token &&
                    with.recompute.text_attn_pair == without.recompute.text_attn_pair &&
                    with.recompute.window_attn_pair[0] == without.recompute.window_attn_pair[0] &&
                    with.recompute.window_attn_pair[1] == without.recompute.window_attn_pair[1];
  if (same || (n.itemless_device_tokens == 0 && n.itemless_causal_pairs == 0)) return f;
  // Text terms: with_items over the tokens and pairs of micro-batches with items, without_items over the rest.
  const std::int64_t device = n.device_tokens() - n.itemless_device_tokens;
  const std::int64_t pairs = n.causal_pairs - n.itemless_causal_pairs;
  f.text_dense =
      exact_product(with.dense_per_token, device) + exact_product(without.dense_per_token, n.itemless_device_tokens);
  f.text_attention =
      exact_product(with.text_attn_pair, pairs) + exact_product(without.text_attn_pair, n.itemless_causal_pairs);
  f.recompute.text_dense = exact_product(with.recompute.text_per_token, device) +
                           exact_product(without.recompute.text_per_token, n.itemless_device_tokens);
  f.recompute.text_attention = exact_product(with.recompute.text_attn_pair, pairs) +
                               exact_product(without.recompute.text_attn_pair, n.itemless_causal_pairs);
  const std::int64_t window_pairs[] = {n.window_pairs_0, n.window_pairs_1};
  const std::int64_t itemless_window_pairs[] = {n.itemless_window_pairs_0, n.itemless_window_pairs_1};
  for (std::size_t k = 0; k < kMaxAttentionWindows; ++k) {
    f.text_attention += exact_product(with.window_attn_pair[k], window_pairs[k] - itemless_window_pairs[k]) +
                        exact_product(without.window_attn_pair[k], itemless_window_pairs[k]);
    f.recompute.text_attention +=
        exact_product(with.recompute.window_attn_pair[k], window_pairs[k] - itemless_window_pairs[k]) +
        exact_product(without.recompute.window_attn_pair[k], itemless_window_pairs[k]);
  }
  if (scope == flop_scope::complete) {
    f.text_attention += exact_product(with.image_block_pair, n.image_block_pairs);
    f.recompute.text_attention += exact_product(with.recompute.image_block_pair, n.image_block_pairs);
  }
  if (scope == flop_scope::complete) {
    f.mtp = exact_product(with.mtp_per_token, device) + exact_product(with.mtp_attn_pair, pairs) +
            exact_product(without.mtp_per_token, n.itemless_device_tokens) +
            exact_product(without.mtp_attn_pair, n.itemless_causal_pairs);
  }
  return f;
}

namespace detail {
namespace {

// The exact sum of the products of `c` and `n` into `sum`; false when it reaches 2^128.
bool add_exact_products(const coefficients& c, const batch_counts& n, flop_scope scope, uint128& sum) {
  flop_product products[kMaxFlopProducts];
  const std::size_t count = flop_products(c, n, scope, products);
  for (std::size_t i = 0; i < count; ++i) {
    // Coefficients and counts are >= 0: each product is below 2^126 and fits.
    const uint128 product =
        static_cast<uint128>(static_cast<int128>(products[i].coefficient) * static_cast<int128>(products[i].count));
    if (sum + product < sum) return false;
    sum += product;
  }
  return true;
}

// The same sum for counts that may be negative (the unit counts of model_flop_weights): small, so int128 holds it.
int128 signed_products(const coefficients& c, const batch_counts& n, flop_scope scope) {
  flop_product products[kMaxFlopProducts];
  const std::size_t count = flop_products(c, n, scope, products);
  int128 sum = 0;
  for (std::size_t i = 0; i < count; ++i) sum += static_cast<int128>(products[i].coefficient) * products[i].count;
  return sum;
}

// What compute_flops(regime) bills with each set: with_items over the counts less the itemless ones (the text
// work of the micro-batches with items), without_items over the itemless ones alone. The dense terms read
// device_tokens() only, so the split of real and padding tokens does not matter.
struct split_counts {
  batch_counts with_items;
  batch_counts without_items;
};

split_counts split_by_items(const batch_counts& n) {
  split_counts s;
  s.with_items = n;
  s.with_items.real_tokens = n.device_tokens() - n.itemless_device_tokens;
  s.with_items.padding_tokens = 0;
  s.with_items.causal_pairs = n.causal_pairs - n.itemless_causal_pairs;
  s.with_items.window_pairs_0 = n.window_pairs_0 - n.itemless_window_pairs_0;
  s.with_items.window_pairs_1 = n.window_pairs_1 - n.itemless_window_pairs_1;
  s.without_items.real_tokens = n.itemless_device_tokens;
  s.without_items.causal_pairs = n.itemless_causal_pairs;
  s.without_items.window_pairs_0 = n.itemless_window_pairs_0;
  s.without_items.window_pairs_1 = n.itemless_window_pairs_1;
  return s;
}

}  // namespace

std::optional<uint128> exact_model_flops(const regime_coefficients& rc, const batch_counts& n, flop_scope scope) {
  uint128 sum = 0;
  const bool itemless = n.itemless_device_tokens != 0 || n.itemless_causal_pairs != 0 ||
                        n.itemless_window_pairs_0 != 0 || n.itemless_window_pairs_1 != 0;
  if (!itemless) return add_exact_products(rc.with_items, n, scope, sum) ? std::optional<uint128>(sum) : std::nullopt;
  // compute_flops(regime) bills the text terms of the micro-batches without items (counts.itemless_*) with
  // without_items and everything else with with_items. FLOPs are linear in the counts, so that is the products
  // of with_items over the counts less the itemless ones, plus those of without_items over the itemless ones
  // alone.
  const split_counts split = split_by_items(n);
  if (!add_exact_products(rc.with_items, split.with_items, scope, sum) ||
      !add_exact_products(rc.without_items, split.without_items, scope, sum))
    return std::nullopt;
  return sum;
}

std::array<int128, kCountFieldCount> model_flop_weights(const regime_coefficients& rc, flop_scope scope) {
  // Every product is a coefficient times a count, and split_by_items forms each count it bills as a sum of the
  // counts with factors +1 or -1: so exact_model_flops is linear, and its value on the unit count of field f
  // (1 in f, 0 elsewhere), formed by the same split and the same products in signed arithmetic, is f's weight.
  // The itemless counts come out as without_items' coefficients less with_items' (which bill them within their
  // totals), so those weights may be negative.
  std::array<int128, kCountFieldCount> weights{};
  for_each_count_field([&](auto f) {
    batch_counts unit;
    unit.*kCountMember<decltype(f)::value> = 1;
    const split_counts split = split_by_items(unit);
    weights[f] = signed_products(rc.with_items, split.with_items, scope) +
                 signed_products(rc.without_items, split.without_items, scope);
  });
  return weights;
}

}  // namespace detail

std::string exact_total_flops(const coefficients& c, const batch_counts& n, flop_scope scope) {
  flop_product products[kMaxFlopProducts];
  const std::size_t count = flop_products(c, n, scope, products);
  // Each product of two int64 fits in int128 with a bit to spare (|a*b| < 2^126); coefficients and counts are
  // >= 0, so 16 of them sum below 2^130: the sum is kept in unsigned 128 bits plus a carry count of 2^128s (< 4).
  uint128 low = 0;
  unsigned carries = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const uint128 product =
        static_cast<uint128>(static_cast<int128>(products[i].coefficient) * static_cast<int128>(products[i].count));
    if (low + product < low) ++carries;
    low += product;
  }
  // Decimal digits of carries * 2^128 + low, by long division of the two-limb number by 10.
  std::string digits;
  do {
    // (carries * 2^128 + low) / 10: carries < 10 here, so carries * 2^128 = q * 10 + r with the division done
    // on (r * 2^128 + low) via 2^128 = 10 * 34028236692093846346337460743176821145 + 6.
    const uint128 kTwo128Div10 = (~static_cast<uint128>(0)) / 10;  // floor((2^128 - 1) / 10)
    const unsigned kTwo128Mod10 = 6;                               // 2^128 mod 10
    const uint128 high_quotient = static_cast<uint128>(carries) * kTwo128Div10;
    const unsigned high_remainder = carries * kTwo128Mod10;  // < 60
    const uint128 low_quotient = low / 10;
    const unsigned low_remainder = static_cast<unsigned>(low % 10);
    const unsigned remainder = high_remainder + low_remainder;  // < 70
    uint128 quotient = high_quotient + low_quotient + remainder / 10;
    // high_quotient + low_quotient fits: the true quotient is below 2^130 / 10 < 2^128 for carries <= 3.
    digits.push_back(static_cast<char>('0' + remainder % 10));
    carries = 0;
    low = quotient;
  } while (low != 0);
  return std::string(digits.rbegin(), digits.rend());
}

}  // namespace flopmeter
