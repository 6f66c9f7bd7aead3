// The example VLM; see model.h for what runs and why. Each matmul block sits inside a
// "flopmeter_cat:<category>" RecordFunction scope (FLOP_SCOPE below) so tests/test_example_flops.cpp can
// attribute the GEMMs LibTorch executes, forward and backward.
#include "model.h"

#include "checkpoint.h"

#include <ATen/record_function.h>
#include <torch/nn/functional.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>

namespace vlm {
namespace {

namespace F = torch::nn::functional;

// Opens the category scope for the rest of the enclosing block. The literal is concatenated at compile time
// so the observer sees e.g. "flopmeter_cat:text_mlp".
// It also names the category to a saved product's backward (checkpoint.h, category_guard).
#define VLM_FLOP_CONCAT_(a, b) a##b
#define VLM_FLOP_CONCAT(a, b) VLM_FLOP_CONCAT_(a, b)
#define VLM_FLOP_SCOPE(category_literal)                \
  RECORD_USER_SCOPE("flopmeter_cat:" category_literal); \
  const ::vlm::category_guard VLM_FLOP_CONCAT(vlm_category_, __LINE__)("flopmeter_cat:" category_literal)

// One contiguous piece of the row: a document, or the padding tail.
struct segment {
  std::int64_t start = 0;
  std::int64_t length = 0;
  bool is_document = true;
};

std::vector<segment> segments_of(const model_batch& b) {
  std::vector<segment> out;
  std::int64_t start = 0;
  for (const std::int64_t length : b.document_lengths) {
    out.push_back({start, length, true});
    start += length;
  }
  if (b.padding_tokens > 0) out.push_back({start, b.padding_tokens, false});
  return out;
}

torch::nn::Linear linear(std::int64_t in, std::int64_t out, bool bias) {
  torch::nn::Linear layer(torch::nn::LinearOptions(in, out).bias(bias));
  // HF-style initialisation (initializer_range = 0.02): small enough that the tied logits start near uniform.
  torch::NoGradGuard no_grad;
  layer->weight.normal_(0.0, 0.02);
  if (bias) layer->bias.zero_();
  return layer;
}

}  // namespace

// ---- building blocks ---------------------------------------------------------------------------------------

// RMSNorm over the last dimension (Qwen's, without the bias).
class rms_norm_impl : public torch::nn::Module {
 public:
  explicit rms_norm_impl(std::int64_t width, double eps = 1e-6) : eps_(eps) {
    weight_ = register_parameter("weight", torch::ones({width}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps_) * weight_;
  }

 private:
  double eps_;
  torch::Tensor weight_;
};

// A module whose projections can carry LoRA adapters, by their Hugging Face names: y = x W^T + (x A) B, A of
// [d_in, r], B of [r, d_out] (PEFT's alpha / r scale is element-wise and left out; B starts at zero as in PEFT,
// so an adapted model computes what the base model does). The adapter's two matmuls run in the "lora_adapters"
// scope; the base projection stays in its own.
class adaptable : public torch::nn::Module {
 public:
  // Adds an adapter of `rank` on projection `name`; false when this module has no projection of that name.
  bool add_lora(const std::string& name, std::int64_t rank) {
    const auto it = projections_.find(name);
    if (it == projections_.end() || adapters_.count(name) > 0) return false;
    const torch::Tensor& w = it->second->weight;  // [d_out, d_in]
    const torch::Tensor a = register_parameter("lora_A_" + name, torch::randn({w.size(1), rank}, w.options()) * 0.01);
    const torch::Tensor b = register_parameter("lora_B_" + name, torch::zeros({rank, w.size(0)}, w.options()));
    adapters_[name] = {a, b};
    return true;
  }

 protected:
  torch::nn::Linear adaptable_projection(const std::string& name, torch::nn::Linear layer) {
    projections_[name] = layer.ptr();
    return register_module(name, layer);
  }
  // `last`: the block's final GEMM (checkpoint.h): with an adapter, the adapter's B (PEFT adds it last).
  torch::Tensor project(const std::string& name, torch::nn::Linear& layer, const torch::Tensor& x, bool last = false) {
    const auto it = adapters_.find(name);
    const torch::Tensor y = product_linear(x, layer->weight, layer->bias, last && it == adapters_.end());
    if (it == adapters_.end()) return y;
    VLM_FLOP_SCOPE("lora_adapters");
    return y + product_matmul(product_matmul(x, it->second.first), it->second.second, last);
  }

 private:
  std::map<std::string, std::shared_ptr<torch::nn::LinearImpl>> projections_;
  std::map<std::string, std::pair<torch::Tensor, torch::Tensor>> adapters_;
};

// Interface of a decoder layer's MLP over a packed row [T, h]: a SwiGLU or an MoE block.
class mlp_block : public adaptable {
 public:
  virtual torch::Tensor run(const torch::Tensor& x) = 0;
};

// SwiGLU: down(silu(gate(x)) * up(x)); gate and up h -> width, down width -> h, no bias. `scope` is the full
// "flopmeter_cat:<category>" name its matmuls are attributed to (a dense MLP, a routed or the shared expert).
class swiglu_impl : public mlp_block {
 public:
  // `final_in_block`: a decoder layer's dense MLP, whose down projection is the layer's final GEMM.
  swiglu_impl(std::int64_t hidden, std::int64_t width, std::string scope, bool final_in_block = false)
      : scope_(std::move(scope)),
        final_(final_in_block),
        gate_(adaptable_projection("gate_proj", linear(hidden, width, false))),
        up_(adaptable_projection("up_proj", linear(hidden, width, false))),
        down_(adaptable_projection("down_proj", linear(width, hidden, false))) {}
  torch::Tensor run(const torch::Tensor& x) override {
    RECORD_USER_SCOPE(scope_);
    const category_guard category(scope_);
    return project("down_proj", down_, F::silu(project("gate_proj", gate_, x)) * project("up_proj", up_, x), final_);
  }

 private:
  std::string scope_;
  bool final_;
  torch::nn::Linear gate_, up_, down_;
};

// The MoE block of Qwen3-VL MoE (no shared expert) and Qwen3.5 MoE (with one):
//   router   logits = x W_r^T (h -> E), probabilities softmax, the top-k per token, renormalised to sum 1 when
//            norm_topk_prob
//   experts  dropless dispatch: for each expert, the tokens that chose it are gathered, run through its SwiGLU
//            and added back weighted by their probability; every token visits exactly k experts, so the
//            routed work is T * k * 3*h*I_moe multiply-adds whatever the routing (an expert nobody chose
//            runs nothing)
//   shared   a SwiGLU of shared_expert_intermediate_size on every token, times sigmoid(x w_g), w_g: h -> 1
class moe_block_impl : public mlp_block {
 public:
  explicit moe_block_impl(const flopmeter::text_spec& t)
      : top_k_(t.num_experts_per_tok),
        normalize_(t.norm_topk_prob),
        router_(register_module("gate", linear(t.hidden_size, t.num_experts, false))) {
    for (std::int64_t e = 0; e < t.num_experts; ++e) {
      experts_.push_back(register_module("experts_" + std::to_string(e),
                                         std::make_shared<swiglu_impl>(t.hidden_size, t.moe_intermediate_size,
                                                                       std::string(kScopePrefix) + kMoeRoutedExperts)));
    }
    if (t.shared_expert_intermediate_size > 0) {
      shared_ = register_module("shared_expert",
                                std::make_shared<swiglu_impl>(t.hidden_size, t.shared_expert_intermediate_size,
                                                              std::string(kScopePrefix) + kMoeSharedExpert));
      shared_gate_ = register_module("shared_expert_gate", linear(t.hidden_size, 1, false));
    } else if (t.n_shared_experts > 0) {
      // DeepSeek-V3: n_shared_experts experts fused into one SwiGLU of n_shared_experts x moe_intermediate_size,
      // on every token, ungated.
      shared_ = register_module(
          "shared_experts", std::make_shared<swiglu_impl>(t.hidden_size, t.n_shared_experts * t.moe_intermediate_size,
                                                          std::string(kScopePrefix) + kMoeSharedExpert));
    }
  }

