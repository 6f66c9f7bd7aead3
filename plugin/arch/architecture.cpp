// plugin/arch/architecture.cpp — the layer groups of a model_spec (architecture.h): which token mixer and which
// MLP each decoder layer has, counted arithmetically over a range of layers.
//
// The layout of layer i (0-based):
//   mixer  layer_runs non-empty: the kind of the run that holds i (sliding and chunked attention take
//          text_spec's sliding_window / attention_chunk_size); else full attention when full_attention_interval
//          is 0 or (i+1) % full_attention_interval == 0 and Gated DeltaNet otherwise. Softmax attention is MLA on
//          an MLA model (kv_lora_rank > 0); with DSA (index_topk > 0) MLA attends a sliding window of index_topk keys
//          and runs the indexer unless i is in indexer_shared_layers. A mamba layer runs the Mamba-2 mixer (and so
//          does every attention layer when mamba_beside_attention: Falcon-H1); mlp_only / moe_only layers have no
//          mixer.
//   MLP    an MoE block when the model has experts, i >= first_k_dense_replace, (i+1) % decoder_sparse_step == 0
//          and i is not in mlp_only_layers; a SwiGLU of intermediate_size otherwise (a 2-matrix MLP of it when
//          plain_mlp: Apertus). block_layers (Nemotron-H): a mixer layer has no MLP, a moe_only layer is the MoE
//          block, an mlp_only layer the dense MLP.
// Counting j = i+1 over (from, to]: multiples of k number to/k - from/k, so every count below is a few
// divisions plus one pass over mlp_only_layers (which the file lists explicitly) and layer_runs.

#include "arch/architecture.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

