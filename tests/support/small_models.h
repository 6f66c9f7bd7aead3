// Small hand-made models whose FLOP coefficients are easy to derive by hand, shared by the tests and the
// microbatch fuzzer.
//
// Text decoder: h=8, 2 full-attention layers, nh=2, nkv=1, hd=4, I=16, V=10:
//   attention h*(q + 2kv + o) = 8*(8 + 8 + 8) = 192; SwiGLU 3*8*16 = 384; logits 8*10 = 80
//   dense_per_token = 6*(2*(192 + 384) + 80) = 7392;  text_attn_pair = 6*2*2*4*2 = 192
// Vision tower (small_vlm only): depth 1, hv=4, 2 heads, Iv=8, out 8, patch 2, temporal 1, merge 2, 1 channel:
//   vision_per_patch = 6*(4*16 + 2*4*8) = 768; vision_attn_pair = 6*2*4 = 48;
//   patch_embed_per_patch = 4*(1*1*4)*4 = 64 (no input gradient); merger = 6*(16^2 + 16*8) = 2304
#pragma once

#include "flopmeter/model_spec.h"

namespace flopmeter::testing {

inline model_spec small_text_model() {
  model_spec s;
  s.name = "small";
  s.model_type = "qwen3_vl";
  s.text.hidden_size = 8;
  s.text.num_hidden_layers = 2;
  s.text.num_attention_heads = 2;
  s.text.num_key_value_heads = 1;
  s.text.head_dim = 4;
  s.text.intermediate_size = 16;
  s.text.vocab_size = 10;
  return s;
}

inline model_spec small_vlm() {
  model_spec s = small_text_model();
  vision_spec v;
  v.depth = 1;
  v.hidden_size = 4;
  v.num_heads = 2;
  v.intermediate_size = 8;
  v.out_hidden_size = 8;
  v.patch_size = 2;
  v.temporal_patch_size = 1;
  v.spatial_merge_size = 2;
  v.in_channels = 1;
  s.vision = v;
  return s;
}

// Training FLOPs of one document of L tokens on either small model: 7392*L + 192*L(L+1)/2.
inline double small_doc_flops(double L) { return 7392.0 * L + 192.0 * L * (L + 1) / 2; }

}  // namespace flopmeter::testing