  torch::Tensor run(const torch::Tensor& x) override {
    torch::Tensor logits;
    {
      VLM_FLOP_SCOPE("moe_router");
      logits = product_linear(x, router_->weight, router_->bias);  // [T, E]
    }
    const torch::Tensor probabilities = torch::softmax(logits, -1);
    auto [weights, chosen] = probabilities.topk(top_k_, -1);  // [T, k] each; k distinct experts per token
    if (normalize_) weights = weights / weights.sum(-1, /*keepdim=*/true);
    torch::Tensor out = torch::zeros_like(x);
    const torch::Tensor chosen_cpu = chosen.to(torch::kCPU);
    // The experts' gate, up and down are one grouped matmul each in the op numbering (checkpoint.h).
    const std::int64_t experts_start = product_position();
    for (std::size_t e = 0; e < experts_.size(); ++e) {
      set_product_position(experts_start);
      // (token, slot) pairs that routed to expert e; at most one slot per token (top-k is distinct).
      const torch::Tensor hits = (chosen_cpu == static_cast<std::int64_t>(e)).nonzero();
      if (hits.size(0) == 0) continue;
      const torch::Tensor tokens = hits.select(1, 0).to(x.device());
      const torch::Tensor slots = hits.select(1, 1).to(x.device());
      const torch::Tensor y = experts_[e]->run(x.index_select(0, tokens));
      const torch::Tensor w = weights.index({tokens, slots}).unsqueeze(-1);
      out = out.index_add(0, tokens, y * w);
    }
    set_product_position(experts_start + 3);
    if (shared_ && !shared_gate_.is_empty()) {
      const torch::Tensor shared = shared_->run(x);  // the shared expert, then its gate (Hugging Face's order)
      torch::Tensor gate;
      {
        VLM_FLOP_SCOPE("moe_shared_expert_gate");
        gate = product_linear(x, shared_gate_->weight, shared_gate_->bias);  // [T, 1]
      }
      out = out + torch::sigmoid(gate) * shared;
    } else if (shared_) {
      out = out + shared_->run(x);  // DeepSeek's shared experts: no gate
    }
    return out;
  }

 private:
  std::int64_t top_k_;
  bool normalize_;
  torch::nn::Linear router_;
  std::vector<std::shared_ptr<swiglu_impl>> experts_;
  std::shared_ptr<swiglu_impl> shared_;
  torch::nn::Linear shared_gate_{nullptr};
};

// Interface of a decoder token mixer over a packed row [T, h].
class token_mixer : public adaptable {
 public:
  virtual torch::Tensor mix(const torch::Tensor& x, const std::vector<segment>& segments) = 0;
};

// GQA softmax attention per document, with Qwen3.5's sigmoid output gate when attn_output_gate; over the whole
// document causally (window 0, chunk 0), over a sliding window of `window` keys (query i sees keys i - w < j <= i),
// or inside chunks of `chunk` tokens (query i sees the keys of its own chunk up to itself; a document's chunks
// start at its first token, the last one shorter when c does not divide its length).
class full_attention_impl : public token_mixer {
 public:
  full_attention_impl(const flopmeter::text_spec& t, std::int64_t window, std::int64_t chunk)
      : window_(window),
        chunk_(chunk),
        heads_(t.num_attention_heads),
        kv_heads_(t.num_key_value_heads),
        head_dim_(t.head_dim),
        gated_(t.attn_output_gate),
        q_proj_(adaptable_projection(
            "q_proj", linear(t.hidden_size, t.num_attention_heads * t.head_dim * (gated_ ? 2 : 1), false))),
        k_proj_(adaptable_projection("k_proj", linear(t.hidden_size, t.num_key_value_heads * t.head_dim, false))),
        v_proj_(adaptable_projection("v_proj", linear(t.hidden_size, t.num_key_value_heads * t.head_dim, false))),
        o_proj_(adaptable_projection("o_proj", linear(t.num_attention_heads * t.head_dim, t.hidden_size, false))),
        q_norm_(register_module("q_norm", std::make_shared<rms_norm_impl>(t.head_dim))),
        k_norm_(register_module("k_norm", std::make_shared<rms_norm_impl>(t.head_dim))) {}

  torch::Tensor mix(const torch::Tensor& x, const std::vector<segment>& segments) override {
    const std::int64_t tokens = x.size(0);
    torch::Tensor q, gate, k, v;
    {
      VLM_FLOP_SCOPE("text_attn_proj");
      q = project("q_proj", q_proj_, x);
      k = project("k_proj", k_proj_, x);
      v = project("v_proj", v_proj_, x);
    }
    if (gated_) {
      // Qwen3.5 lays out q_proj's output per head as [query | gate].
      auto parts = q.view({tokens, heads_, 2 * head_dim_}).chunk(2, -1);
      q = parts[0];
      gate = parts[1].reshape({tokens, heads_ * head_dim_});
    } else {
      q = q.view({tokens, heads_, head_dim_});
    }
    q = q_norm_->forward(q);
    k = k_norm_->forward(k.view({tokens, kv_heads_, head_dim_}));
    v = v.view({tokens, kv_heads_, head_dim_});

    // The attention core over q, k, v; under the selective policy checkpointed (run again in the backward).
    const auto attend = [this, segments](const std::vector<torch::Tensor>& in) {
      const torch::Tensor &qa = in[0], &ka = in[1], &va = in[2];
      if (window_ > 0) return windowed_core(qa, ka, va, segments, window_);
      if (chunk_ > 0) {
        // Each chunk is a causal run of at most c tokens: the windowed core with window c runs exactly its
        // L(L+1)/2 pairs (L <= c), per chunk q * c(c+1)/2 + r(r+1)/2 for a document of q c + r tokens.
        std::vector<segment> chunks;
        for (const segment& s : segments) {
          if (!s.is_document) {
            chunks.push_back(s);
            continue;
          }
          for (std::int64_t offset = 0; offset < s.length; offset += chunk_) {
            chunks.push_back({s.start + offset, std::min(chunk_, s.length - offset), true});
          }
        }
        return windowed_core(qa, ka, va, chunks, chunk_);
      }
      VLM_FLOP_SCOPE("text_attn_core");
      const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim_));
      const std::int64_t groups = heads_ / kv_heads_;
      std::vector<torch::Tensor> pieces;
      for (const segment& s : segments) {
        if (!s.is_document) {
          // Padding attends to nothing (varlen attention never sees it): zeros, no matmul work.
          pieces.push_back(torch::zeros({s.length, heads_ * head_dim_}, qa.options()));
          continue;
        }
        const std::int64_t n = s.length;
        const torch::Tensor qd = qa.narrow(0, s.start, n).transpose(0, 1) * scale;  // [nh, L, hd]
        const torch::Tensor kd = ka.narrow(0, s.start, n).transpose(0, 1).repeat_interleave(groups, 0);
        const torch::Tensor vd = va.narrow(0, s.start, n).transpose(0, 1).repeat_interleave(groups, 0);
        // The masked square: the scores of all L x L (query, key) pairs of the document are computed with one
        // matmul, the pairs above the diagonal (key after query) are masked to -inf before the softmax, and
        // the probabilities (zero above the diagonal) multiply V as a full L x L matrix. So this example does
        // 2 * nh * hd * L^2 multiply-adds per document and layer, where a causal kernel (FlashAttention's
        // varlen path, and flopmeter's count) does the L(L+1)/2 causal pairs only.
        const torch::Tensor mask = torch::ones({n, n}, qa.options().dtype(torch::kBool)).triu(1);
        const torch::Tensor scores = core_matmul(qd, kd.transpose(1, 2)).masked_fill(mask, -INFINITY);
        const torch::Tensor probs = torch::softmax(scores, -1);
        pieces.push_back(core_matmul(probs, vd).transpose(0, 1).reshape({n, heads_ * head_dim_}));
      }
      return torch::cat(pieces, 0);
    };
    torch::Tensor out = checkpoint_core_ ? checkpoint(attend, {q, k, v}, {}) : attend({q, k, v});
    if (gated_) out = out * torch::sigmoid(gate);
    VLM_FLOP_SCOPE("text_attn_proj");
    return project("o_proj", o_proj_, out);
  }

