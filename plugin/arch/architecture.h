// plugin/arch/architecture.h — internal: the architecture a model_spec describes, as the FLOP model walks it.
//
// A decoder is a list of layer groups. A group is every decoder layer with one token mixer and one MLP:
//   token mixer  softmax attention (heads, kv heads, qk_head_dim, v_head_dim, output gate, attention window:
//                none, sliding w or chunked c), MLA (q_lora_rank or none, kv_lora_rank, qk_nope_head_dim,
//                qk_rope_head_dim, v_head_dim; with DSA a sliding window of index_topk and whether the layer runs
//                the indexer), Gated DeltaNet (key/value heads and head dims, conv kernel), Mamba-2 (heads, head
//                dim, groups, state, conv kernel; Falcon-H1 runs it beside attention), LFM2's gated short
//                convolution (its kernel) or none (Nemotron-H's
//                MLP-only blocks)
//   MLP          a gated (SwiGLU) or plain (up, down: text_spec::plain_mlp) MLP of a width, or an MoE block (experts,
//                top-k, expert width, shared expert width, whether a sigmoid gate scales the shared expert, 2-matrix
//                experts), or none (Nemotron-H's mixer-only blocks)
// and its layer count. Groups are counted, never enumerated: a group's cost does not grow with its layer
// count, and a range of layers [from, to) splits into at most a few groups whatever its length (arithmetic over
// the spec's periodic layouts, run-length layer_runs and the listed exceptions). The LM head (hidden -> vocab)
// follows the last group; MTP layers are one more group of full softmax attention (the mixer of the model with
// no window; MLA on an MLA model) and the model's MLP (an MoE block on an MoE model), each with its own eh_proj
// 2h -> h and LM head. Embedding lookups are not GEMMs.
//
// A vision tower is a description of the same kind (vision_tower_of): the patch embedding, block groups that differ
// only in how they attend (per segment, or inside Qwen2.5-VL's windows), the block's MLP (plain or gated), an
// optional CLS token per segment, and the projector's GEMMs per merged token (Qwen's patch merger and DeepStack
// mergers, InternVL's pixel-shuffle MLP, Gemma 3's pooled projection).
//
// Every size carries the model_spec field it comes from (a `factor`), so an overflow names the field.
// Not installed. Thread-safety: pure functions on values.
#pragma once

#include <cstdint>
#include <vector>

#include "arch/flop_terms.h"
#include "flopmeter/flop_model.h"
#include "flopmeter/model_spec.h"