namespace flopmeter::detail {
namespace {

// Multiples of k (>= 1) in (from, to]: the 1-based layer numbers j = i+1 of layers i in [from, to).
std::int64_t multiples(std::int64_t k, std::int64_t from, std::int64_t to) {
  if (to <= from) return 0;
  return to / k - from / k;
}

std::int64_t gcd(std::int64_t a, std::int64_t b) {
  while (b != 0) {
    const std::int64_t r = a % b;
    a = b;
    b = r;
  }
  return a;
}

// lcm(a, b) capped at `cap` + 1 (a larger period has no multiple in range anyway).
std::int64_t capped_lcm(std::int64_t a, std::int64_t b, std::int64_t cap) {
  const int128 l = static_cast<int128>(a / gcd(a, b)) * b;
  return l > cap ? cap + 1 : static_cast<std::int64_t>(l);
}

std::set<std::int64_t> forced_dense(const text_spec& t) {
  return std::set<std::int64_t>(t.mlp_only_layers.begin(), t.mlp_only_layers.end());
}

bool step_moe(const text_spec& t, std::int64_t i) {
  return t.is_moe() && t.decoder_sparse_step >= 1 && i >= t.first_k_dense_replace &&
         (i + 1) % t.decoder_sparse_step == 0;
}

// MoE layers among [from, to) whose number i+1 is a multiple of `k` (k = 1: all of them).
std::int64_t moe_among(const text_spec& t, std::int64_t k, std::int64_t from, std::int64_t to) {
  if (!t.is_moe() || t.decoder_sparse_step < 1) return 0;
  const std::int64_t lo = std::max(from, t.first_k_dense_replace);
  if (lo >= to) return 0;
  std::int64_t count = multiples(capped_lcm(k, t.decoder_sparse_step, to), lo, to);
  for (const std::int64_t e : forced_dense(t)) {
    if (e >= lo && e < to && (e + 1) % k == 0 && step_moe(t, e)) --count;
  }
  return count;
}

// Layers of one mixer kind in [from, to), with how many of them are MoE.
struct kind_count {
  layer_kind kind;
  std::int64_t layers = 0;
  std::int64_t moe = 0;
};

// Only layers whose number i+1 is a multiple of `every` (1: all of them) are counted.
std::vector<kind_count> kinds_in(const text_spec& t, std::int64_t from, std::int64_t to, std::int64_t every = 1) {
  std::vector<kind_count> out;
  const auto add = [&out](layer_kind kind, std::int64_t layers, std::int64_t moe) {
    if (layers <= 0) return;
    for (kind_count& k : out) {
      if (k.kind == kind) {
        k.layers += layers;
        k.moe += moe;
        return;
      }
    }
    out.push_back({kind, layers, moe});
  };
  if (to <= from) return out;
  if (!t.layer_runs.empty()) {
    std::int64_t start = 0;
    for (const layer_run& run : t.layer_runs) {
      const std::int64_t a = std::max(from, start), b = std::min(to, start + run.count);
      if (a < b) {
        // Nemotron-H's blocks: the moe_only layers are its MoE layers, whatever the step rule says.
        const std::int64_t n = multiples(every, a, b);
        add(run.kind, n, t.block_layers ? (run.kind == layer_kind::moe_only ? n : 0) : moe_among(t, every, a, b));
      }
      start += run.count;
      if (start >= to) break;
    }
    return out;
  }
  if (t.full_attention_interval <= 0) {
    add(layer_kind::full_attention, multiples(every, from, to), moe_among(t, every, from, to));
    return out;
  }
  const std::int64_t k = capped_lcm(t.full_attention_interval, every, to);
  const std::int64_t full = multiples(k, from, to);
  const std::int64_t full_moe = moe_among(t, k, from, to);
  // Layer `from` decides which kind is used first.
  const bool first_full = (from + 1) % t.full_attention_interval == 0;
  const std::int64_t linear = multiples(every, from, to) - full, linear_moe = moe_among(t, every, from, to) - full_moe;
  if (first_full) add(layer_kind::full_attention, full, full_moe);
  add(layer_kind::linear_attention, linear, linear_moe);
  if (!first_full) add(layer_kind::full_attention, full, full_moe);
  return out;
}

factor f(std::int64_t value, const char* field) { return {value, field}; }

mamba_mixer mamba_of(const text_spec& t) {
  return {f(t.mamba_num_heads, "text.mamba_num_heads"), f(t.mamba_head_dim, "text.mamba_head_dim"),
          f(t.mamba_n_groups, "text.mamba_n_groups"), f(t.mamba_state_size, "text.mamba_state_size"),
          f(t.mamba_conv_kernel, "text.mamba_conv_kernel")};
}

token_mixer mixer_of(const model_spec& spec, layer_kind kind) {
  const text_spec& t = spec.text;
  token_mixer m;
  if (kind == layer_kind::mamba) {
    m.kind = mixer_kind::mamba;
    m.mamba = mamba_of(t);
    return m;
  }
  if (kind == layer_kind::short_conv) {
    m.kind = mixer_kind::short_conv;
    m.short_conv_kernel = f(t.short_conv_kernel, "text.short_conv_kernel");
    return m;
  }
  if (kind == layer_kind::mlp_only || kind == layer_kind::moe_only) {
    m.kind = mixer_kind::none;
    return m;
  }
  if (kind == layer_kind::linear_attention) {
    m.kind = mixer_kind::gated_deltanet;
    m.deltanet = {f(t.linear_num_key_heads, "text.linear_num_key_heads"),
                  f(t.linear_num_value_heads, "text.linear_num_value_heads"),
                  f(t.linear_key_head_dim, "text.linear_key_head_dim"),
                  f(t.linear_value_head_dim, "text.linear_value_head_dim"),
                  f(t.linear_conv_kernel_dim, "text.linear_conv_kernel_dim")};
    return m;
  }
  if (t.is_mla()) {
    m.kind = mixer_kind::mla;
    m.mla = {f(t.num_attention_heads, "text.num_attention_heads"),
             f(t.q_lora_rank, "text.q_lora_rank"),
             f(t.kv_lora_rank, "text.kv_lora_rank"),
             f(t.qk_nope_head_dim, "text.qk_nope_head_dim"),
             f(t.qk_rope_head_dim, "text.qk_rope_head_dim"),
             f(t.v_head_dim, "text.v_head_dim")};
    if (t.has_indexer()) {
      m.mla.window_size = t.index_topk;
      m.mla.indexer = true;
      m.mla.index_heads = f(t.index_n_heads, "text.index_n_heads");
      m.mla.index_head_dim = f(t.index_head_dim, "text.index_head_dim");
    }
    return m;
  }
  m.kind = mixer_kind::attention;
  if (t.mamba_beside_attention) {
    m.with_mamba = true;
    m.mamba = mamba_of(t);
  }
  attention_mixer& a = m.attention;
  a.heads = f(t.num_attention_heads, "text.num_attention_heads");
  a.kv_heads = f(t.num_key_value_heads, "text.num_key_value_heads");
  a.qk_head_dim = f(t.head_dim, "text.head_dim");
  a.v_head_dim = f(t.head_dim, "text.head_dim");
  a.output_gate = t.attn_output_gate;
  if (kind == layer_kind::sliding_attention) {
    a.window = window_kind::sliding;
    a.window_size = t.sliding_window;
  } else if (kind == layer_kind::chunked_attention) {
    a.window = window_kind::chunked;
    a.window_size = t.attention_chunk_size;
  }
  return m;
}

mlp_block mlp_of(const text_spec& t, bool moe, layer_kind kind) {
  mlp_block b;
  // Nemotron-H's mixer blocks carry no MLP.
  if (t.block_layers && kind != layer_kind::mlp_only && kind != layer_kind::moe_only) {
    b.kind = mlp_kind::none;
    return b;
  }
  if (!moe) {
    b.kind = t.plain_mlp ? mlp_kind::plain : mlp_kind::gated;
    b.width = f(t.intermediate_size, "text.intermediate_size");
    return b;
  }
  b.kind = mlp_kind::moe;
  b.plain_experts = t.plain_mlp;
  b.experts = f(t.num_experts, "text.num_experts");
  b.top_k = f(t.num_experts_per_tok, "text.num_experts_per_tok");
  b.expert_width = f(t.moe_intermediate_size, "text.moe_intermediate_size");
  if (t.shared_expert_intermediate_size > 0) {
    b.shared_width = product({{t.shared_expert_intermediate_size, "text.shared_expert_intermediate_size"}});
    b.shared_gate = !t.shared_expert_ungated;
  } else if (t.n_shared_experts > 0) {
    b.shared_width = product(
        {{t.n_shared_experts, "text.n_shared_experts"}, {t.moe_intermediate_size, "text.moe_intermediate_size"}});
  }
  return b;
}

}  // namespace

std::int64_t count_layers_of_kind(const text_spec& t, layer_kind kind, std::int64_t from, std::int64_t to) {
  std::int64_t n = 0;
  for (const kind_count& k : kinds_in(t, from, to)) {
    if (k.kind == kind) n += k.layers;
  }
  return n;
}

std::int64_t count_moe_layers(const text_spec& t, std::int64_t from, std::int64_t to) {
  if (t.block_layers) return count_layers_of_kind(t, layer_kind::moe_only, from, std::min(to, t.num_hidden_layers));
  return moe_among(t, 1, from, std::min(to, t.num_hidden_layers));
}

bool is_moe_layer(const text_spec& t, std::int64_t index) { return count_moe_layers(t, index, index + 1) == 1; }

std::int64_t first_attention_layer(const text_spec& t) {
  if (!t.layer_runs.empty()) {
    std::int64_t start = 0;
    for (const layer_run& run : t.layer_runs) {
      if (run.kind == layer_kind::full_attention || run.kind == layer_kind::sliding_attention ||
          run.kind == layer_kind::chunked_attention) {
        return start;
      }
      start += run.count;
    }
    return t.num_hidden_layers;
  }
  if (t.full_attention_interval <= 0) return 0;
  return t.full_attention_interval <= t.num_hidden_layers ? t.full_attention_interval - 1 : t.num_hidden_layers;
}

std::int64_t count_indexer_layers(const text_spec& t, std::int64_t from, std::int64_t to) {
  if (!t.has_indexer() || !t.is_mla()) return 0;
  from = std::max<std::int64_t>(from, 0);
  to = std::min(to, t.num_hidden_layers);
  if (to <= from) return 0;
  std::int64_t n = to - from;
  for (const std::int64_t e : std::set<std::int64_t>(t.indexer_shared_layers.begin(), t.indexer_shared_layers.end())) {
    if (e >= from && e < to) --n;
  }
  return n;
}

// The groups are per mixer kind and MLP; on a DSA model the layers that reuse indices (indexer_shared_layers, a
// listed exception like mlp_only_layers) move from their group into one without the indexer.
std::vector<layer_group> layer_groups(const model_spec& spec, std::int64_t from, std::int64_t to, std::int64_t every) {
  std::vector<layer_group> groups;
  for (const kind_count& k : kinds_in(spec.text, from, to, every)) {
    const token_mixer mixer = mixer_of(spec, k.kind);
    if (k.layers - k.moe > 0) groups.push_back({k.layers - k.moe, mixer, mlp_of(spec.text, false, k.kind)});
    if (k.moe > 0) groups.push_back({k.moe, mixer, mlp_of(spec.text, true, k.kind)});
  }
  const text_spec& t = spec.text;
  if (!t.has_indexer() || !t.is_mla() || t.indexer_shared_layers.empty()) return groups;
  std::int64_t shared[2] = {0, 0};  // dense MLP, MoE
  for (const std::int64_t e : std::set<std::int64_t>(t.indexer_shared_layers.begin(), t.indexer_shared_layers.end())) {
    if (e >= from && e < to && (e + 1) % every == 0) ++shared[is_moe_layer(t, e) ? 1 : 0];
  }
  std::vector<layer_group> out;
  for (layer_group g : groups) {
    const std::int64_t moved = g.mixer.kind == mixer_kind::mla ? shared[g.mlp.kind == mlp_kind::moe ? 1 : 0] : 0;
    g.count -= moved;
    if (g.count > 0) out.push_back(g);
    if (moved > 0) {
      g.count = moved;
      g.mixer.mla.indexer = false;
      out.push_back(g);
    }
  }
  return out;
}

layer_group layer_at(const model_spec& spec, std::int64_t index) {
  const layer_kind kind = spec.text.layer_type(index);
  layer_group g{1, mixer_of(spec, kind), mlp_of(spec.text, is_moe_layer(spec.text, index), kind)};
  if (g.mixer.kind == mixer_kind::mla) g.mixer.mla.indexer = count_indexer_layers(spec.text, index, index + 1) == 1;
  return g;
}

// MTP layers attend fully (dense MLA on a DSA model: transformers does not build them; flopmeter bills their
// attention per causal pair, like every MTP layer).
layer_group mtp_group(const model_spec& spec) {
  layer_group g{spec.text.mtp_num_hidden_layers, mixer_of(spec, layer_kind::full_attention),
                mlp_of(spec.text, spec.text.is_moe(), layer_kind::mlp_only)};
  g.mixer.mla.window_size = 0;
  g.mixer.mla.indexer = false;
  return g;
}

std::vector<attention_window> attention_windows(const model_spec& spec) {
  std::vector<attention_window> out;
  const text_spec& t = spec.text;
  if (t.is_mla()) {
    if (t.has_indexer()) out.push_back({window_kind::sliding, t.index_topk});  // the top-k keys
    return out;
  }
  for (const layer_run& run : t.layer_runs) {
    attention_window w;
    if (run.kind == layer_kind::sliding_attention) {
      w = {window_kind::sliding, t.sliding_window};
    } else if (run.kind == layer_kind::chunked_attention) {
      w = {window_kind::chunked, t.attention_chunk_size};
    } else {
      continue;
    }
    const bool seen = std::any_of(out.begin(), out.end(),
                                  [&w](const attention_window& o) { return o.kind == w.kind && o.size == w.size; });
    if (!seen) out.push_back(w);
  }
  return out;
}

int window_index(const model_spec& spec, const attention_mixer& mixer) {
  if (mixer.window_size == 0) return -1;
  const std::vector<attention_window> windows = attention_windows(spec);
  for (std::size_t i = 0; i < windows.size(); ++i) {
    if (windows[i].kind == mixer.window && windows[i].size == mixer.window_size) return static_cast<int>(i);
  }
  return -1;
}

int window_index(const model_spec& spec, const mla_mixer& mixer) {
  if (mixer.window_size == 0) return -1;
  attention_mixer as_window;
  as_window.window = window_kind::sliding;
  as_window.window_size = mixer.window_size;
  return window_index(spec, as_window);
}

// The vision tower (architecture.h). Sizes per patch (merged token) of one block (projector):
//   patch embedding  a Conv3d/Conv2d with stride = kernel: in_channels * temporal_patch_size * patch_size^2 -> hv
//   blocks           qkv hv -> 3hv, proj hv -> hv; MLP plain (fc1 hv -> I, fc2 I -> hv) or gated (gate, up hv -> I,
//                    down I -> hv); the attention core 2*hv per (query, key) pair. Blocks listed in
//                    fullatt_block_indexes attend per segment, the others inside windows (when window_size > 0).
//   projector        patch_merger: m^2 hv -> m^2 hv, m^2 hv -> out (x num_mergers with DeepStack);
//                    pixel_shuffle_mlp: m^2 hv -> out, out -> out; avgpool_linear: hv -> out.
vision_tower vision_tower_of(const vision_spec& v) {
  vision_tower t;
  t.width = f(v.hidden_size, "vision.hidden_size");
  t.mlp_width = f(v.intermediate_size, "vision.intermediate_size");
  t.mlp = v.mlp;
  t.patch_inputs = product({{v.in_channels, "vision.in_channels"},
                            {v.temporal_patch_size, "vision.temporal_patch_size"},
                            {v.patch_size, "vision.patch_size"},
                            {v.patch_size, "vision.patch_size"}});
  const std::int64_t windowed = v.num_window_blocks();
  if (v.depth - windowed > 0) t.groups.push_back({v.depth - windowed, vision_attention_kind::per_segment});
  if (windowed > 0) t.groups.push_back({windowed, vision_attention_kind::windowed});
  const term merged = product({{v.spatial_merge_size, "vision.spatial_merge_size"},
                               {v.spatial_merge_size, "vision.spatial_merge_size"},
                               {v.hidden_size, "vision.hidden_size"}});
  const term out = product({{v.out_hidden_size, "vision.out_hidden_size"}});
  switch (v.projector) {
    case vision_projector_kind::patch_merger:
      t.projector = {{"merger_fc1", merged, merged}, {"merger_fc2", merged, out}};
      t.projectors = f(v.num_mergers(), "vision.deepstack_visual_indexes");
      break;
    case vision_projector_kind::pixel_shuffle_mlp:
      t.projector = {{"linear_1", merged, out}, {"linear_2", out, out}};
      break;
    case vision_projector_kind::avgpool_linear:
      t.projector = {{"mm_input_projection", product({{v.hidden_size, "vision.hidden_size"}}), out}};
      break;
  }
  return t;
}

}  // namespace flopmeter::detail