  bool checkpoint_core_ = false;  // the selective policy (set_recompute)

 private:
  // Sliding-window attention per document, executing exactly the pairs a varlen windowed kernel does:
  // query i of a document of length L attends keys max(0, i - w + 1) .. i, so the document runs
  //   min(L, w - 1) queries on their causal prefix (1, 2, .. keys: one matmul pair each), and
  //   the L - w + 1 queries with a full window (when L >= w) as one block: each query against its own w keys,
  //   gathered by unfold ([m, nh, hd, w]), a batched [1, hd] x [hd, w] score and [1, w] x [w, hd] value product.
  // That is 2 * nh * hd multiply-adds per pair for L(L+1)/2 pairs when L <= w, w(w+1)/2 + (L - w) w otherwise:
  // the window pairs flopmeter bills (window_pairs), with nothing masked and nothing computed twice.
  torch::Tensor windowed_core(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const std::vector<segment>& segments, std::int64_t window) {
    VLM_FLOP_SCOPE("text_window_attn_core");
    const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim_));
    const std::int64_t groups = heads_ / kv_heads_;
    const std::int64_t width = heads_ * head_dim_;
    std::vector<torch::Tensor> pieces;
    for (const segment& s : segments) {
      if (!s.is_document) {
        pieces.push_back(torch::zeros({s.length, width}, q.options()));  // padding attends to nothing
        continue;
      }
      const std::int64_t n = s.length;
      const torch::Tensor qd = q.narrow(0, s.start, n) * scale;                       // [L, nh, hd]
      const torch::Tensor kd = k.narrow(0, s.start, n).repeat_interleave(groups, 1);  // [L, nh, hd]
      const torch::Tensor vd = v.narrow(0, s.start, n).repeat_interleave(groups, 1);
      const std::int64_t prefix = std::min(n, window - 1);
      for (std::int64_t i = 0; i < prefix; ++i) {
        const torch::Tensor qi = qd[i].unsqueeze(1);                      // [nh, 1, hd]
        const torch::Tensor ki = kd.narrow(0, 0, i + 1).transpose(0, 1);  // [nh, i+1, hd]
        const torch::Tensor vi = vd.narrow(0, 0, i + 1).transpose(0, 1);
        const torch::Tensor probs = torch::softmax(core_matmul(qi, ki.transpose(1, 2)), -1);  // [nh, 1, i+1]
        pieces.push_back(core_matmul(probs, vi).reshape({1, width}));
      }
      if (n >= window) {
        const std::int64_t m = n - window + 1;                                // queries w-1 .. L-1
        const torch::Tensor qb = qd.narrow(0, window - 1, m).unsqueeze(2);    // [m, nh, 1, hd]
        const torch::Tensor kw = kd.unfold(0, window, 1);                     // [m, nh, hd, w]
        const torch::Tensor vw = vd.unfold(0, window, 1).transpose(2, 3);     // [m, nh, w, hd]
        const torch::Tensor probs = torch::softmax(core_matmul(qb, kw), -1);  // [m, nh, 1, w]
        pieces.push_back(core_matmul(probs, vw).reshape({m, width}));
      }
    }
    return torch::cat(pieces, 0);
  }

  std::int64_t window_, chunk_;
  std::int64_t heads_, kv_heads_, head_dim_;
  bool gated_;
  torch::nn::Linear q_proj_, k_proj_, v_proj_, o_proj_;
  std::shared_ptr<rms_norm_impl> q_norm_, k_norm_;
};

// DeepSeek-V3's multi-head latent attention, as transformers runs it (the latents expanded per head, no weight
// absorption):
//   q   q_a_proj h -> q_lora_rank, RMSNorm, q_b_proj -> nh*(nope + rope); or one q_proj h -> nh*(nope + rope)
//   kv  kv_a_proj_with_mqa h -> kv_lora_rank + rope: the latent (RMSNorm, then kv_b_proj -> nh*(nope + v)) and
//       one rope key shared by every head
//   core per document, causal: scores over nope + rope per head, probabilities times v (v_head_dim)
//   o   o_proj nh*v -> h
// The core is the masked square of full_attention_impl (so the test converts it by sum L^2 / sum L(L+1)/2), at
// nh*(nope + rope) + nh*v multiply-adds per (query, key) pair. RoPE is element-wise and left out. Every
// projection can carry a LoRA adapter by its PEFT name (q_a_proj, q_b_proj or q_proj, kv_a_proj_with_mqa,
// kv_b_proj, o_proj).
class mla_attention_impl : public token_mixer {
 public:
  explicit mla_attention_impl(const flopmeter::text_spec& t)
      : heads_(t.num_attention_heads),
        nope_(t.qk_nope_head_dim),
        rope_(t.qk_rope_head_dim),
        v_dim_(t.v_head_dim),
        kv_rank_(t.kv_lora_rank),
        kv_a_proj_(adaptable_projection("kv_a_proj_with_mqa", linear(t.hidden_size, kv_rank_ + rope_, false))),
        kv_a_norm_(register_module("kv_a_layernorm", std::make_shared<rms_norm_impl>(kv_rank_))),
        kv_b_proj_(adaptable_projection("kv_b_proj", linear(kv_rank_, heads_ * (nope_ + v_dim_), false))),
        o_proj_(adaptable_projection("o_proj", linear(heads_ * v_dim_, t.hidden_size, false))) {
    const std::int64_t q_width = heads_ * (nope_ + rope_);
    if (t.q_lora_rank > 0) {
      q_a_proj_ = adaptable_projection("q_a_proj", linear(t.hidden_size, t.q_lora_rank, false));
      q_a_norm_ = register_module("q_a_layernorm", std::make_shared<rms_norm_impl>(t.q_lora_rank));
      q_b_proj_ = adaptable_projection("q_b_proj", linear(t.q_lora_rank, q_width, false));
    } else {
      q_proj_ = adaptable_projection("q_proj", linear(t.hidden_size, q_width, false));
    }
  }