namespace flopmeter::detail {

enum class mixer_kind { attention, mla, gated_deltanet, mamba, short_conv, none };

// Mamba-2 (text_spec's mamba_* sizes): d_in = heads x head_dim.
struct mamba_mixer {
  factor heads{0, nullptr}, head_dim{0, nullptr}, n_groups{0, nullptr}, state_size{0, nullptr}, conv_kernel{0, nullptr};
};

struct attention_mixer {
  factor heads{0, nullptr}, kv_heads{0, nullptr}, qk_head_dim{0, nullptr}, v_head_dim{0, nullptr};
  bool output_gate = false;  // q_proj also emits a sigmoid gate of heads x v_head_dim (Qwen3.5)
  // The window: kind and size; size 0 = full causal attention.
  window_kind window = window_kind::sliding;
  std::int64_t window_size = 0;
};

struct mla_mixer {
  factor heads{0, nullptr}, q_lora_rank{0, nullptr}, kv_lora_rank{0, nullptr}, qk_nope_head_dim{0, nullptr},
      qk_rope_head_dim{0, nullptr}, v_head_dim{0, nullptr};  // q_lora_rank 0: one q_proj
  // Indexer-selected sparse attention (text_spec::index_topk): the main attention is a sliding window of
  // window_size (0: dense MLA); `indexer`: this layer runs the indexer (index_heads x index_head_dim) over every
  // causal pair (false on a layer that reuses the previous layer's indices, and without DSA).
  std::int64_t window_size = 0;
  bool indexer = false;
  factor index_heads{0, nullptr}, index_head_dim{0, nullptr};
};

struct deltanet_mixer {
  factor key_heads{0, nullptr}, value_heads{0, nullptr}, key_head_dim{0, nullptr}, value_head_dim{0, nullptr},
      conv_kernel{0, nullptr};
};

struct token_mixer {
  mixer_kind kind = mixer_kind::attention;
  attention_mixer attention;
  mla_mixer mla;
  deltanet_mixer deltanet;
  mamba_mixer mamba;  // kind mamba; or beside an attention mixer when with_mamba (Falcon-H1)
  bool with_mamba = false;
  factor short_conv_kernel{0, nullptr};  // kind short_conv (LFM2): in_proj h -> 3h, conv of this kernel, out_proj
};

enum class mlp_kind { gated, plain, moe, none };

struct mlp_block {
  mlp_kind kind = mlp_kind::gated;
  factor width{0, nullptr};  // gated / plain
  factor experts{0, nullptr}, top_k{0, nullptr}, expert_width{0, nullptr};
  term shared_width;           // 0: no shared expert
  bool shared_gate = false;    // a sigmoid gate h -> 1 scales the shared expert (Qwen)
  bool plain_experts = false;  // the routed and shared experts have 2 matrices (up, down; Nemotron-H)
};

struct layer_group {
  std::int64_t count = 0;
  token_mixer mixer;
  mlp_block mlp;
};

enum class vision_attention_kind {
  per_segment,  // full bidirectional attention inside each segment (frame, tile, image)
  windowed,     // Qwen2.5-VL: inside windows of the segment (vision_geometry::vision_window merged tokens a side)
};

struct vision_block_group {
  std::int64_t count = 0;
  vision_attention_kind attention = vision_attention_kind::per_segment;
};

// One GEMM of the projector per merged token: d_in -> d_out.
struct projector_gemm {
  const char* name = "";
  term d_in, d_out;
};

struct vision_tower {
  factor width{0, nullptr}, mlp_width{0, nullptr};
  vision_mlp_kind mlp = vision_mlp_kind::plain;
  term patch_inputs;                       // inputs of the patch embedding per patch
  std::vector<vision_block_group> groups;  // per-segment blocks first, then windowed ones; counts > 0
  std::vector<projector_gemm> projector;   // per merged token, in forward order
  factor projectors{1, nullptr};           // how many projectors run (Qwen3-VL: 1 + one per DeepStack index)
};

// The vision tower of a spec with one (spec.vision set).
vision_tower vision_tower_of(const vision_spec& v);

// The decoder layers [from, to) (0 <= from <= to <= num_hidden_layers) as groups, in a fixed order (by mixer
// kind in order of first use, dense MLP before MoE); groups of count 0 are left out. With `every` > 1 only the
// layers whose number i+1 is a multiple of it (every k-th layer, e.g. the checkpointed ones).
std::vector<layer_group> layer_groups(const model_spec& spec, std::int64_t from, std::int64_t to,
                                      std::int64_t every = 1);
// The group one layer belongs to (count 1).
layer_group layer_at(const model_spec& spec, std::int64_t index);
// An MTP layer (count = mtp_num_hidden_layers).
layer_group mtp_group(const model_spec& spec);
// The distinct attention windows the decoder uses (full attention is none of them), in order of first use;
// at most kMaxAttentionWindows (the rules refuse more).
std::vector<attention_window> attention_windows(const model_spec& spec);
// The index of a mixer's window in attention_windows(spec), or -1 for full attention (and dense MLA).
int window_index(const model_spec& spec, const attention_mixer& mixer);
int window_index(const model_spec& spec, const mla_mixer& mixer);
// MLA layers in [from, to) that run a sparse-attention indexer (0 without DSA).
std::int64_t count_indexer_layers(const text_spec& t, std::int64_t from, std::int64_t to);

// Layer-layout arithmetic (model_spec.cpp's counts use it): layers of each kind and MoE layers in [from, to).
std::int64_t count_layers_of_kind(const text_spec& t, layer_kind kind, std::int64_t from, std::int64_t to);
std::int64_t count_moe_layers(const text_spec& t, std::int64_t from, std::int64_t to);
bool is_moe_layer(const text_spec& t, std::int64_t index);
// The first layer with softmax attention (full, sliding or chunked) or MLA; num_hidden_layers when none.
std::int64_t first_attention_layer(const text_spec& t);

}  // namespace flopmeter::detail