  torch::Tensor mix(const torch::Tensor& x, const std::vector<segment>& segments) override {
    const std::int64_t tokens = x.size(0);
    torch::Tensor q, k, v;
    {
      VLM_FLOP_SCOPE("text_attn_proj");
      q = q_proj_.is_empty() ? project("q_b_proj", q_b_proj_, q_a_norm_->forward(project("q_a_proj", q_a_proj_, x)))
                             : project("q_proj", q_proj_, x);
      q = q.view({tokens, heads_, nope_ + rope_});
      const auto latent = project("kv_a_proj_with_mqa", kv_a_proj_, x).split_with_sizes({kv_rank_, rope_}, -1);
      const torch::Tensor kv =
          project("kv_b_proj", kv_b_proj_, kv_a_norm_->forward(latent[0])).view({tokens, heads_, nope_ + v_dim_});
      const auto parts = kv.split_with_sizes({nope_, v_dim_}, -1);
      const torch::Tensor k_rope = latent[1].reshape({tokens, 1, rope_}).expand({tokens, heads_, rope_});
      k = torch::cat({parts[0], k_rope}, -1);  // [T, nh, nope + rope]
      v = parts[1];                            // [T, nh, v]
    }
    torch::Tensor out;
    {
      VLM_FLOP_SCOPE("text_attn_core");
      const double scale = 1.0 / std::sqrt(static_cast<double>(nope_ + rope_));
      std::vector<torch::Tensor> pieces;
      for (const segment& s : segments) {
        if (!s.is_document) {
          pieces.push_back(torch::zeros({s.length, heads_ * v_dim_}, x.options()));  // padding attends to nothing
          continue;
        }
        const std::int64_t n = s.length;
        const torch::Tensor qd = q.narrow(0, s.start, n).transpose(0, 1) * scale;  // [nh, L, nope + rope]
        const torch::Tensor kd = k.narrow(0, s.start, n).transpose(0, 1);
        const torch::Tensor vd = v.narrow(0, s.start, n).transpose(0, 1);  // [nh, L, v]
        const torch::Tensor mask = torch::ones({n, n}, x.options().dtype(torch::kBool)).triu(1);
        const torch::Tensor probs =
            torch::softmax(torch::matmul(qd, kd.transpose(1, 2)).masked_fill(mask, -INFINITY), -1);
        pieces.push_back(torch::matmul(probs, vd).transpose(0, 1).reshape({n, heads_ * v_dim_}));
      }
      out = torch::cat(pieces, 0);
    }
    VLM_FLOP_SCOPE("text_attn_proj");
    return project("o_proj", o_proj_, out);
  }

 private:
  std::int64_t heads_, nope_, rope_, v_dim_, kv_rank_;
  torch::nn::Linear q_a_proj_{nullptr}, q_b_proj_{nullptr}, q_proj_{nullptr};
  std::shared_ptr<rms_norm_impl> q_a_norm_;
  torch::nn::Linear kv_a_proj_;
  std::shared_ptr<rms_norm_impl> kv_a_norm_;
  torch::nn::Linear kv_b_proj_, o_proj_;
};

// Qwen3.5's Gated DeltaNet, kept simple: the same projections and conv as the real layer, and the gated
// delta rule as a per-token recurrence (all heads batched) that restarts at every document.
//   S_t = a_t S_{t-1} (I - b_t k_t k_t^T) + b_t v_t k_t^T = a_t S_{t-1} + (b_t (v_t - a_t S_{t-1} k_t)) k_t^T
//   o_t = S_t q_t                                     (S: dv x dk per value head; key heads repeated to Hv)
// Per token and value head that is three dk x dv matrix-vector-like products (S k, the outer product
// u k^T, S q), where Megatron bills four (chunked form); see examples/FLOP_AGREEMENT.md.
class gated_deltanet_impl : public token_mixer {
 public:
  explicit gated_deltanet_impl(const flopmeter::text_spec& t)
      : key_heads_(t.linear_num_key_heads),
        value_heads_(t.linear_num_value_heads),
        key_dim_(t.linear_key_head_dim),
        value_dim_(t.linear_value_head_dim),
        kernel_(t.linear_conv_kernel_dim),
        conv_channels_(2 * key_heads_ * key_dim_ + value_heads_ * value_dim_),
        in_proj_qkv_(adaptable_projection("in_proj_qkv", linear(t.hidden_size, conv_channels_, false))),
        in_proj_z_(adaptable_projection("in_proj_z", linear(t.hidden_size, value_heads_ * value_dim_, false))),
        in_proj_a_(register_module("in_proj_a", linear(t.hidden_size, value_heads_, false))),
        in_proj_b_(register_module("in_proj_b", linear(t.hidden_size, value_heads_, false))),
        out_proj_(adaptable_projection("out_proj", linear(value_heads_ * value_dim_, t.hidden_size, false))),
        norm_(register_module("norm", std::make_shared<rms_norm_impl>(value_dim_))) {
    // Depthwise conv weight [C, 1, K] (no bias, as Qwen3.5), decay rates A = exp(A_log) in [1, 16] and dt_bias.
    conv_weight_ = register_parameter("conv1d_weight",
                                      torch::randn({conv_channels_, 1, kernel_}) / std::sqrt(static_cast<double>(kernel_)));
    a_log_ = register_parameter("A_log", torch::empty({value_heads_}).uniform_(1.0, 16.0).log());
    dt_bias_ = register_parameter("dt_bias", torch::ones({value_heads_}));
  }

  torch::Tensor mix(const torch::Tensor& x, const std::vector<segment>& segments) override {
    const std::int64_t tokens = x.size(0);
    torch::Tensor qkv, z, a, b;
    {
      VLM_FLOP_SCOPE("gdn_proj");
      qkv = project("in_proj_qkv", in_proj_qkv_, x);
      z = project("in_proj_z", in_proj_z_, x);
      a = product_linear(x, in_proj_a_->weight, in_proj_a_->bias);
      b = product_linear(x, in_proj_b_->weight, in_proj_b_->bias);
    }
    torch::Tensor mixed;
    {
      // Causal depthwise conv over the q, k, v channels, per segment (left zero padding K-1: no token sees
      // another document). Padding runs through it too, as it runs through the projections.
      VLM_FLOP_SCOPE("gdn_conv");
      std::vector<torch::Tensor> pieces;
      for (const segment& s : segments) {
        const torch::Tensor piece = qkv.narrow(0, s.start, s.length).t().unsqueeze(0);  // [1, C, L]
        const torch::Tensor padded = F::pad(piece, F::PadFuncOptions({kernel_ - 1, 0}));
        pieces.push_back(F::conv1d(padded, conv_weight_, F::Conv1dFuncOptions().groups(conv_channels_)));
      }
      mixed = F::silu(torch::cat(pieces, 2).squeeze(0).t());  // [T, C]
    }

    torch::Tensor core;
    {
      VLM_FLOP_SCOPE("gdn_delta_rule");
      const std::int64_t qk = key_heads_ * key_dim_;
      const std::int64_t repeat = value_heads_ / key_heads_;
      torch::Tensor q = mixed.narrow(1, 0, qk).view({tokens, key_heads_, key_dim_});
      torch::Tensor k = mixed.narrow(1, qk, qk).view({tokens, key_heads_, key_dim_});
      const torch::Tensor v = mixed.narrow(1, 2 * qk, value_heads_ * value_dim_).view({tokens, value_heads_, value_dim_});
      q = (F::normalize(q, F::NormalizeFuncOptions().dim(-1)) / std::sqrt(static_cast<double>(key_dim_)))
              .repeat_interleave(repeat, 1);
      k = F::normalize(k, F::NormalizeFuncOptions().dim(-1)).repeat_interleave(repeat, 1);
      const torch::Tensor beta = torch::sigmoid(b);                                          // [T, Hv]
      torch::Tensor alpha = torch::exp(-torch::exp(a_log_) * F::softplus(a + dt_bias_));  // [T, Hv]
      // A document (or the padding tail) starts from an empty state: alpha = 0 at its first token.
      torch::Tensor keep = torch::ones({tokens, 1}, x.options());
      for (const segment& s : segments) keep[s.start].fill_(0.0);
      alpha = alpha * keep;

      const auto qs = q.unsqueeze(-1).unbind(0);                                   // [Hv, dk, 1] each
      const auto ks = k.unsqueeze(-1).unbind(0);                                   // [Hv, dk, 1]
      const auto kts = k.unsqueeze(-2).unbind(0);                                  // [Hv, 1, dk]
      const auto vs = v.unsqueeze(-1).unbind(0);                                   // [Hv, dv, 1]
      const auto alphas = alpha.view({tokens, value_heads_, 1, 1}).unbind(0);      // [Hv, 1, 1]
      const auto betas = beta.view({tokens, value_heads_, 1, 1}).unbind(0);
      torch::Tensor state = torch::zeros({value_heads_, value_dim_, key_dim_}, x.options());
      std::vector<torch::Tensor> outputs;
      outputs.reserve(static_cast<std::size_t>(tokens));
      for (std::size_t t = 0; t < static_cast<std::size_t>(tokens); ++t) {
        const torch::Tensor sk = torch::bmm(state, ks[t]);                     // S k      [Hv, dv, 1]
        const torch::Tensor u = betas[t] * (vs[t] - alphas[t] * sk);
        state = alphas[t] * state + torch::bmm(u, kts[t]);                     // u k^T    [Hv, dv, dk]
        outputs.push_back(torch::bmm(state, qs[t]));                           // S q      [Hv, dv, 1]
      }
      core = torch::stack(outputs, 0).squeeze(-1);  // [T, Hv, dv]
    }
    // Gated RMSNorm per head, then out_proj.
    const torch::Tensor gated = norm_->forward(core) * F::silu(z.view({tokens, value_heads_, value_dim_}));
    VLM_FLOP_SCOPE("gdn_proj");
    return project("out_proj", out_proj_, gated.reshape({tokens, value_heads_ * value_dim_}));
  }

 private:
  std::int64_t key_heads_, value_heads_, key_dim_, value_dim_, kernel_, conv_channels_;
  torch::nn::Linear in_proj_qkv_, in_proj_z_, in_proj_a_, in_proj_b_, out_proj_;
  std::shared_ptr<rms_norm_impl> norm_;
  torch::Tensor conv_weight_, a_log_, dt_bias_;
};

class decoder_layer_impl : public torch::nn::Module {
 public:
  decoder_layer_impl(const flopmeter::text_spec& t, flopmeter::layer_kind kind, bool moe)
      : input_norm_(register_module("input_layernorm", std::make_shared<rms_norm_impl>(t.hidden_size))),
        post_norm_(register_module("post_attention_layernorm", std::make_shared<rms_norm_impl>(t.hidden_size))) {
    if (moe) {
      mlp_ = register_module("mlp", std::make_shared<moe_block_impl>(t));
    } else {
      mlp_ = register_module("mlp", std::make_shared<swiglu_impl>(t.hidden_size, t.intermediate_size,
                                                                  std::string(kScopePrefix) + kTextMlp, true));
    }
    if (t.is_mla() && kind == flopmeter::layer_kind::full_attention) {
      mixer_ = register_module("self_attn", std::make_shared<mla_attention_impl>(t));
    } else if (kind == flopmeter::layer_kind::full_attention) {
      mixer_ = register_module("self_attn", std::make_shared<full_attention_impl>(t, 0, 0));
    } else if (kind == flopmeter::layer_kind::sliding_attention) {
      mixer_ = register_module("self_attn", std::make_shared<full_attention_impl>(t, t.sliding_window, 0));
    } else if (kind == flopmeter::layer_kind::chunked_attention) {
      mixer_ = register_module("self_attn", std::make_shared<full_attention_impl>(t, 0, t.attention_chunk_size));
    } else {
      mixer_ = register_module("linear_attn", std::make_shared<gated_deltanet_impl>(t));
    }
  }
  // Adapters on the named projections of this layer's mixer and dense MLP (an MoE block has none); the count.
  int add_lora(const std::vector<std::string>& targets, std::int64_t rank) {
    int added = 0;
    for (const std::string& name : targets)
      added += (mixer_->add_lora(name, rank) ? 1 : 0) + (mlp_->add_lora(name, rank) ? 1 : 0);
    return added;
  }
  torch::Tensor forward(torch::Tensor x, const std::vector<segment>& segments) {
    x = x + mixer_->mix(input_norm_->forward(x), segments);
    return x + mlp_->run(post_norm_->forward(x));
  }
  // Checkpoint this layer's softmax attention core (the selective policy); a Gated DeltaNet layer has none.
  void checkpoint_attention_core(bool on) {
    if (auto* attention = dynamic_cast<full_attention_impl*>(mixer_.get())) attention->checkpoint_core_ = on;
  }

 private:
  std::shared_ptr<rms_norm_impl> input_norm_, post_norm_;
  std::shared_ptr<token_mixer> mixer_;
  std::shared_ptr<mlp_block> mlp_;
};

// ---- vision tower ------------------------------------------------------------------------------------------

// A ViT block: a norm, attention (fused qkv with bias) bidirectional inside each attention segment of the patch
// sequence, a norm, the MLP. Qwen2-VL / Qwen3-VL (a plain MLP): LayerNorm and a GELU MLP fc1, fc2. Qwen2.5-VL
// (a gated MLP): RMSNorm and a SwiGLU gate_proj, up_proj, down_proj, with biases. The segments are the temporal
// patches of the items (a frame of h*w patches attends to itself), or in a window block of Qwen2.5-VL the windows
// (vision_tower_impl lays the patches out window by window and says which).
class vision_block_impl : public torch::nn::Module {
 public:
  vision_block_impl(const flopmeter::vision_spec& v, bool windowed)
      : heads_(v.num_heads),
        head_dim_(v.hidden_size / v.num_heads),
        windowed_(windowed),
        gated_(v.mlp == flopmeter::vision_mlp_kind::gated),
        qkv_(register_module("qkv", linear(v.hidden_size, 3 * v.hidden_size, true))),
        proj_(register_module("proj", linear(v.hidden_size, v.hidden_size, true))) {
    if (gated_) {
      rms1_ = register_module("norm1", std::make_shared<rms_norm_impl>(v.hidden_size));
      rms2_ = register_module("norm2", std::make_shared<rms_norm_impl>(v.hidden_size));
      fc1_ = register_module("gate_proj", linear(v.hidden_size, v.intermediate_size, true));
      up_ = register_module("up_proj", linear(v.hidden_size, v.intermediate_size, true));
      fc2_ = register_module("down_proj", linear(v.intermediate_size, v.hidden_size, true));
    } else {
      norm1_ = register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({v.hidden_size}).eps(1e-6)));
      norm2_ = register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({v.hidden_size}).eps(1e-6)));
      fc1_ = register_module("fc1", linear(v.hidden_size, v.intermediate_size, true));
      fc2_ = register_module("fc2", linear(v.intermediate_size, v.hidden_size, true));
    }
  }

  // Attends inside `windows` (consecutive runs of the patch sequence) in a window block, inside `frames` in the
  // others.
  torch::Tensor forward(torch::Tensor x, const std::vector<std::int64_t>& frames,
                        const std::vector<std::int64_t>& windows) {
    const std::int64_t patches = x.size(0);
    const std::int64_t width = heads_ * head_dim_;
    torch::Tensor qkv;
    {
      VLM_FLOP_SCOPE("vision_dense");
      qkv = product_linear(norm(1, x), qkv_->weight, qkv_->bias).view({patches, 3, heads_, head_dim_});
    }
    // Bidirectional attention inside each segment: n patches attend to each other, n^2 pairs (Qwen's cu_seqlens
    // over grid_t frames, or over the windows' cu_window_seqlens). Under the selective policy checkpointed.
    const std::vector<std::int64_t> segments = windowed_ ? windows : frames;
    const auto attend = [this, segments, width](const std::vector<torch::Tensor>& in) {
      const torch::Tensor& packed = in[0];
      const auto core = [&] {
        const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim_));
        std::vector<torch::Tensor> pieces;
        std::int64_t start = 0;
        for (const std::int64_t n : segments) {
          const torch::Tensor piece = packed.narrow(0, start, n);              // [n, 3, heads, hd]
          const torch::Tensor q = piece.select(1, 0).transpose(0, 1) * scale;  // [heads, n, hd]
          const torch::Tensor k = piece.select(1, 1).transpose(0, 1);
          const torch::Tensor v = piece.select(1, 2).transpose(0, 1);
          const torch::Tensor probs = torch::softmax(core_matmul(q, k.transpose(1, 2)), -1);
          pieces.push_back(core_matmul(probs, v).transpose(0, 1).reshape({n, width}));
          start += n;
        }
        return torch::cat(pieces, 0);
      };
      if (windowed_) {
        VLM_FLOP_SCOPE("vision_window_attn_core");
        return core();
      }
      VLM_FLOP_SCOPE("vision_attn_core");
      return core();
    };
    const torch::Tensor attended = checkpoint_core_ ? checkpoint(attend, {qkv}, {}) : attend({qkv});
    VLM_FLOP_SCOPE("vision_dense");
    x = x + product_linear(attended, proj_->weight, proj_->bias);
    const torch::Tensor normed = norm(2, x);
    torch::Tensor hidden = product_linear(normed, fc1_->weight, fc1_->bias);  // gate_proj before up_proj
    hidden = gated_ ? F::silu(hidden) * product_linear(normed, up_->weight, up_->bias) : F::gelu(hidden);
    return x + product_linear(hidden, fc2_->weight, fc2_->bias, /*last=*/true);
  }

  bool checkpoint_core_ = false;  // the selective policy (set_recompute)

 private:
  torch::Tensor norm(int which, const torch::Tensor& x) {
    if (gated_) return (which == 1 ? rms1_ : rms2_)->forward(x);
    return (which == 1 ? norm1_ : norm2_)->forward(x);
  }

  std::int64_t heads_, head_dim_;
  bool windowed_, gated_;
  torch::nn::LayerNorm norm1_{nullptr}, norm2_{nullptr};
  std::shared_ptr<rms_norm_impl> rms1_, rms2_;
  torch::nn::Linear qkv_, proj_;
  torch::nn::Linear fc1_{nullptr}, up_{nullptr}, fc2_{nullptr};  // gated: gate_proj, up_proj, down_proj
};

// Groups spatial_merge_size^2 consecutive patches (one merge block) into one token:
// LayerNorm, [m^2 * hv] -> m^2*hv -> GELU -> out_hidden. The DeepStack variant (Qwen3-VL) normalises after
// grouping ("postshuffle" norm) instead of before.
class patch_merger_impl : public torch::nn::Module {
 public:
  patch_merger_impl(const flopmeter::vision_spec& v, bool postshuffle_norm)
      : width_(v.spatial_merge_size * v.spatial_merge_size * v.hidden_size),
        postshuffle_(postshuffle_norm),
        norm_(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions(
                                          {postshuffle_norm ? width_ : v.hidden_size}).eps(1e-6)))),
        fc1_(register_module("fc1", linear(width_, width_, true))),
        fc2_(register_module("fc2", linear(width_, v.out_hidden_size, true))) {}

  torch::Tensor forward(const torch::Tensor& x) {
    VLM_FLOP_SCOPE("merger");
    const torch::Tensor grouped =
        postshuffle_ ? norm_->forward(x.reshape({-1, width_})) : norm_->forward(x).reshape({-1, width_});
    return fc2_->forward(F::gelu(fc1_->forward(grouped)));
  }

 private:
  std::int64_t width_;
  bool postshuffle_;
  torch::nn::LayerNorm norm_;
  torch::nn::Linear fc1_, fc2_;
};

// Qwen2.5-VL's window layout (transformers' Qwen2_5_VisionTransformerPretrainedModel.get_window_index): per
// temporal patch, the merged tokens of the (h/m) x (w/m) grid are tiled by square windows of v merged tokens a
// side from the top left, the windows at the right and bottom edges smaller when v does not divide the grid.
// The patch sequence is reordered window by window, whole merged tokens (m^2 consecutive patches) at a time, and
// window blocks attend inside each window. Frames stay contiguous (the windows of a frame are inside it), so the
// full-attention blocks attend per frame over the same reordered sequence.
struct vision_layout {
  std::vector<std::int64_t> frames;   // patches per temporal patch, in item order
  std::vector<std::int64_t> windows;  // patches per window, in the reordered sequence
  std::vector<std::int64_t> order;    // the merged token (in the processor's order) at each reordered place
};

vision_layout layout_of(const std::vector<image_item>& images, std::int64_t merge, std::int64_t window) {
  vision_layout out;
  std::int64_t base = 0;  // merged tokens of the items before
  for (const image_item& image : images) {
    const std::int64_t rows = image.h / merge, cols = image.w / merge;
    for (std::int64_t f = 0; f < image.t; ++f, base += rows * cols) {
      out.frames.push_back(image.h * image.w);
      if (window == 0) continue;
      for (std::int64_t r0 = 0; r0 < rows; r0 += window) {
        for (std::int64_t c0 = 0; c0 < cols; c0 += window) {
          const std::int64_t r1 = std::min(rows, r0 + window), c1 = std::min(cols, c0 + window);
          for (std::int64_t r = r0; r < r1; ++r) {
            for (std::int64_t c = c0; c < c1; ++c) out.order.push_back(base + r * cols + c);
          }
          out.windows.push_back((r1 - r0) * (c1 - c0) * merge * merge);
        }
      }
    }
  }
  return out;
}

class vision_tower_impl : public torch::nn::Module {
 public:
  explicit vision_tower_impl(const flopmeter::vision_spec& v)
      : merge_(v.spatial_merge_size),
        window_(v.window_size > 0 ? v.window_size / (v.patch_size * v.spatial_merge_size) : 0),
        deepstack_indexes_(v.deepstack_visual_indexes),
        // Qwen's patch embedding is a Conv3d with kernel = stride = (temporal_patch_size, patch_size,
        // patch_size) over non-overlapping patches, which is exactly this Linear of the flattened patch.
        patch_embed_(register_module("patch_embed", linear(v.patch_input_size(), v.hidden_size, true))),
        merger_(register_module("merger", std::make_shared<patch_merger_impl>(v, false))) {
    for (std::int64_t i = 0; i < v.depth; ++i) {
      // Qwen2.5-VL: the blocks not listed in fullatt_block_indexes attend inside windows.
      const bool windowed = window_ > 0 && std::find(v.fullatt_block_indexes.begin(), v.fullatt_block_indexes.end(),
                                                     i) == v.fullatt_block_indexes.end();
      blocks_.push_back(
          register_module("blocks_" + std::to_string(i), std::make_shared<vision_block_impl>(v, windowed)));
    }
    for (std::size_t i = 0; i < deepstack_indexes_.size(); ++i) {
      deepstack_.push_back(register_module("deepstack_merger_" + std::to_string(i),
                                           std::make_shared<patch_merger_impl>(v, true)));
    }
  }

  void freeze(bool vision, bool merger) {
    const auto stop = [](torch::nn::Module& m) {
      for (torch::Tensor& p : m.parameters()) p.requires_grad_(false);
    };
    if (vision) {
      stop(*patch_embed_);
      for (auto& block : blocks_) stop(*block);
    }
    if (merger) {
      stop(*merger_);
      for (auto& d : deepstack_) stop(*d);
    }
  }

  // Activation checkpointing of the ViT blocks: whole blocks (full) or their attention cores (selective).
  void checkpoint_blocks(bool blocks, bool cores, flopmeter::recompute_policy policy) {
    checkpoint_blocks_ = blocks;
    policy_ = policy;
    for (auto& block : blocks_) block->checkpoint_core_ = cores;
  }

  // Returns the merged tokens [merged, out_hidden] followed by one DeepStack feature per index.
  std::vector<torch::Tensor> forward(const torch::Tensor& pixel_patches, const std::vector<image_item>& images) {
    torch::Tensor x;
    {
      VLM_FLOP_SCOPE("patch_embed");
      x = patch_embed_->forward(pixel_patches);
    }
    // Window by window (a gather of whole merged tokens, no matmul); undone on the merged tokens at the end.
    const vision_layout layout = layout_of(images, merge_, window_);
    torch::Tensor restore;
    if (window_ > 0) {
      const torch::Tensor order = torch::tensor(layout.order, torch::TensorOptions().dtype(torch::kInt64));
      const std::int64_t unit = merge_ * merge_;
      x = x.view({-1, unit, x.size(1)}).index_select(0, order.to(x.device())).view({-1, x.size(1)});
      restore = order.argsort().to(x.device());
    }
    const auto in_processor_order = [&](const torch::Tensor& merged) {
      return restore.defined() ? merged.index_select(0, restore) : merged;
    };
    std::vector<torch::Tensor> deepstack(deepstack_indexes_.size());
    for (std::size_t i = 0; i < blocks_.size(); ++i) {
      if (checkpoint_blocks_) {
        const std::shared_ptr<vision_block_impl> block = blocks_[i];
        x = checkpoint(
            [block, layout](const std::vector<torch::Tensor>& in) {
              return block->forward(in[0], layout.frames, layout.windows);
            },
            {x}, block->parameters(), policy_);
      } else {
        x = blocks_[i]->forward(x, layout.frames, layout.windows);
      }
      for (std::size_t d = 0; d < deepstack_indexes_.size(); ++d) {
        if (deepstack_indexes_[d] == static_cast<std::int64_t>(i)) {
          deepstack[d] = in_processor_order(deepstack_[d]->forward(x));
        }
      }
    }
    std::vector<torch::Tensor> out{in_processor_order(merger_->forward(x))};
    out.insert(out.end(), deepstack.begin(), deepstack.end());
    return out;
  }

 private:
  std::int64_t merge_;
  std::int64_t window_;  // Qwen2.5-VL: window edge in merged tokens; 0: no window blocks
  std::vector<std::int64_t> deepstack_indexes_;
  torch::nn::Linear patch_embed_;
  std::vector<std::shared_ptr<vision_block_impl>> blocks_;
  std::shared_ptr<patch_merger_impl> merger_;
  std::vector<std::shared_ptr<patch_merger_impl>> deepstack_;
  bool checkpoint_blocks_ = false;
  flopmeter::recompute_policy policy_ = flopmeter::recompute_policy::full;
};

// ---- the model ---------------------------------------------------------------------------------------------

model_batch to_model_batch(const packed_row& row) {
  model_batch b;
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  const auto n = static_cast<std::int64_t>(row.input_ids.size());
  b.input_ids = torch::from_blob(const_cast<std::int64_t*>(row.input_ids.data()), {n}, i64).clone();
  b.labels = torch::from_blob(const_cast<std::int64_t*>(row.labels.data()), {n}, i64).clone();
  b.document_lengths = row.document_lengths;
  b.padding_tokens = row.padding_tokens;
  b.images = row.images;
  if (!row.images.empty()) {
    const std::int64_t patches = row.patches();
    const auto width = static_cast<std::int64_t>(row.pixel_patches.size()) / patches;
    b.pixel_patches = torch::from_blob(const_cast<float*>(row.pixel_patches.data()), {patches, width},
                                       torch::TensorOptions().dtype(torch::kFloat32))
                          .clone();
    std::vector<std::int64_t> positions;
    for (std::int64_t i = 0; i < n; ++i) {
      if (row.input_ids[static_cast<std::size_t>(i)] == row.image_token_id) positions.push_back(i);
    }
    b.image_positions = torch::tensor(positions, i64);
    std::vector<std::int64_t> grids;
    for (const image_item& image : row.images) grids.insert(grids.end(), {image.t, image.h, image.w});
    b.grid_thw = torch::tensor(grids, i64).view({static_cast<std::int64_t>(row.images.size()), 3});
  }
  std::vector<std::int32_t> cu{0};
  for (const std::int64_t length : row.document_lengths) cu.push_back(cu.back() + static_cast<std::int32_t>(length));
  b.cu_seqlens = torch::tensor(cu, torch::TensorOptions().dtype(torch::kInt32));
  return b;
}

model_batch to_device(model_batch batch, const torch::Device& device) {
  if (device.is_cpu()) return batch;
  for (torch::Tensor* t : {&batch.input_ids, &batch.labels, &batch.pixel_patches, &batch.image_positions,
                           &batch.cu_seqlens, &batch.grid_thw}) {
    if (t->defined()) *t = t->to(device, /*non_blocking=*/true);
  }
  return batch;
}

vlm_model_impl::vlm_model_impl(const flopmeter::model_spec& spec) : spec_(spec) {
  const flopmeter::text_spec& t = spec_.text;
  if (t.num_attention_heads % t.num_key_value_heads != 0 ||
      (t.linear_num_key_heads > 0 && t.linear_num_value_heads % t.linear_num_key_heads != 0)) {
    throw std::invalid_argument("vlm_model: head counts must divide (GQA groups, Gated DeltaNet key heads)");
  }
  if (spec_.vision && spec_.vision->out_hidden_size != t.hidden_size) {
    throw std::invalid_argument("vlm_model: vision out_hidden_size must equal the decoder hidden_size");
  }
  if (spec_.vision &&
      (spec_.vision->cls_token || spec_.vision->projector != flopmeter::vision_projector_kind::patch_merger)) {
    throw std::invalid_argument("vlm_model: only Qwen's vision towers are built (patch merger, no CLS token); got " +
                                spec_.model_type);
  }
  embed_tokens_ = register_parameter("embed_tokens", torch::randn({t.vocab_size, t.hidden_size}) * 0.02);
  lm_head_ = t.tie_word_embeddings ? embed_tokens_
                                   : register_parameter("lm_head", torch::randn({t.vocab_size, t.hidden_size}) * 0.02);
  if (spec_.vision) vision_ = register_module("visual", std::make_shared<vision_tower_impl>(*spec_.vision));
  if (t.is_moe() && (t.num_experts_per_tok < 1 || t.num_experts_per_tok > t.num_experts ||
                     t.moe_intermediate_size < 1 || t.decoder_sparse_step < 1)) {
    throw std::invalid_argument("vlm_model: an MoE spec needs num_experts_per_tok in [1, num_experts], "
                                "moe_intermediate_size >= 1 and decoder_sparse_step >= 1");
  }
  for (std::int64_t i = 0; i < t.num_hidden_layers; ++i) {
    // The MoE layers (model_spec.h): from first_k_dense_replace on, on the decoder_sparse_step stride and not in
    // mlp_only_layers.
    const bool moe = t.is_moe() && i >= t.first_k_dense_replace && (i + 1) % t.decoder_sparse_step == 0 &&
                     std::find(t.mlp_only_layers.begin(), t.mlp_only_layers.end(), i) == t.mlp_only_layers.end();
    layers_.push_back(register_module("layers_" + std::to_string(i),
                                      std::make_shared<decoder_layer_impl>(t, t.layer_type(i), moe)));
  }
  final_norm_ = register_module("norm", std::make_shared<rms_norm_impl>(t.hidden_size));
}

vlm_model_impl::~vlm_model_impl() = default;

int vlm_model_impl::add_lora(std::int64_t rank, const std::vector<std::string>& targets) {
  int added = 0;
  for (auto& layer : layers_) added += layer->add_lora(targets, rank);
  return added;
}

bool vlm_model_impl::checkpointed_layer(std::int64_t i) const {
  if (recompute_.policy == flopmeter::recompute_policy::none) return false;
  if (recompute_.every > 0) return (i + 1) % recompute_.every == 0;
  return recompute_.layers <= 0 || i < recompute_.layers;
}

void vlm_model_impl::set_recompute(const flopmeter::recompute_options& options) {
  using flopmeter::recompute_policy;
  if (options.pipeline_stages != 1) throw std::invalid_argument("vlm_model: one pipeline stage only");
  recompute_ = options;
  const bool selective = options.policy == recompute_policy::selective;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    layers_[i]->checkpoint_attention_core(selective && checkpointed_layer(static_cast<std::int64_t>(i)));
  }
  if (vision_) {
    vision_->checkpoint_blocks(options.vision && !selective && options.policy != recompute_policy::none,
                               options.vision && selective, options.policy);
  }
}

void vlm_model_impl::freeze(bool vision, bool merger, bool text) {
  if (vision_) vision_->freeze(vision, merger);
  if (!text) return;
  embed_tokens_.requires_grad_(false);
  lm_head_.requires_grad_(false);
  for (auto& layer : layers_) {
    for (torch::Tensor& p : layer->parameters()) p.requires_grad_(false);
  }
  for (torch::Tensor& p : final_norm_->parameters()) p.requires_grad_(false);
}

torch::Tensor vlm_model_impl::forward(const model_batch& batch) {
  const std::vector<segment> segments = segments_of(batch);
  torch::Tensor h = F::embedding(batch.input_ids, embed_tokens_);  // a gather, not a matmul
  std::vector<torch::Tensor> deepstack;
  if (vision_ && !batch.images.empty()) {
    std::vector<torch::Tensor> vision_out = vision_->forward(batch.pixel_patches, batch.images);
    // The merged vision tokens replace the placeholders, in order: image i's run holds its merged tokens.
    h = h.index_put({batch.image_positions}, vision_out[0]);
    deepstack.assign(vision_out.begin() + 1, vision_out.end());
  }
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    // Whole layers (full, full_early_stop, op); the selective policy checkpoints the attention cores instead.
    if (checkpointed_layer(static_cast<std::int64_t>(i)) &&
        recompute_.policy != flopmeter::recompute_policy::selective) {
      const std::shared_ptr<decoder_layer_impl> layer = layers_[i];
      h = checkpoint(
          [layer, segments](const std::vector<torch::Tensor>& in) { return layer->forward(in[0], segments); }, {h},
          layer->parameters(), recompute_.policy);
    } else {
      h = layers_[i]->forward(h, segments);
    }
    // DeepStack (Qwen3-VL): feature i is added to the image positions after decoder layer i.
    if (i < deepstack.size()) {
      h = h.index_put({batch.image_positions}, h.index({batch.image_positions}) + deepstack[i]);
    }
  }
  h = final_norm_->forward(h);
  torch::Tensor logits;
  {
    VLM_FLOP_SCOPE("logits");
    logits = F::linear(h, lm_head_);  // [T, vocab], padding included
  }
  return F::cross_entropy(logits, batch.labels,
                          F::CrossEntropyFuncOptions().ignore_index(kIgnoreLabel).reduction(torch::kSum));
}

}  // namespace vlm
