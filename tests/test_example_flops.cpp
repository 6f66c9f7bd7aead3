// FLOPs proven against execution: the matmul work LibTorch actually runs for one training micro-batch of the
// example VLM (examples/vlm), forward and backward, counted independently of flopmeter, then compared with
// flopmeter's FLOP model for the same batch and the same model spec.
//
// How the independent count works (LibTorch 1.13 RecordFunction, /usr/include/ATen/record_function.h):
// - A global observer with needsInputs(true) sees every aten op, every autograd node (BACKWARD_FUNCTION scope)
//   and the model's user scopes "flopmeter_cat:<category>" (examples/vlm/model.h).
// - Counted ops are the leaf matmuls: aten::mm, addmm, bmm, baddbmm, addbmm (2*m*n*k from the input shapes)
//   and aten::convolution / aten::convolution_backward (2 * N * C_out * L_out * C_in/groups * kernel, once per
//   gradient the backward computes, from its output_mask). Only the outermost counted op is counted, so a
//   backend that implements bmm with addmm_ (or a conv with a GEMM) is not counted twice; composites
//   (aten::matmul, aten::linear, aten::conv1d) are never counted themselves: their leaves are.
// - A forward op is attributed to the innermost open category scope. Every op records the autograd sequence
//   number it runs under (RecordFunction::seqNr(), = the seqNr of the node it creates), so the observer maps
//   sequence number -> category during the forward pass; an autograd node's scope ("MmBackward0", ...) carries
//   the same number, and the matmuls it runs are attributed to that category. Backward work is therefore
//   measured, never assumed to be 2x forward.
// - Any matmul-like aten op the observer does not know (mv, dot, a backend conv at top level, ...) and any
//   matmul outside every category fails the test, so nothing is silently left out.
// - The device: FLOPMETER_TEST_DEVICE=cuda runs the model, the batch and the observer's hand-sized ops on the
//   GPU (default: cpu). RecordFunction sees the CUDA ops on the host side exactly like the CPU ones (the
//   autograd engine runs CUDA backward on its device thread; the observer's state is per thread). Asking for
//   cuda where LibTorch sees no GPU fails every test here instead of silently testing the CPU.
//
// The comparison (numbers and the residual analysis: examples/FLOP_AGREEMENT.md):
// - dense terms (decoder projections, SwiGLU, logits, ViT blocks, merger) agree with flopmeter within 0.5%
//   (they agree exactly); padding runs through the model, as flopmeter bills it.
// - text attention: the example computes the masked L x L square per document, flopmeter bills the L(L+1)/2
//   causal pairs; after that documented conversion they agree. ViT attention per temporal patch, (h*w)^2
//   pairs, agrees directly. Sliding-window attention (a qwen2-family variant, w = 5) executes exactly each
//   query's window and agrees with the billed window pairs with no conversion, as does chunked attention
//   (c = 4, each chunk a causal run); MLA (a deepseek_v3-family variant) is a masked square like full attention,
//   at nh*(nope + rope + v) multiply-adds per pair. Qwen2.5-VL's window blocks (a qwen2_5_vl variant) attend
//   inside each window of transformers' get_window_index, (patches in the window)^2 pairs, directly.
// - patch embedding: autograd computes no input gradient for pixel values (they are not trainable), so the
//   executed work is forward + weight gradient, which is what flopmeter bills (4 FLOPs per multiply-add).
// - Gated DeltaNet core: the conv agrees exactly; the delta rule recurrence runs 3 dk x dv products per token
//   and head where Megatron's approximation (flopmeter's) bills 4, and its backward skips the state gradient of
//   the first token, so the measured/billed ratio is just under 3/4. Asserted within [0.5, 1].
#include <ATen/record_function.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "data.h"
#include "flopmeter/flop_model.h"
#include "flopmeter/model_config.h"
#include "checkpoint.h"
#include "model.h"

namespace {

// ---- the observer ------------------------------------------------------------------------------------------

struct category_flops {
  double forward = 0;
  double backward = 0;
  double recompute = 0;  // forward work run again in the backward by activation checkpointing (not in total())
  double total() const { return forward + backward; }
};

std::int64_t product(c10::IntArrayRef sizes, std::size_t from = 0) {
  std::int64_t p = 1;
  for (std::size_t i = from; i < sizes.size(); ++i) p *= sizes[i];
  return p;
}

// FLOPs of one counted op from its inputs; 0 for ops that are not counted. Sets `counted`.
double gemm_flops(const std::string& name, c10::ArrayRef<const c10::IValue> in, bool& counted) {
  counted = true;
  const auto sizes = [&](std::size_t i) { return in.at(i).toTensor().sizes(); };
  if (name == "aten::mm") {  // [m, k] @ [k, n]
    return 2.0 * static_cast<double>(sizes(0)[0] * sizes(0)[1] * sizes(1)[1]);
  }
  if (name == "aten::addmm" || name == "aten::addmm_") {  // bias + [m, k] @ [k, n]
    return 2.0 * static_cast<double>(sizes(1)[0] * sizes(1)[1] * sizes(2)[1]);
  }
  if (name == "aten::bmm") {  // [b, m, k] @ [b, k, n]
    return 2.0 * static_cast<double>(sizes(0)[0] * sizes(0)[1] * sizes(0)[2] * sizes(1)[2]);
  }
  if (name == "aten::baddbmm" || name == "aten::baddbmm_" || name == "aten::addbmm" || name == "aten::addbmm_") {
    return 2.0 * static_cast<double>(sizes(1)[0] * sizes(1)[1] * sizes(1)[2] * sizes(2)[2]);
  }
  if (name == "aten::convolution") {
    // (input [N, C_in, *spatial], weight [C_out, C_in/groups, *kernel], bias, stride, padding, dilation,
    //  transposed, output_padding, groups)
    const auto x = sizes(0);
    const auto w = sizes(1);
    const auto stride = in.at(3).toIntVector();
    const auto padding = in.at(4).toIntVector();
    const auto dilation = in.at(5).toIntVector();
    if (in.at(6).toBool()) throw std::runtime_error("transposed convolution is not counted by this test");
    std::int64_t out_positions = 1;
    for (std::size_t d = 0; d + 2 < x.size(); ++d) {
      const std::int64_t extent = x[d + 2] + 2 * padding[d] - dilation[d] * (w[d + 2] - 1) - 1;
      out_positions *= extent / stride[d] + 1;
    }
    return 2.0 * static_cast<double>(x[0] * w[0] * out_positions * product(w, 1));
  }
  if (name == "aten::convolution_backward") {
    // (grad_output [N, C_out, *out], input, weight, bias_sizes, stride, padding, dilation, transposed,
    //  output_padding, groups, output_mask[3]): the input and the weight gradient each cost one forward.
    const auto g = sizes(0);
    const auto w = sizes(2);
    const auto mask = in.at(10).toBoolList();
    const double one = 2.0 * static_cast<double>(g[0] * w[0] * product(g, 2) * product(w, 1));
    return one * ((mask.get(0) ? 1 : 0) + (mask.get(1) ? 1 : 0));
  }
  counted = false;
  return 0;
}

// Composite ops whose leaves are counted instead.
bool is_composite(const std::string& name) {
  static const std::set<std::string> composites = {"aten::matmul", "aten::linear", "aten::conv1d", "aten::conv2d",
                                                   "aten::conv3d", "aten::einsum", "aten::tensordot"};
  return composites.count(name) > 0;
}

// An aten op that smells of matmul work but is not counted above: the test fails if one runs.
bool looks_like_matmul(const std::string& name) {
  if (name.rfind("aten::", 0) != 0) return false;
  for (const char* part : {"mm", "mv", "dot", "conv", "gemm", "matmul", "linear"}) {
    if (name.find(part) != std::string::npos) return true;
  }
  return false;
}

const std::string kUnattributed = "(unattributed)";

class flop_observer {
 public:
  flop_observer() {
    active_ = this;
    handle_ = at::addGlobalCallback(at::RecordFunctionCallback(&flop_observer::on_start, &flop_observer::on_end)
                                        .needsInputs(true)
                                        .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION,
                                                 at::RecordScope::USER_SCOPE}));
  }
  ~flop_observer() {
    at::removeCallback(handle_);
    active_ = nullptr;
  }
  flop_observer(const flop_observer&) = delete;
  flop_observer& operator=(const flop_observer&) = delete;

  std::map<std::string, category_flops> by_category() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return flops_;
  }
  std::set<std::string> uncounted_ops() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return uncounted_;
  }

 private:
  enum class kind { none, category, backward_node, gemm, recompute };
  struct context final : at::ObserverContext {
    explicit context(kind k) : what(k) {}
    kind what;
  };
  // Per thread: the open forward categories, the categories of the autograd nodes running, and how many
  // counted ops are open (only the outermost is counted).
  // A forward run again inside a backward node (vlm::kRecomputeScope): the backward nodes and the categories
  // open when it started. Its ops are recomputed forward work until a backward node opens inside it.
  struct recompute_frame {
    std::size_t backward_depth;
    std::size_t category_depth;
  };
  struct thread_state {
    std::vector<std::string> categories;
    std::vector<std::string> backward;
    std::vector<std::size_t> backward_category_depth;  // categories open when each backward node started
    std::vector<recompute_frame> recomputes;
    int gemm_depth = 0;
  };
  static thread_state& state() {
    thread_local thread_state s;
    return s;
  }

  static std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
    flop_observer* self = active_;
    if (self == nullptr) return nullptr;
    thread_state& s = state();
    const std::string name = fn.name();
    if (fn.scope() == at::RecordScope::USER_SCOPE) {
      if (name == vlm::kRecomputeScope) {
        s.recomputes.push_back({s.backward.size(), s.categories.size()});
        return std::make_unique<context>(kind::recompute);
      }
      const std::string prefix = vlm::kScopePrefix;
      if (name.rfind(prefix, 0) != 0) return nullptr;
      s.categories.push_back(name.substr(prefix.size()));
      return std::make_unique<context>(kind::category);
    }
    if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
      std::lock_guard<std::mutex> lock(self->mutex_);
      const auto it = self->category_of_seq_.find(fn.seqNr());
      s.backward.push_back(it == self->category_of_seq_.end() || it->second.empty() ? kUnattributed : it->second);
      s.backward_category_depth.push_back(s.categories.size());
      return std::make_unique<context>(kind::backward_node);
    }
    // FUNCTION scope: an aten op (or the engine's evaluate_function wrapper).
    const bool recomputing = !s.recomputes.empty() && s.recomputes.back().backward_depth == s.backward.size();
    const bool in_backward = !s.backward.empty() && !recomputing;
    std::lock_guard<std::mutex> lock(self->mutex_);
    if (!in_backward && fn.seqNr() >= 0) {
      // The last op to run under a sequence number is the one whose autograd node takes it.
      self->category_of_seq_[fn.seqNr()] = s.categories.empty() ? std::string() : s.categories.back();
    }
    bool counted = false;
    const double flops = gemm_flops(name, fn.inputs(), counted);
    if (!counted) {
      if (s.gemm_depth > 0 || !looks_like_matmul(name) || is_composite(name)) return nullptr;
      // Unknown matmul work: reported (the tests fail on it); what it runs inside is not reported again.
      self->uncounted_.insert(name);
      ++s.gemm_depth;
      return std::make_unique<context>(kind::gemm);
    }
    if (s.gemm_depth++ == 0) {
      const bool categorised =
          recomputing ? s.categories.size() > s.recomputes.back().category_depth : !s.categories.empty();
      // A backward node that opens a category scope itself (a checkpoint's saved product, examples/vlm/
      // checkpoint.h: its forward ran under no-grad, so no sequence number names it) is attributed to it.
      const bool own_scope = in_backward && s.categories.size() > s.backward_category_depth.back();
      const std::string category = own_scope     ? s.categories.back()
                                   : in_backward ? s.backward.back()
                                                 : (categorised ? s.categories.back() : kUnattributed);
      category_flops& f = self->flops_[category];
      (in_backward ? f.backward : recomputing ? f.recompute : f.forward) += flops;
    }
    return std::make_unique<context>(kind::gemm);
  }

  static void on_end(const at::RecordFunction&, at::ObserverContext* ctx) {
    if (ctx == nullptr) return;
    thread_state& s = state();
    switch (static_cast<context*>(ctx)->what) {
      case kind::category: s.categories.pop_back(); break;
      case kind::backward_node:
        s.backward.pop_back();
        s.backward_category_depth.pop_back();
        break;
      case kind::gemm: --s.gemm_depth; break;
      case kind::recompute: s.recomputes.pop_back(); break;
      case kind::none: break;
    }
  }

  static inline flop_observer* active_ = nullptr;
  at::CallbackHandle handle_ = 0;
  mutable std::mutex mutex_;
  std::unordered_map<std::int64_t, std::string> category_of_seq_;
  std::map<std::string, category_flops> flops_;
  std::set<std::string> uncounted_;
};

// ---- helpers -----------------------------------------------------------------------------------------------

std::string source_path(const std::string& relative) { return std::string(FLOPMETER_SOURCE_DIR) + "/" + relative; }

// The device under test: $FLOPMETER_TEST_DEVICE ("cpu", the default, or "cuda"). Throws when it names a device
// this LibTorch cannot use.
torch::Device test_device() {
  const char* name = std::getenv("FLOPMETER_TEST_DEVICE");
  const std::string device = (name == nullptr || *name == '\0') ? "cpu" : name;
  if (device == "cpu") return torch::Device(torch::kCPU);
  if (device == "cuda") {
    if (!torch::cuda::is_available()) {
      throw std::runtime_error("FLOPMETER_TEST_DEVICE=cuda but this LibTorch sees no CUDA device");
    }
    return torch::Device(torch::kCUDA, 0);
  }
  throw std::runtime_error("FLOPMETER_TEST_DEVICE must be cpu or cuda, got '" + device + "'");
}

// The first row of the trainer's data stream (from step 1 on) with at least three documents, padding and two
// images of different grids, so every term is exercised.
vlm::packed_row interesting_row(const vlm::data_options& options, const flopmeter::model_spec& spec) {
  for (std::int64_t step = 1; step < 200; ++step) {
    vlm::packed_row row = vlm::make_row(options, spec, 0, step, 0);
    std::set<std::int64_t> grids;
    for (const vlm::image_item& image : row.images) grids.insert(image.t * 10000 + image.h * 100 + image.w);
    if (row.document_lengths.size() >= 3 && row.padding_tokens > 0 && grids.size() >= 2) return row;
  }
  throw std::runtime_error("no row with 3 documents, padding and 2 image grids in 200 steps");
}

// Runs one training micro-batch (forward + backward) under the observer.
struct measurement {
  std::map<std::string, category_flops> flops;
  std::set<std::string> uncounted;
};

measurement measure(const flopmeter::model_spec& spec, const vlm::packed_row& row,
                    const flopmeter::training_regime& regime = {}) {
  const torch::Device device = test_device();
  torch::manual_seed(7);
  vlm::vlm_model model(spec);
  model->to(device);
  model->freeze(regime.vision_frozen, regime.merger_frozen, regime.text_frozen || regime.lora_rank > 0);
  model->set_recompute(regime.recompute);  // activation checkpointing, as the regime bills it
  if (regime.lora_rank > 0) {
    std::vector<std::string> names;
    for (const flopmeter::lora_target target : regime.lora_targets) names.push_back(flopmeter::to_string(target));
    if (model->add_lora(regime.lora_rank, names) == 0) throw std::runtime_error("no LoRA adapter was added");
  }
  const vlm::model_batch batch = vlm::to_device(vlm::to_model_batch(row), device);
  measurement m;
  {
    flop_observer observer;
    torch::Tensor loss = model->forward(batch);
    if (loss.requires_grad()) loss.backward();        // nothing trainable upstream of the loss: forward only
    if (device.is_cuda()) (void)loss.item<double>();  // every kernel has been launched (and has run)
    m.flops = observer.by_category();
    m.uncounted = observer.uncounted_ops();
  }
  return m;
}

double get(const std::map<std::string, category_flops>& f, const std::string& category) {
  const auto it = f.find(category);
  return it == f.end() ? 0.0 : it->second.total();
}

double relative_difference(double measured, double expected) {
  return expected == 0 ? (measured == 0 ? 0 : 1) : measured / expected - 1.0;
}

void print_row(const char* term, double measured, double billed, const char* note) {
  std::printf("  %-34s %16.0f %16.0f %9.4f  %s\n", term, measured, billed, billed > 0 ? measured / billed : 0.0, note);
}

struct batch_facts {
  flopmeter::batch_counts counts;
  flopmeter::flop_breakdown billed;
  std::int64_t sum_l_squared = 0;   // what the masked square computes
};

batch_facts flopmeter_view(const flopmeter::model_spec& spec, const vlm::packed_row& row) {
  std::vector<flopmeter::image_grid> grids;
  for (const vlm::image_item& image : row.images) grids.push_back({image.t, image.h, image.w});
  batch_facts f;
  f.counts = flopmeter::count_from_lengths(row.document_lengths, row.padding_tokens, grids, flopmeter::geometry_of(spec));
  f.billed = flopmeter::compute_flops(flopmeter::compute_coefficients(spec), f.counts, flopmeter::flop_scope::complete);
  for (const std::int64_t l : row.document_lengths) f.sum_l_squared += l * l;
  return f;
}

// flopmeter folds the Gated DeltaNet core into dense_per_token with Megatron's approximation; this is that
// part, per device token (plugin/arch/flop_terms.cpp, gated_deltanet_macs: conv + 4*Hv*dk*dv, x6 for training).
struct gdn_core_billing {
  double conv = 0;
  double delta_rule = 0;
};
gdn_core_billing gdn_core_billed(const flopmeter::model_spec& spec, std::int64_t device_tokens) {
  const flopmeter::text_spec& t = spec.text;
  const double layers = static_cast<double>(t.num_linear_attention_layers());
  const double qk = static_cast<double>(t.linear_num_key_heads * t.linear_key_head_dim);
  const double v = static_cast<double>(t.linear_num_value_heads * t.linear_value_head_dim);
  const double tokens = static_cast<double>(device_tokens);
  gdn_core_billing b;
  b.conv = 6.0 * layers * static_cast<double>(t.linear_conv_kernel_dim) * (2 * qk + v) * tokens;
  b.delta_rule = 6.0 * layers * 4.0 *
                 static_cast<double>(t.linear_num_value_heads * t.linear_key_head_dim * t.linear_value_head_dim) * tokens;
  return b;
}

constexpr double kDenseTolerance = 0.005;  // 0.5%


// ---- tests -------------------------------------------------------------------------------------------------

void expect_all_counted(const measurement& m) {
  EXPECT_TRUE(m.uncounted.empty()) << "matmul-like ops the observer does not count ran: " << *m.uncounted.begin();
  EXPECT_EQ(get(m.flops, kUnattributed), 0.0) << "matmul work outside every flopmeter_cat scope";
}

// Backward is measured, not assumed: a trainable linear layer with a trainable input does dgrad + wgrad
// (2x forward); the patch embedding has no trainable input (1x).
void expect_backward_ratio(const measurement& m, const std::string& category, double ratio) {
  const auto it = m.flops.find(category);
  ASSERT_NE(it, m.flops.end()) << category;
  EXPECT_NEAR(it->second.backward / it->second.forward, ratio, 1e-12) << category;
}

// The instrument itself, on hand-sized ops (FLOPs = 2 x multiply-adds):
//   "a": x[5,8] @ W^T, W [4,8] (aten::linear -> aten::mm)  fwd 2*5*8*4 = 320; bwd dX and dW 2*320 = 640
//   "b": q[2,5,4] @ q^T (aten::matmul -> aten::bmm)          fwd 2*2*5*4*5 = 400; bwd dq twice = 800
//   "c": depthwise conv1d [1,6,10] * [6,1,4], groups 6     fwd 2*6*7*4 = 336; bwd dX + dW = 672
//   no scope: m[3,3] @ m[3,3]                                fwd 54, bwd 108 -> "(unattributed)"
//   aten::mv is matmul work the observer does not count     -> reported as uncounted
// Backward runs in the reverse order of the forward, so a stack-based guess would misattribute; the sequence
// numbers do not.
TEST(ExampleFlops, ObserverAttributesForwardAndBackwardBySequenceNumber) {
  const torch::Device device = test_device();
  std::printf("device: %s\n", device.str().c_str());
  torch::manual_seed(0);
  const auto on = torch::TensorOptions().device(device).requires_grad(true);
  const torch::Tensor x = torch::randn({5, 8}, on);
  const torch::Tensor w = torch::randn({4, 8}, on);
  const torch::Tensor q = torch::randn({2, 5, 4}, on);
  const torch::Tensor signal = torch::randn({1, 6, 10}, on);
  const torch::Tensor kernel = torch::randn({6, 1, 4}, on);
  const torch::Tensor m = torch::randn({3, 3}, on);
  std::map<std::string, category_flops> flops;
  std::set<std::string> uncounted;
  {
    flop_observer observer;
    torch::Tensor a, b, c;
    {
      RECORD_USER_SCOPE("flopmeter_cat:a");
      a = torch::nn::functional::linear(x, w);
    }
    {
      RECORD_USER_SCOPE("flopmeter_cat:b");
      b = torch::matmul(q, q.transpose(1, 2));
    }
    {
      RECORD_USER_SCOPE("flopmeter_cat:c");
      c = torch::nn::functional::conv1d(signal, kernel, torch::nn::functional::Conv1dFuncOptions().groups(6));
    }
    const torch::Tensor d = torch::mm(m, m);
    (a.sum() + b.sum() + c.sum() + d.sum()).backward();
    (void)torch::mv(m.detach(), m.detach()[0]);
    flops = observer.by_category();
    uncounted = observer.uncounted_ops();
  }
  const std::map<std::string, std::pair<double, double>> expected = {
      {"a", {320, 640}}, {"b", {400, 800}}, {"c", {336, 672}}, {kUnattributed, {54, 108}}};
  ASSERT_EQ(flops.size(), expected.size());
  for (const auto& [category, fwd_bwd] : expected) {
    EXPECT_EQ(flops[category].forward, fwd_bwd.first) << category;
    EXPECT_EQ(flops[category].backward, fwd_bwd.second) << category;
  }
  EXPECT_EQ(uncounted, std::set<std::string>{"aten::mv"});
}

TEST(ExampleFlops, TinyVlmMicrobatchMatchesFlopmeter) {
  const flopmeter::model_spec spec = flopmeter::load_model_spec(source_path("model_configs/tiny_vlm.toml"));
  const vlm::data_options options;  // the trainer's defaults: 256-token rows, seed 1234
  const vlm::packed_row row = interesting_row(options, spec);
  const measurement m = measure(spec, row);
  const batch_facts f = flopmeter_view(spec, row);
  const gdn_core_billing gdn = gdn_core_billed(spec, f.counts.device_tokens());
  std::printf("device: %s\n", test_device().str().c_str());

  expect_all_counted(m);
  for (const char* dense : {vlm::kTextAttnProj, vlm::kGdnProj, vlm::kTextMlp, vlm::kLogits, vlm::kVisionDense, vlm::kMerger}) {
    expect_backward_ratio(m, dense, 2.0);
  }
  expect_backward_ratio(m, vlm::kPatchEmbed, 1.0);
  expect_backward_ratio(m, vlm::kTextAttnCore, 2.0);
  expect_backward_ratio(m, vlm::kVisionAttnCore, 2.0);
  expect_backward_ratio(m, vlm::kGdnConv, 2.0);

  const double text_dense = get(m.flops, vlm::kTextAttnProj) + get(m.flops, vlm::kGdnProj) +
                            get(m.flops, vlm::kTextMlp) + get(m.flops, vlm::kLogits);
  const double text_dense_billed = f.billed.text_dense - gdn.conv - gdn.delta_rule;
  // The masked square vs causal pairs: measured pairs sum L^2, billed pairs sum L(L+1)/2.
  const double square_share = static_cast<double>(f.sum_l_squared) / static_cast<double>(f.counts.causal_pairs);
  const double text_attention = get(m.flops, vlm::kTextAttnCore);
  const double vision_dense = get(m.flops, vlm::kVisionDense);
  const double vision_attention = get(m.flops, vlm::kVisionAttnCore);
  const double patch_embed = get(m.flops, vlm::kPatchEmbed);
  const double merger = get(m.flops, vlm::kMerger);
  const double conv = get(m.flops, vlm::kGdnConv);
  const double delta_rule = get(m.flops, vlm::kGdnDeltaRule);
  double measured_total = 0;
  for (const auto& [category, flops] : m.flops) measured_total += flops.total();

  std::printf("batch: %zu documents (", row.document_lengths.size());
  for (const std::int64_t l : row.document_lengths) std::printf(" %lld", static_cast<long long>(l));
  std::printf(" ), padding %lld, images", static_cast<long long>(row.padding_tokens));
  for (const vlm::image_item& image : row.images) {
    std::printf(" %lldx%lldx%lld", static_cast<long long>(image.t), static_cast<long long>(image.h),
                static_cast<long long>(image.w));
  }
  std::printf("\n  device tokens %lld, causal pairs %lld, sum L^2 %lld, patches %lld, merged %lld\n",
              static_cast<long long>(f.counts.device_tokens()), static_cast<long long>(f.counts.causal_pairs),
              static_cast<long long>(f.sum_l_squared), static_cast<long long>(f.counts.patches),
              static_cast<long long>(f.counts.merged_tokens));
  std::printf("  per category (measured fwd / bwd FLOPs):\n");
  for (const auto& [category, flops] : m.flops) {
    std::printf("    %-18s %14.0f %14.0f\n", category.c_str(), flops.forward, flops.backward);
  }
  std::printf("  %-34s %16s %16s %9s\n", "term", "measured", "flopmeter", "ratio");
  print_row("text dense (proj, MLP, logits)", text_dense, text_dense_billed, "dense_per_token minus the GDN core");
  print_row("text attention core", text_attention, f.billed.text_attention, "masked square vs causal pairs");
  print_row("  ... as causal pairs", text_attention / square_share, f.billed.text_attention, "x sum L(L+1)/2 / sum L^2");
  print_row("vision dense", vision_dense, f.billed.vision_dense, "");
  print_row("vision attention core", vision_attention, f.billed.vision_attention, "per temporal patch");
  print_row("patch embedding", patch_embed, f.billed.patch_embed, "no dgrad for pixels");
  print_row("merger", merger, f.billed.merger, "");
  print_row("GDN conv", conv, gdn.conv, "");
  print_row("GDN delta rule", delta_rule, gdn.delta_rule, "3 products vs Megatron's 4");
  print_row("total", measured_total, f.billed.total(), "");
  std::fflush(stdout);

  EXPECT_NEAR(relative_difference(text_dense, text_dense_billed), 0.0, kDenseTolerance);
  EXPECT_NEAR(relative_difference(vision_dense, f.billed.vision_dense), 0.0, kDenseTolerance);
  EXPECT_NEAR(relative_difference(merger, f.billed.merger), 0.0, kDenseTolerance);
  EXPECT_NEAR(relative_difference(patch_embed, f.billed.patch_embed), 0.0, kDenseTolerance);
  EXPECT_NEAR(relative_difference(text_attention / square_share, f.billed.text_attention), 0.0, kDenseTolerance);
  EXPECT_NEAR(relative_difference(vision_attention, f.billed.vision_attention), 0.0, kDenseTolerance);
  EXPECT_NEAR(relative_difference(conv, gdn.conv), 0.0, kDenseTolerance);
  // The delta rule: 3 of Megatron's 4 products, and the first token's state needs no gradient.
  const double delta_ratio = delta_rule / gdn.delta_rule;
  EXPECT_GT(delta_ratio, 0.5);
  EXPECT_LE(delta_ratio, 0.75);

  // Every category the example has is present (a scope that silently stopped firing would hide work).
  for (const char* category : {vlm::kTextAttnProj, vlm::kTextAttnCore, vlm::kGdnProj, vlm::kGdnConv, vlm::kGdnDeltaRule,
                               vlm::kTextMlp, vlm::kLogits, vlm::kPatchEmbed, vlm::kVisionDense, vlm::kVisionAttnCore,
                               vlm::kMerger}) {
    EXPECT_GT(get(m.flops, category), 0.0) << category;
  }
}

// Mixture of experts, proven against execution: the router, the routed experts (dropless top-k dispatch) and
// the shared expert with its gate each run exactly the GEMMs flopmeter bills, forward and backward. Each part
// of dense_per_token (coefficients::dense) times the device tokens is compared with what ran in its scope:
// forward 1/3 of it, backward (dgrad + wgrad) 2/3, ratio 1 to the FLOP. Padding tokens are routed too.
void expect_moe_parts_match(const measurement& m, const flopmeter::coefficients& c, std::int64_t device_tokens,
                            bool shared_expert) {
  struct part {
    const char* category;
    std::int64_t coefficient;
    const char* what;
  };
  const part parts[] = {
      {vlm::kMoeRouter, c.dense.moe_router, "router h x E"},
      {vlm::kMoeRoutedExperts, c.dense.moe_routed_experts, "k experts x 3 h I_moe"},
      {vlm::kMoeSharedExpert, c.dense.moe_shared_expert, "shared expert 3 h I_shared"},
      {vlm::kMoeSharedExpertGate, c.dense.moe_shared_expert_gate, "shared-expert gate h x 1"},
  };
  std::printf("  %-24s %14s %14s %14s %9s %9s %9s\n", "MoE part", "measured fwd", "measured bwd", "flopmeter",
              "fwd/(1/3)", "bwd/(2/3)", "total");
  for (const part& p : parts) {
    const double billed = static_cast<double>(p.coefficient) * static_cast<double>(device_tokens);
    const auto it = m.flops.find(p.category);
    const category_flops measured = it == m.flops.end() ? category_flops{} : it->second;
    std::printf("  %-24s %14.0f %14.0f %14.0f %9.4f %9.4f %9.4f  %s\n", p.category, measured.forward,
                measured.backward, billed, billed > 0 ? measured.forward / (billed / 3) : 0.0,
                billed > 0 ? measured.backward / (2 * billed / 3) : 0.0, billed > 0 ? measured.total() / billed : 0.0,
                p.what);
    const bool present = shared_expert || (std::string(p.category) != vlm::kMoeSharedExpert &&
                                           std::string(p.category) != vlm::kMoeSharedExpertGate);
    if (!present) {
      EXPECT_EQ(billed, 0.0) << p.category;
      EXPECT_EQ(measured.total(), 0.0) << p.category;
      continue;
    }
    ASSERT_GT(billed, 0.0) << p.category;
    // Exact: every count is an integer far below 2^53.
    EXPECT_EQ(measured.forward * 3, billed) << p.category << ": forward";
    EXPECT_EQ(measured.backward * 3, 2 * billed) << p.category << ": backward (dgrad + wgrad)";
  }
  std::fflush(stdout);
}

TEST(ExampleFlops, TinyMoeVlmMicrobatchMatchesFlopmeter) {
  const flopmeter::model_spec spec = flopmeter::load_model_spec(source_path("model_configs/tiny_moe_vlm.toml"));
  const vlm::data_options options;
  const vlm::packed_row row = interesting_row(options, spec);
  const measurement m = measure(spec, row);
  const batch_facts f = flopmeter_view(spec, row);
  const flopmeter::coefficients c = flopmeter::compute_coefficients(spec);
  const gdn_core_billing gdn = gdn_core_billed(spec, f.counts.device_tokens());
  std::printf("device: %s, %lld device tokens\n", test_device().str().c_str(),
              static_cast<long long>(f.counts.device_tokens()));

  expect_all_counted(m);
  EXPECT_EQ(get(m.flops, vlm::kTextMlp), 0.0);  // every layer is an MoE layer: no dense SwiGLU runs
  expect_moe_parts_match(m, c, f.counts.device_tokens(), /*shared_expert=*/true);

  // The rest of the decoder agrees as for the dense model: text dense = projections + MoE + logits.
  const double text_dense = get(m.flops, vlm::kTextAttnProj) + get(m.flops, vlm::kGdnProj) +
                            get(m.flops, vlm::kMoeRouter) + get(m.flops, vlm::kMoeRoutedExperts) +
                            get(m.flops, vlm::kMoeSharedExpert) + get(m.flops, vlm::kMoeSharedExpertGate) +
                            get(m.flops, vlm::kLogits);
  EXPECT_NEAR(relative_difference(text_dense, f.billed.text_dense - gdn.conv - gdn.delta_rule), 0.0, kDenseTolerance);
}

// Qwen3-VL MoE: no shared expert, MoE only every decoder_sparse_step-th layer and not in mlp_only_layers; the
// other layers run a dense SwiGLU of intermediate_size, billed as such.
TEST(ExampleFlops, Qwen3VlMoeVariantWithDenseLayersMatchesFlopmeter) {
  const std::string toml = R"(
[model]
name = "tiny_vl_moe"
model_type = "qwen3_vl_moe"

[text_config]
hidden_size = 48
num_hidden_layers = 4
num_attention_heads = 4
num_key_value_heads = 1
head_dim = 16
intermediate_size = 96
vocab_size = 256
tie_word_embeddings = false
num_experts = 6
num_experts_per_tok = 3
moe_intermediate_size = 24
decoder_sparse_step = 2
mlp_only_layers = [3]
)";
  // Layers 1 and 3 are on the stride; 3 is forced dense: one MoE layer (1), three dense (0, 2, 3).
  const flopmeter::model_spec spec = flopmeter::parse_model_spec(toml, "tiny_vl_moe.toml");
  ASSERT_EQ(spec.text.num_moe_layers(), 1);
  vlm::data_options options;
  options.row_length = 160;
  const vlm::packed_row row = vlm::make_row(options, spec, 0, 1, 0);
  const measurement m = measure(spec, row);
  const batch_facts f = flopmeter_view(spec, row);
  const flopmeter::coefficients c = flopmeter::compute_coefficients(spec);

  expect_all_counted(m);
  expect_moe_parts_match(m, c, f.counts.device_tokens(), /*shared_expert=*/false);
  const double dense_mlp_billed = static_cast<double>(c.dense.dense_mlp) * static_cast<double>(f.counts.device_tokens());
  EXPECT_EQ(get(m.flops, vlm::kTextMlp), dense_mlp_billed);
  const double text_dense = get(m.flops, vlm::kTextAttnProj) + get(m.flops, vlm::kTextMlp) +
                            get(m.flops, vlm::kMoeRouter) + get(m.flops, vlm::kMoeRoutedExperts) +
                            get(m.flops, vlm::kLogits);
  EXPECT_NEAR(relative_difference(text_dense, f.billed.text_dense), 0.0, kDenseTolerance);
}

// A Qwen3-VL-style variant: every layer full attention, no output gate, untied LM head, one DeepStack merger.
const char* const kTinyVlDeepstackToml = R"(
[model]
name = "tiny_vl_deepstack"
model_type = "qwen3_vl"

[text_config]
hidden_size = 48
num_hidden_layers = 2
num_attention_heads = 4
num_key_value_heads = 1
head_dim = 16
intermediate_size = 96
vocab_size = 256
tie_word_embeddings = false

[vision_config]
depth = 2
hidden_size = 32
num_heads = 4
intermediate_size = 48
out_hidden_size = 48
deepstack_visual_indexes = [0]
patch_size = 4
temporal_patch_size = 2
spatial_merge_size = 2
in_channels = 3
)";

// The model is built from the spec: a Qwen3-VL-style variant (every layer full attention, no output gate,
// untied LM head, one DeepStack merger) agrees the same way, the DeepStack merger billed as a second merger.
TEST(ExampleFlops, Qwen3VlStyleVariantMatchesFlopmeter) {
  const std::string toml = kTinyVlDeepstackToml;
  const flopmeter::model_spec spec = flopmeter::parse_model_spec(toml, "tiny_vl_deepstack.toml");
  vlm::data_options options;
  options.row_length = 160;
  const vlm::packed_row row = interesting_row(options, spec);
  const measurement m = measure(spec, row);
  const batch_facts f = flopmeter_view(spec, row);

  expect_all_counted(m);
  EXPECT_EQ(get(m.flops, vlm::kGdnConv) + get(m.flops, vlm::kGdnDeltaRule) + get(m.flops, vlm::kGdnProj), 0.0);
  const double text_dense = get(m.flops, vlm::kTextAttnProj) + get(m.flops, vlm::kTextMlp) + get(m.flops, vlm::kLogits);
  const double square_share = static_cast<double>(f.sum_l_squared) / static_cast<double>(f.counts.causal_pairs);
  EXPECT_NEAR(relative_difference(text_dense, f.billed.text_dense), 0.0, kDenseTolerance);
  EXPECT_NEAR(relative_difference(get(m.flops, vlm::kTextAttnCore) / square_share, f.billed.text_attention), 0.0,
              kDenseTolerance);
  EXPECT_NEAR(relative_difference(get(m.flops, vlm::kVisionDense), f.billed.vision_dense), 0.0, kDenseTolerance);
  EXPECT_NEAR(relative_difference(get(m.flops, vlm::kVisionAttnCore), f.billed.vision_attention), 0.0, kDenseTolerance);
  EXPECT_NEAR(relative_difference(get(m.flops, vlm::kMerger), f.billed.merger), 0.0, kDenseTolerance);
  EXPECT_NEAR(relative_difference(get(m.flops, vlm::kPatchEmbed), f.billed.patch_embed), 0.0,
              kDenseTolerance);
}

// ---- frozen parts, proven against execution ------------------------------------------------------------
//
// For each regime, one micro-batch runs with the frozen parts' weights at requires_grad false, and every term
// flopmeter bills is compared with what autograd executed in that term's scopes, forward and backward apart:
//   billed forward  = the full-training coefficient / 3 x count (the forward is the same in every regime)
//   billed backward = the regime's coefficient x count - billed forward
// Each must be met at ratio 1.0000. Independently of flopmeter's coefficients, the backward / forward ratio
// of each scope is pinned by hand from the rule (forward 1, + input gradient 1 where the input needs one,
// + weight gradient 1 where the weight trains; a weightless core 2 when a gradient flows through it):
//   regime (frozen)       ViT blocks/core  patch embed  merger  decoder GEMMs  decoder cores (attn, delta)
//   vision                0 / 0            0            2       2              2
//   text                  2 / 2            1            2       1              2
//   vision, text          0 / 0            0            2       1              2   (the merger's LayerNorm trains)
//   merger, text          2 / 2            1            1       1              2
//   vision, merger        0 / 0            0            0       2              2
//   text, no items        -                -            -       0              0   (no gradient reaches the decoder)
// The Gated DeltaNet delta rule runs 3 of Megatron's 4 products (see TinyVlmMicrobatchMatchesFlopmeter), so its
// backward is compared with the full-training run's instead: equal where a gradient flows, 0 where none does.
struct regime_case {
  const char* name;
  flopmeter::training_regime regime;
  double vit, patch, merger, decoder_gemm, decoder_core;  // expected backward / forward per scope
};

flopmeter::training_regime frozen(bool vision, bool merger, bool text) {
  flopmeter::training_regime r;
  r.vision_frozen = vision;
  r.merger_frozen = merger;
  r.text_frozen = text;
  return r;
}

const regime_case kRegimes[] = {
    {"vision", frozen(true, false, false), 0, 0, 2, 2, 2},
    {"text", frozen(false, false, true), 2, 1, 2, 1, 2},
    {"vision,text", frozen(true, false, true), 0, 0, 2, 1, 2},
    {"merger,text", frozen(false, true, true), 2, 1, 1, 1, 2},
    {"vision,merger", frozen(true, true, false), 0, 0, 0, 2, 2},
};

// Multiply-adds per token of the LoRA adapters' forward, x A and (x A) B: rank * (d_in + d_out) for every
// adapted projection of every layer (dense SwiGLU layers only for gate/up/down).
double lora_forward_macs_per_token(const flopmeter::model_spec& spec, const flopmeter::training_regime& regime) {
  const flopmeter::text_spec& t = spec.text;
  const double h = static_cast<double>(t.hidden_size), r = static_cast<double>(regime.lora_rank);
  const double q = static_cast<double>(t.num_attention_heads * t.head_dim * (t.attn_output_gate ? 2 : 1));
  const double kv = static_cast<double>(t.num_key_value_heads * t.head_dim);
  const double o = static_cast<double>(t.num_attention_heads * t.head_dim);
  const double qkv = static_cast<double>(2 * t.linear_num_key_heads * t.linear_key_head_dim +
                                         t.linear_num_value_heads * t.linear_value_head_dim);
  const double z = static_cast<double>(t.linear_num_value_heads * t.linear_value_head_dim);
  const double width = static_cast<double>(t.intermediate_size);
  // MLA (t.is_mla(): every attention layer): q_a h -> q_lora_rank, q_b q_lora_rank -> nh*(nope + rope) (or one
  // q_proj h -> nh*(nope + rope)), kv_a h -> kv_lora_rank + rope, kv_b kv_lora_rank -> nh*(nope + v), o nh*v -> h.
  const bool mla = t.is_mla(), q_latent = t.q_lora_rank > 0;
  const double mla_q = static_cast<double>(t.num_attention_heads * (t.qk_nope_head_dim + t.qk_rope_head_dim));
  const double mla_kv_a = static_cast<double>(t.kv_lora_rank + t.qk_rope_head_dim);
  const double mla_kv_b = static_cast<double>(t.num_attention_heads * (t.qk_nope_head_dim + t.v_head_dim));
  const double mla_o = static_cast<double>(t.num_attention_heads * t.v_head_dim);
  const double q_rank = static_cast<double>(t.q_lora_rank), kv_rank = static_cast<double>(t.kv_lora_rank);
  double macs = 0;
  for (std::int64_t i = 0; i < t.num_hidden_layers; ++i) {
    // Softmax attention of any window carries q, k, v, o; a Gated DeltaNet layer in_proj_qkv, in_proj_z, out_proj.
    const bool full = t.layer_type(i) != flopmeter::layer_kind::linear_attention;
    for (const flopmeter::lora_target target : regime.lora_targets) {
      using flopmeter::lora_target;
      const auto add = [&](bool present, double d_in, double d_out) { macs += present ? r * (d_in + d_out) : 0; };
      switch (target) {
        case lora_target::q_proj:
          if (mla)
            add(!q_latent, h, mla_q);
          else
            add(full, h, q);
          break;
        case lora_target::k_proj:
        case lora_target::v_proj: add(full && !mla, h, kv); break;
        case lora_target::o_proj: add(full, mla ? mla_o : o, h); break;
        case lora_target::q_a_proj: add(mla && q_latent, h, q_rank); break;
        case lora_target::q_b_proj: add(mla && q_latent, q_rank, mla_q); break;
        case lora_target::kv_a_proj_with_mqa: add(mla, h, mla_kv_a); break;
        case lora_target::kv_b_proj: add(mla, kv_rank, mla_kv_b); break;
        case lora_target::in_proj_qkv: add(!full, h, qkv); break;
        case lora_target::in_proj_z: add(!full, h, z); break;
        case lora_target::out_proj: add(!full, z, h); break;
        case lora_target::gate_proj:
        case lora_target::up_proj: add(!t.is_moe(), h, width); break;
        case lora_target::down_proj: add(!t.is_moe(), width, h); break;
      }
    }
  }
  return macs;
}

struct term_check {
  const char* term;
  std::vector<const char*> categories;
  double full;    // full-training coefficient x count
  double regime;  // the regime's coefficient x count
  double expected_backward_over_forward;
  double measured_scale = 1;  // the masked square's L^2 over the billed L(L+1)/2 pairs
};

void expect_terms_match(const char* regime_name, const measurement& m, const std::vector<term_check>& checks) {
  std::printf("  regime frozen [%s]\n  %-26s %14s %14s %14s %14s %8s %8s\n", regime_name, "term", "measured fwd",
              "billed fwd", "measured bwd", "billed bwd", "fwd", "bwd");
  for (const term_check& c : checks) {
    category_flops measured;
    for (const char* category : c.categories) {
      const auto it = m.flops.find(category);
      if (it == m.flops.end()) continue;
      measured.forward += it->second.forward / c.measured_scale;
      measured.backward += it->second.backward / c.measured_scale;
    }
    const double billed_forward = c.full / 3, billed_backward = c.regime - c.full / 3;
    const double fwd = billed_forward > 0 ? measured.forward / billed_forward : 1;
    const double bwd = billed_backward > 0 ? measured.backward / billed_backward : (measured.backward == 0 ? 1 : 0);
    std::printf("  %-26s %14.0f %14.0f %14.0f %14.0f %8.4f %8.4f\n", c.term, measured.forward, billed_forward,
                measured.backward, billed_backward, fwd, bwd);
    EXPECT_GT(measured.forward, 0) << regime_name << ": " << c.term;
    EXPECT_NEAR(fwd, 1.0, 1e-9) << regime_name << ": " << c.term << " forward";
    EXPECT_NEAR(bwd, 1.0, 1e-9) << regime_name << ": " << c.term << " backward";
    if (!std::isnan(c.expected_backward_over_forward)) {
      EXPECT_NEAR(measured.backward / measured.forward, c.expected_backward_over_forward, 1e-9)
          << regime_name << ": " << c.term << " backward / forward (the hand-derived rule)";
    }
  }
  std::fflush(stdout);
}

// Activation recomputation: the forward the checkpoints ran again in the backward (the observer's `recompute`
// per category), against flopmeter's recompute coefficients x the row's counts, term by term. Terms flopmeter
// bills no recompute for (logits, patch embedding, merger; a frozen ViT; a policy that leaves them out) must
// have run nothing again. The attention cores compare after the masked square's conversion, as above; the
// Gated DeltaNet delta rule, where it runs again, against its measured forward (3 of Megatron's 4 products).
void check_recompute(const flopmeter::model_spec& spec, const vlm::packed_row& row, const char* name,
                     const flopmeter::recompute_options& options, const measurement& m, const measurement& full_run,
                     const flopmeter::coefficients& c, const batch_facts& f) {
  const flopmeter::coefficients::recompute_terms& r = c.recompute;
  const auto tokens = static_cast<double>(f.counts.device_tokens());
  const auto recomputed = [&](std::initializer_list<const char*> categories, double scale = 1) {
    double sum = 0;
    for (const char* category : categories) {
      const auto it = m.flops.find(category);
      if (it != m.flops.end()) sum += it->second.recompute / scale;
    }
    return sum;
  };
  struct line {
    const char* term;
    double measured, billed;
  };
  std::vector<line> lines = {
      {"attention projections", recomputed({vlm::kTextAttnProj}),
       static_cast<double>(r.dense.attention_projections) * tokens},
      {"dense MLP", recomputed({vlm::kTextMlp}), static_cast<double>(r.dense.dense_mlp) * tokens},
      {"MoE router", recomputed({vlm::kMoeRouter}), static_cast<double>(r.dense.moe_router) * tokens},
      {"MoE routed experts", recomputed({vlm::kMoeRoutedExperts}),
       static_cast<double>(r.dense.moe_routed_experts) * tokens},
      {"MoE shared expert", recomputed({vlm::kMoeSharedExpert}),
       static_cast<double>(r.dense.moe_shared_expert) * tokens},
      {"MoE shared-expert gate", recomputed({vlm::kMoeSharedExpertGate}),
       static_cast<double>(r.dense.moe_shared_expert_gate) * tokens},
      {"LoRA adapters", recomputed({vlm::kLoraAdapters}), static_cast<double>(r.dense.lora_adapters) * tokens},
      {"logits", recomputed({vlm::kLogits}), 0},
      {"patch embedding", recomputed({vlm::kPatchEmbed}), 0},
      {"merger", recomputed({vlm::kMerger}), 0},
  };
  const double square_share = static_cast<double>(f.sum_l_squared) / static_cast<double>(f.counts.causal_pairs);
  lines.push_back({"text attention core", recomputed({vlm::kTextAttnCore}, square_share),
                   static_cast<double>(r.text_attn_pair) * static_cast<double>(f.counts.causal_pairs)});
  // Sliding and chunked cores run exactly their pairs (no masked square); every window in one scope.
  lines.push_back({"windowed attention core", recomputed({vlm::kTextWindowAttnCore}),
                   static_cast<double>(r.window_attn_pair[0]) * static_cast<double>(f.counts.window_pairs_0) +
                       static_cast<double>(r.window_attn_pair[1]) * static_cast<double>(f.counts.window_pairs_1)});
  if (spec.text.num_linear_attention_layers() > 0) {
    // Billed: proj + conv + Megatron's delta rule (4 products where the example runs 3), one forward each where
    // they run again. The delta rule's measured recompute is `share` of its forward.
    const gdn_core_billing gdn = gdn_core_billed(spec, f.counts.device_tokens());
    // The delta rule runs again under every policy but selective, in the checkpointed Gated DeltaNet layers
    // (every one of them runs its backward in these cases).
    const flopmeter::text_spec& t = spec.text;
    double checkpointed = 0;
    for (std::int64_t i = 0; i < t.num_hidden_layers; ++i) {
      const bool chosen = options.every > 0 ? (i + 1) % options.every == 0 : options.layers <= 0 || i < options.layers;
      checkpointed += chosen && t.layer_type(i) == flopmeter::layer_kind::linear_attention ? 1 : 0;
    }
    const double share = options.policy == flopmeter::recompute_policy::selective
                             ? 0.0
                             : checkpointed / static_cast<double>(t.num_linear_attention_layers());
    lines.push_back({"Gated DeltaNet proj + conv", recomputed({vlm::kGdnProj, vlm::kGdnConv}),
                     static_cast<double>(r.dense.linear_attention) * tokens - share * gdn.delta_rule / 3});
    EXPECT_NEAR(recomputed({vlm::kGdnDeltaRule}), share * full_run.flops.at(vlm::kGdnDeltaRule).forward,
                1e-9 * full_run.flops.at(vlm::kGdnDeltaRule).forward)
        << name << ": the delta rule runs again exactly in the layers flopmeter bills again";
  }
  if (!row.images.empty()) {
    lines.push_back({"vision dense", recomputed({vlm::kVisionDense}),
                     static_cast<double>(r.vision_per_patch) * static_cast<double>(f.counts.patches)});
    lines.push_back({"vision attention core", recomputed({vlm::kVisionAttnCore}),
                     static_cast<double>(r.vision_attn_pair) * static_cast<double>(f.counts.vision_pairs_per_frame)});
    lines.push_back(
        {"vision window attention core", recomputed({vlm::kVisionWindowAttnCore}),
         static_cast<double>(r.vision_window_attn_pair) * static_cast<double>(f.counts.vision_window_pairs)});
  }
  std::printf("  %s\n  %-26s %16s %16s %8s\n", name, "term", "recomputed", "billed", "ratio");
  double measured_total = 0, billed_total = 0;
  for (const line& l : lines) {
    std::printf("  %-26s %16.0f %16.0f %8.4f\n", l.term, l.measured, l.billed,
                l.billed > 0 ? l.measured / l.billed : 0);
    measured_total += l.measured;
    billed_total += l.billed;
    if (l.billed > 0) {
      EXPECT_NEAR(l.measured / l.billed, 1.0, 1e-9) << name << ": " << l.term << " recomputed";
    } else {
      EXPECT_EQ(l.measured, 0.0) << name << ": " << l.term << " ran again but flopmeter bills no recompute for it";
    }
  }
  EXPECT_GT(billed_total, 0) << name << ": a recompute case that recomputes nothing tests nothing";
  std::fflush(stdout);
}

// Every term of one row under one regime. `items`: the row has images (the regime's with_items coefficients).
void check_regime(const flopmeter::model_spec& spec, const vlm::packed_row& row, const regime_case& rc,
                  const measurement& full_run) {
  const measurement m = measure(spec, row, rc.regime);
  expect_all_counted(m);
  const batch_facts f = flopmeter_view(spec, row);
  const flopmeter::coefficients full = flopmeter::compute_coefficients(spec);
  const flopmeter::regime_coefficients both = flopmeter::compute_coefficients(spec, rc.regime);
  const bool items = !row.images.empty();
  const flopmeter::coefficients& c = items ? both.with_items : both.without_items;
  const auto tokens = static_cast<double>(f.counts.device_tokens());
  const auto per_token = [&](std::int64_t full_value, std::int64_t regime_value) {
    return std::pair<double, double>{static_cast<double>(full_value) * tokens,
                                     static_cast<double>(regime_value) * tokens};
  };
  std::vector<term_check> checks;
  const auto add = [&](const char* term, std::vector<const char*> categories, std::pair<double, double> billed,
                       double ratio, double scale = 1) {
    if (billed.first == 0) return;  // a part the model does not have
    checks.push_back({term, std::move(categories), billed.first, billed.second, ratio, scale});
  };
  const flopmeter::dense_terms& fd = full.dense;
  const flopmeter::dense_terms& rd = c.dense;
  add("attention projections", {vlm::kTextAttnProj}, per_token(fd.attention_projections, rd.attention_projections),
      rc.decoder_gemm);
  add("dense MLP", {vlm::kTextMlp}, per_token(fd.dense_mlp, rd.dense_mlp), rc.decoder_gemm);
  add("MoE router", {vlm::kMoeRouter}, per_token(fd.moe_router, rd.moe_router), rc.decoder_gemm);
  add("MoE routed experts", {vlm::kMoeRoutedExperts}, per_token(fd.moe_routed_experts, rd.moe_routed_experts),
      rc.decoder_gemm);
  add("MoE shared expert", {vlm::kMoeSharedExpert}, per_token(fd.moe_shared_expert, rd.moe_shared_expert),
      rc.decoder_gemm);
  add("MoE shared-expert gate", {vlm::kMoeSharedExpertGate},
      per_token(fd.moe_shared_expert_gate, rd.moe_shared_expert_gate), rc.decoder_gemm);
  add("logits", {vlm::kLogits}, per_token(fd.logits, rd.logits), rc.decoder_gemm);
  if (fd.linear_attention > 0) {
    // Gated DeltaNet: projections + conv against flopmeter's part less its delta rule (Megatron's 4 products,
    // billed forward 1 + backward 2 where a gradient flows: then the measured delta rule has a backward).
    const gdn_core_billing gdn = gdn_core_billed(spec, f.counts.device_tokens());
    const auto delta = m.flops.find(vlm::kGdnDeltaRule);
    ASSERT_NE(delta, m.flops.end());
    const double delta_passes = rc.decoder_core > 0 ? 3 : 1;
    add("Gated DeltaNet proj + conv", {vlm::kGdnProj, vlm::kGdnConv},
        {static_cast<double>(fd.linear_attention) * tokens - gdn.delta_rule,
         static_cast<double>(rd.linear_attention) * tokens - gdn.delta_rule / 3 * delta_passes},
        rc.decoder_gemm);
    const category_flops& delta_full = full_run.flops.at(vlm::kGdnDeltaRule);
    EXPECT_EQ(delta->second.forward, delta_full.forward) << rc.name << ": delta rule forward";
    EXPECT_EQ(delta->second.backward, rc.decoder_core > 0 ? delta_full.backward : 0.0)
        << rc.name << ": delta rule backward";
  }
  if (rc.regime.lora_rank > 0) {
    // The adapters' forward by hand: r (d_in + d_out) multiply-adds per token and adapted projection.
    const double forward = 2 * tokens * lora_forward_macs_per_token(spec, rc.regime);
    add("LoRA adapters", {vlm::kLoraAdapters}, {3 * forward, static_cast<double>(rd.lora_adapters) * tokens},
        std::nan(""));
  }
  const double square_share = static_cast<double>(f.sum_l_squared) / static_cast<double>(f.counts.causal_pairs);
  const auto pairs = static_cast<double>(f.counts.causal_pairs);
  add("text attention core", {vlm::kTextAttnCore},
      {static_cast<double>(full.text_attn_pair) * pairs, static_cast<double>(c.text_attn_pair) * pairs},
      rc.decoder_core, square_share);
  // Sliding-window and chunked layers: the example executes exactly the pairs inside each query's window or
  // chunk (no masked square), so the billed window pairs are compared with no conversion. Every window's layers run in the one
  // kTextWindowAttnCore scope, so the windows' terms are summed.
  const flopmeter::vision_geometry geometry = flopmeter::geometry_of(spec);
  const std::int64_t window_pairs[flopmeter::kMaxAttentionWindows] = {f.counts.window_pairs_0, f.counts.window_pairs_1};
  std::pair<double, double> window_billed{0, 0};
  for (std::int64_t k = 0; k < geometry.window_count; ++k) {
    const auto n = static_cast<double>(window_pairs[k]);
    window_billed.first += static_cast<double>(full.window_attn_pair[k]) * n;
    window_billed.second += static_cast<double>(c.window_attn_pair[k]) * n;
  }
  add("windowed attention core", {vlm::kTextWindowAttnCore}, window_billed, rc.decoder_core);
  if (window_billed.first == 0) {
    EXPECT_EQ(get(m.flops, vlm::kTextWindowAttnCore), 0.0);
  }
  if (items) {
    const auto patches = static_cast<double>(f.counts.patches);
    add("vision dense", {vlm::kVisionDense},
        {static_cast<double>(full.vision_per_patch) * patches, static_cast<double>(c.vision_per_patch) * patches},
        rc.vit);
    const auto vision_pairs = static_cast<double>(f.counts.vision_pairs_per_frame);
    add("vision attention core", {vlm::kVisionAttnCore},
        {static_cast<double>(full.vision_attn_pair) * vision_pairs,
         static_cast<double>(c.vision_attn_pair) * vision_pairs},
        rc.vit);
    // Qwen2.5-VL's window blocks: each window's (patches in it)^2 pairs, executed exactly (no mask).
    const auto vision_window_pairs = static_cast<double>(f.counts.vision_window_pairs);
    add("vision window attention core", {vlm::kVisionWindowAttnCore},
        {static_cast<double>(full.vision_window_attn_pair) * vision_window_pairs,
         static_cast<double>(c.vision_window_attn_pair) * vision_window_pairs},
        rc.vit);
    if (full.vision_window_attn_pair == 0) {
      EXPECT_EQ(get(m.flops, vlm::kVisionWindowAttnCore), 0.0);
    }
    // The patch embedding's full-training coefficient is already forward + weight gradient (x4, not x6): its
    // forward is half of it.
    add("patch embedding", {vlm::kPatchEmbed},
        {static_cast<double>(full.patch_embed_per_patch) * patches * 3 / 2,
         static_cast<double>(c.patch_embed_per_patch) * patches},
        rc.patch);
    const auto merged = static_cast<double>(f.counts.merged_tokens);
    add("merger", {vlm::kMerger},
        {static_cast<double>(full.merger_per_merged_token) * merged,
         static_cast<double>(c.merger_per_merged_token) * merged},
        rc.merger);
  } else {
    for (const char* vision :
         {vlm::kVisionDense, vlm::kVisionAttnCore, vlm::kVisionWindowAttnCore, vlm::kPatchEmbed, vlm::kMerger}) {
      EXPECT_EQ(get(m.flops, vision), 0.0) << vision;
    }
  }
  expect_terms_match(rc.name, m, checks);
  if (rc.regime.recompute.policy != flopmeter::recompute_policy::none) {
    check_recompute(spec, row, rc.name, rc.regime.recompute, m, full_run, c, f);
  }
}

// A row of the trainer's stream without any image or video (the same 160-token rows, another seed).
vlm::packed_row row_without_items(vlm::data_options options, const flopmeter::model_spec& spec) {
  for (std::int64_t step = 1; step < 400; ++step) {
    vlm::packed_row row = vlm::make_row(options, spec, 0, step, 0);
    if (row.images.empty() && row.document_lengths.size() >= 2) return row;
  }
  throw std::runtime_error("no row without images in 400 steps");
}

void check_every_regime(const flopmeter::model_spec& spec, const vlm::data_options& options) {
  const vlm::packed_row row = interesting_row(options, spec);
  const measurement full_run = measure(spec, row);
  for (const regime_case& rc : kRegimes) check_regime(spec, row, rc, full_run);
  // A frozen decoder under a trainable vision side: a row without images runs its text forward only.
  const vlm::packed_row text_row = row_without_items(options, spec);
  const measurement text_full_run = measure(spec, text_row);
  check_regime(spec, text_row, {"text (a row without images)", frozen(false, false, true), 0, 0, 0, 0, 0},
               text_full_run);
}

// LoRA (rank 4) with the vision side frozen, as PEFT freezes it: `targets` on every layer that has them.
// The per-scope backward / forward ratio differs between layer 0 (its input needs no gradient: base
// projections forward only, A forward + weight gradient) and the others, so only the billed terms are compared
// (the hand derivation is in tests/test_flop_model.cpp, regime.lora_layer_zero_has_no_input_gradient_...).
void check_lora(const flopmeter::model_spec& spec, const vlm::data_options& options,
                std::vector<flopmeter::lora_target> targets) {
  const vlm::packed_row row = interesting_row(options, spec);
  const measurement full_run = measure(spec, row);
  regime_case rc{"vision,merger + LoRA", frozen(true, true, false), 0, 0, 0, std::nan(""), 2};
  rc.regime.lora_rank = 4;
  rc.regime.lora_targets = std::move(targets);
  check_regime(spec, row, rc, full_run);
}

TEST(ExampleFlops, LoraQwen35TypeEveryTermMatchesForwardAndBackward) {
  using flopmeter::lora_target;
  const flopmeter::model_spec spec = flopmeter::load_model_spec(source_path("model_configs/tiny_vlm.toml"));
  check_lora(spec, vlm::data_options{},
             {lora_target::q_proj, lora_target::k_proj, lora_target::v_proj, lora_target::o_proj,
              lora_target::gate_proj, lora_target::up_proj, lora_target::down_proj, lora_target::in_proj_qkv,
              lora_target::in_proj_z, lora_target::out_proj});
}

TEST(ExampleFlops, LoraMoeAttentionTargetsEveryTermMatchesForwardAndBackward) {
  using flopmeter::lora_target;
  const flopmeter::model_spec spec = flopmeter::load_model_spec(source_path("model_configs/tiny_moe_vlm.toml"));
  check_lora(spec, vlm::data_options{},
             {lora_target::q_proj, lora_target::k_proj, lora_target::v_proj, lora_target::o_proj,
              lora_target::in_proj_qkv, lora_target::in_proj_z, lora_target::out_proj});
}

// Qwen3.5-type (Gated DeltaNet + gated attention, tiny_vlm.toml).
TEST(ExampleFlops, FrozenPartsQwen35TypeEveryTermMatchesForwardAndBackward) {
  const flopmeter::model_spec spec = flopmeter::load_model_spec(source_path("model_configs/tiny_vlm.toml"));
  check_every_regime(spec, vlm::data_options{});
}

// Qwen3-VL-type (every layer full attention, a DeepStack merger): every regime, and LoRA on the attention and
// MLP projections, where layer 0's q, k, v, gate and up run without an input gradient.
TEST(ExampleFlops, FrozenPartsAndLoraQwen3VlTypeEveryTermMatchesForwardAndBackward) {
  using flopmeter::lora_target;
  const flopmeter::model_spec spec = flopmeter::parse_model_spec(kTinyVlDeepstackToml, "tiny_vl_deepstack.toml");
  vlm::data_options options;
  options.row_length = 160;
  check_every_regime(spec, options);
  check_lora(spec, options,
             {lora_target::q_proj, lora_target::k_proj, lora_target::v_proj, lora_target::o_proj,
              lora_target::gate_proj, lora_target::up_proj, lora_target::down_proj});
}

// Mixture of experts (router, routed experts, shared expert and gate: tiny_moe_vlm.toml).
TEST(ExampleFlops, FrozenPartsMoeEveryTermMatchesForwardAndBackward) {
  const flopmeter::model_spec spec = flopmeter::load_model_spec(source_path("model_configs/tiny_moe_vlm.toml"));
  check_every_regime(spec, vlm::data_options{});
}

// ---- activation recomputation ------------------------------------------------------------------------------
// The example checkpoints its blocks for real (examples/vlm/checkpoint.h: forward under no-grad, then again with
// grad in the backward). Each case runs one micro-batch and checks, term by term: the model FLOPs (first forward
// and backward) still match the regime's coefficients (recomputation changes no model FLOP), and the forward
// run again matches flopmeter's recompute coefficients (check_recompute), at ratio 1.0000.

flopmeter::training_regime with_recompute(flopmeter::training_regime r, flopmeter::recompute_policy policy,
                                          std::int64_t every, bool vision) {
  r.recompute.policy = policy;
  r.recompute.every = every;
  r.recompute.vision = vision;
  return r;
}

void check_recompute_cases(const flopmeter::model_spec& spec, const vlm::data_options& options) {
  using flopmeter::recompute_policy;
  const vlm::packed_row row = interesting_row(options, spec);
  const measurement full_run = measure(spec, row);
  const flopmeter::training_regime trains_all;
  const regime_case cases[] = {
      {"full, every layer and ViT block", with_recompute(trains_all, recompute_policy::full, 0, true), 2, 1, 2, 2, 2},
      {"full, every 2nd layer", with_recompute(trains_all, recompute_policy::full, 2, false), 2, 1, 2, 2, 2},
      {"selective, every layer and ViT block", with_recompute(trains_all, recompute_policy::selective, 0, true), 2, 1,
       2, 2, 2},
      {"op, every layer and ViT block", with_recompute(trains_all, recompute_policy::op, 0, true), 2, 1, 2, 2, 2},
      {"full_early_stop, every layer and ViT block",
       with_recompute(trains_all, recompute_policy::full_early_stop, 0, true), 2, 1, 2, 2, 2},
      {"op, every 2nd layer, frozen [text]", with_recompute(frozen(false, false, true), recompute_policy::op, 2, true),
       2, 1, 2, 1, 2},
      // A frozen ViT runs no backward: nothing of it is recomputed, recompute_vision or not.
      {"full, frozen [vision]", with_recompute(frozen(true, false, false), recompute_policy::full, 0, true), 0, 0, 2, 2,
       2},
      // A frozen decoder still runs its backward (input gradients to the images): recomputed.
      {"full, frozen [text]", with_recompute(frozen(false, false, true), recompute_policy::full, 0, true), 2, 1, 2, 1,
       2},
      {"selective, frozen [vision, text]",
       with_recompute(frozen(true, false, true), recompute_policy::selective, 0, true), 0, 0, 2, 1, 2},
  };
  for (const regime_case& rc : cases) check_regime(spec, row, rc, full_run);
}

// LoRA (vision side frozen, as PEFT freezes it): layer 0's input needs no gradient, but its adapters train, so
// the checkpoint's backward runs and the whole layer runs again.
void check_recompute_lora(const flopmeter::model_spec& spec, const vlm::data_options& options,
                          std::vector<flopmeter::lora_target> targets) {
  using flopmeter::recompute_policy;
  const vlm::packed_row row = interesting_row(options, spec);
  const measurement full_run = measure(spec, row);
  for (const auto& [name, policy, every] :
       {std::tuple{"LoRA, full, every layer", recompute_policy::full, 0},
        std::tuple{"LoRA, full, every 2nd layer", recompute_policy::full, 2},
        std::tuple{"LoRA, selective", recompute_policy::selective, 0}, std::tuple{"LoRA, op", recompute_policy::op, 0},
        std::tuple{"LoRA, full_early_stop", recompute_policy::full_early_stop, 0}}) {
    regime_case rc{name, with_recompute(frozen(true, true, false), policy, every, false), 0, 0, 0, std::nan(""), 2};
    rc.regime.lora_rank = 4;
    rc.regime.lora_targets = targets;
    check_regime(spec, row, rc, full_run);
  }
}

TEST(ExampleFlops, RecomputeQwen3VlTypeEveryRecomputedTermMatches) {
  using flopmeter::lora_target;
  const flopmeter::model_spec spec = flopmeter::parse_model_spec(kTinyVlDeepstackToml, "tiny_vl_deepstack.toml");
  vlm::data_options options;
  options.row_length = 160;
  check_recompute_cases(spec, options);
  check_recompute_lora(spec, options,
                       {lora_target::q_proj, lora_target::k_proj, lora_target::v_proj, lora_target::o_proj,
                        lora_target::gate_proj, lora_target::up_proj, lora_target::down_proj});
}

TEST(ExampleFlops, RecomputeQwen35TypeEveryRecomputedTermMatches) {
  using flopmeter::lora_target;
  const flopmeter::model_spec spec = flopmeter::load_model_spec(source_path("model_configs/tiny_vlm.toml"));
  check_recompute_cases(spec, vlm::data_options{});
  check_recompute_lora(spec, vlm::data_options{},
                       {lora_target::q_proj, lora_target::in_proj_qkv, lora_target::out_proj});
}

TEST(ExampleFlops, RecomputeMoeEveryRecomputedTermMatches) {
  const flopmeter::model_spec spec = flopmeter::load_model_spec(source_path("model_configs/tiny_moe_vlm.toml"));
  check_recompute_cases(spec, vlm::data_options{});
}

// ---- sliding-window attention, proven against execution ------------------------------------------------
//
// A Qwen2.5-style decoder (text only) with use_sliding_window and max_window_layers = 1: layer 0 attends to its
// whole document, layers 1 and 2 to the last 5 keys (transformers' Qwen2 rule: layer i slides when
// i >= max_window_layers). Head dim 48 / 4 = 12, two kv heads (GQA groups of 2).
const char* const kTinyQwen2WindowToml = R"(
[model]
name = "tiny_qwen2_window"
model_type = "qwen2"

[text_config]
hidden_size = 48
num_hidden_layers = 3
num_attention_heads = 4
num_key_value_heads = 2
intermediate_size = 96
vocab_size = 256
tie_word_embeddings = false
use_sliding_window = true
sliding_window = 5
max_window_layers = 1
)";

// Short documents (2 to 12 tokens in 96-token rows), so a row holds documents shorter than, as long as and
// longer than the window of 5.
vlm::data_options window_options() {
  vlm::data_options options;
  options.row_length = 96;
  options.min_document_length = 2;
  options.max_document_length = 12;
  return options;
}

// The first row of that stream with a document shorter than `window`, one longer, and padding.
vlm::packed_row row_around_window(const vlm::data_options& options, const flopmeter::model_spec& spec,
                                  std::int64_t window) {
  for (std::int64_t step = 1; step < 200; ++step) {
    vlm::packed_row row = vlm::make_row(options, spec, 0, step, 0);
    bool shorter = false, longer = false;
    for (const std::int64_t l : row.document_lengths) {
      shorter = shorter || l < window;
      longer = longer || l > window;
    }
    if (shorter && longer && row.padding_tokens > 0) return row;
  }
  throw std::runtime_error("no row with documents on both sides of the window in 200 steps");
}

// Pairs of one document under a sliding window w, by brute force over (query, key): i - w < j <= i.
std::int64_t brute_force_window_pairs(std::int64_t length, std::int64_t w) {
  std::int64_t pairs = 0;
  for (std::int64_t i = 0; i < length; ++i) {
    for (std::int64_t j = 0; j <= i; ++j) pairs += (i - w < j) ? 1 : 0;
  }
  return pairs;
}

// Full training, and LoRA (rank 4) on every attention and MLP projection of every layer (nothing else trains).
void check_full_training_and_lora(const flopmeter::model_spec& spec, const vlm::packed_row& row,
                                  const measurement& full_run) {
  using flopmeter::lora_target;
  check_regime(spec, row, {"none (full training)", frozen(false, false, false), 0, 0, 0, 2, 2}, full_run);
  regime_case lora{"LoRA on every projection", frozen(false, false, false), 0, 0, 0, std::nan(""), 2};
  lora.regime.lora_rank = 4;
  lora.regime.lora_targets = {lora_target::q_proj,    lora_target::k_proj,  lora_target::v_proj,   lora_target::o_proj,
                              lora_target::gate_proj, lora_target::up_proj, lora_target::down_proj};
  check_regime(spec, row, lora, full_run);
}

// Every term, forward and backward, at ratio 1.0000: full training, and LoRA (rank 4) on every attention and
// MLP projection of every layer, sliding ones included (nothing else trains; layer 0's base projections run
// without an input gradient, so only the billed terms are compared, as for the other LoRA variants).
TEST(ExampleFlops, SlidingWindowQwen2TypeEveryTermMatchesForwardAndBackward) {
  const flopmeter::model_spec spec = flopmeter::parse_model_spec(kTinyQwen2WindowToml, "tiny_qwen2_window.toml");
  ASSERT_EQ(spec.text.layer_type(0), flopmeter::layer_kind::full_attention);
  ASSERT_EQ(spec.text.layer_type(1), flopmeter::layer_kind::sliding_attention);
  ASSERT_EQ(spec.text.layer_type(2), flopmeter::layer_kind::sliding_attention);
  const vlm::data_options options = window_options();
  const vlm::packed_row row = row_around_window(options, spec, 5);
  const batch_facts f = flopmeter_view(spec, row);

  // flopmeter's window count against the brute force, and the executed core against it by hand:
  // 2 sliding layers x (QK^T + PV: 2 x nh*hd = 96 multiply-adds) x 2 FLOPs per pair forward, x2 backward
  // (each product's two input gradients).
  std::int64_t pairs = 0;
  std::printf("documents:");
  for (const std::int64_t l : row.document_lengths) {
    pairs += brute_force_window_pairs(l, 5);
    std::printf(" %lld", static_cast<long long>(l));
  }
  std::printf(", padding %lld; window pairs %lld (causal pairs %lld)\n", static_cast<long long>(row.padding_tokens),
              static_cast<long long>(pairs), static_cast<long long>(f.counts.causal_pairs));
  ASSERT_EQ(f.counts.window_pairs_0, pairs);
  ASSERT_LT(pairs, f.counts.causal_pairs);
  const measurement full_run = measure(spec, row);
  expect_all_counted(full_run);
  const category_flops window = full_run.flops.at(vlm::kTextWindowAttnCore);
  EXPECT_EQ(window.forward, 2.0 * 2 * 96 * static_cast<double>(pairs));
  EXPECT_EQ(window.backward, 2 * window.forward);

  check_full_training_and_lora(spec, row, full_run);
}

// ---- multi-head latent attention, proven against execution ---------------------------------------------
//
// A DeepSeek-V3-style decoder (text only): MLA on every layer (4 heads, q_lora_rank 24 or none, kv_lora_rank 16,
// nope 8, rope 4, v 12), layer 0 a dense SwiGLU (first_k_dense_replace = 1), layers 1 and 2 MoE blocks (6
// experts, top-2, width 24) with 2 ungated shared experts (one SwiGLU of 48). `q_lora` is the q_lora_rank line.
std::string tiny_deepseek_toml(const std::string& q_lora) {
  return R"(
[model]
name = "tiny_deepseek_v3"
model_type = "deepseek_v3"

[text_config]
hidden_size = 48
num_hidden_layers = 3
num_attention_heads = 4
num_key_value_heads = 4
intermediate_size = 96
vocab_size = 256
tie_word_embeddings = false
)" + q_lora +
         R"(
kv_lora_rank = 16
qk_nope_head_dim = 8
qk_rope_head_dim = 4
v_head_dim = 12
moe_intermediate_size = 24
n_routed_experts = 6
num_experts_per_tok = 2
n_shared_experts = 2
first_k_dense_replace = 1
)";
}

// Every term, forward and backward, at ratio 1.0000 under full training and with LoRA (rank 4) on every MLA
// projection (a frozen decoder leaves nothing to train in a text-only model). The MLA projections and core are
// also pinned by hand, independently of flopmeter's coefficients:
//   projections per token and layer (multiply-adds): with q_lora_rank 24: q_a 48*24 = 1,152 + q_b 24*4*12 =
//   1,152; without: q_proj 48*4*12 = 2,304; then kv_a 48*(16 + 4) = 960, kv_b 16*4*(8 + 12) = 1,280, o 4*12*48 =
//   2,304: 6,848 either way; forward 2 FLOPs each, x3 layers.
//   core per (query, key) pair and layer: QK^T 4*(8 + 4) = 48 + PV 4*12 = 48 = 96 multiply-adds; the example
//   executes the masked square (sum L^2 pairs), forward 2 FLOPs each, x3 layers.
TEST(ExampleFlops, MlaDeepSeekV3TypeEveryTermMatchesForwardAndBackward) {
  for (const std::string q_lora : {"q_lora_rank = 24", "q_lora_rank = \"none\""}) {
    SCOPED_TRACE(q_lora);
    const flopmeter::model_spec spec = flopmeter::parse_model_spec(tiny_deepseek_toml(q_lora), "tiny_deepseek_v3.toml");
    ASSERT_TRUE(spec.text.is_mla());
    ASSERT_EQ(spec.text.num_moe_layers(), 2);
    vlm::data_options options;
    options.row_length = 160;
    const vlm::packed_row row = row_without_items(options, spec);
    const batch_facts f = flopmeter_view(spec, row);
    const measurement full_run = measure(spec, row);
    expect_all_counted(full_run);
    const auto tokens = static_cast<double>(f.counts.device_tokens());
    EXPECT_EQ(full_run.flops.at(vlm::kTextAttnProj).forward, 2.0 * 3 * 6848 * tokens);
    EXPECT_EQ(full_run.flops.at(vlm::kTextAttnCore).forward, 2.0 * 3 * 96 * static_cast<double>(f.sum_l_squared));
    std::printf("MLA, %s: %zu documents, padding %lld\n", q_lora.c_str(), row.document_lengths.size(),
                static_cast<long long>(row.padding_tokens));
    check_regime(spec, row, {"none (full training)", frozen(false, false, false), 0, 0, 0, 2, 2}, full_run);
    // LoRA on every projection MLA has (PEFT's names; the model's MoE and dense MLPs get none). Layer 0's base
    // GEMMs run without an input gradient, so only the billed terms are compared.
    using flopmeter::lora_target;
    regime_case lora{"LoRA on the MLA projections", frozen(false, false, false), 0, 0, 0, std::nan(""), 2};
    lora.regime.lora_rank = 4;
    lora.regime.lora_targets = {lora_target::kv_a_proj_with_mqa, lora_target::kv_b_proj, lora_target::o_proj};
    for (const lora_target q : spec.text.q_lora_rank > 0 ? std::vector{lora_target::q_a_proj, lora_target::q_b_proj}
                                                         : std::vector{lora_target::q_proj}) {
      lora.regime.lora_targets.push_back(q);
    }
    check_regime(spec, row, lora, full_run);
  }
}

// ---- chunked attention, proven against execution ---------------------------------------------------------
//
// No shipped family has chunked layers yet (Llama 4's attention_chunk_size), so the spec is the Qwen2 decoder
// above with its layers set in code: layer 0 full, layer 1 sliding (w = 5), layer 2 chunked (c = 4): a model
// with two windows, each counted into its own window_pairs_k.

// Pairs of one document under chunks of c, by brute force: query i attends keys j <= i of its own chunk.
std::int64_t brute_force_chunk_pairs(std::int64_t length, std::int64_t c) {
  std::int64_t pairs = 0;
  for (std::int64_t i = 0; i < length; ++i) {
    for (std::int64_t j = 0; j <= i; ++j) pairs += (i / c == j / c) ? 1 : 0;
  }
  return pairs;
}

// Every term, forward and backward, at ratio 1.0000 (full training and LoRA on every projection), and the
// executed core pinned by hand: the chunked and the sliding layer each run 96 multiply-adds per pair
// (QK^T + PV: 2 x nh*hd = 2 x 48), forward 2 FLOPs each, backward 2x the forward.
TEST(ExampleFlops, ChunkedAttentionEveryTermMatchesForwardAndBackward) {
  using flopmeter::layer_kind;
  flopmeter::model_spec spec = flopmeter::parse_model_spec(kTinyQwen2WindowToml, "tiny_qwen2_chunked.toml");
  spec.text.layer_runs = {
      {layer_kind::full_attention, 1}, {layer_kind::sliding_attention, 1}, {layer_kind::chunked_attention, 1}};
  spec.text.attention_chunk_size = 4;
  flopmeter::validate_model_spec(spec);
  ASSERT_EQ(spec.text.layer_type(2), layer_kind::chunked_attention);
  const flopmeter::vision_geometry geometry = flopmeter::geometry_of(spec);
  ASSERT_EQ(geometry.window_count, 2);
  const vlm::data_options options = window_options();
  const vlm::packed_row row = row_around_window(options, spec, 5);
  const batch_facts f = flopmeter_view(spec, row);

  std::int64_t sliding = 0, chunked = 0;
  std::printf("documents:");
  for (const std::int64_t l : row.document_lengths) {
    sliding += brute_force_window_pairs(l, 5);
    chunked += brute_force_chunk_pairs(l, 4);
    std::printf(" %lld", static_cast<long long>(l));
  }
  std::printf(", padding %lld; sliding pairs %lld, chunk pairs %lld (causal pairs %lld)\n",
              static_cast<long long>(row.padding_tokens), static_cast<long long>(sliding),
              static_cast<long long>(chunked), static_cast<long long>(f.counts.causal_pairs));
  const std::int64_t counted[] = {f.counts.window_pairs_0, f.counts.window_pairs_1};
  for (std::int64_t k = 0; k < 2; ++k) {
    const bool is_chunk = geometry.windows[k].kind == flopmeter::window_kind::chunked;
    EXPECT_EQ(geometry.windows[k].size, is_chunk ? 4 : 5);
    EXPECT_EQ(counted[k], is_chunk ? chunked : sliding) << "window " << k;
  }
  ASSERT_LT(chunked, f.counts.causal_pairs);
  const measurement full_run = measure(spec, row);
  expect_all_counted(full_run);
  const category_flops window = full_run.flops.at(vlm::kTextWindowAttnCore);
  EXPECT_EQ(window.forward, 2.0 * 96 * static_cast<double>(sliding + chunked));
  EXPECT_EQ(window.backward, 2 * window.forward);

  check_full_training_and_lora(spec, row, full_run);
  // The selective policy runs the windowed and chunked cores again.
  check_regime(
      spec, row,
      {"selective, every layer",
       with_recompute(frozen(false, false, false), flopmeter::recompute_policy::selective, 0, false), 2, 1, 2, 2, 2},
      full_run);
}

// ---- Qwen2.5-VL's windowed ViT, proven against execution ------------------------------------------------
//
// A tiny Qwen2.5-VL: a Qwen2 decoder and a 3-block ViT (width 32, 4 heads, gated SiLU MLP of 40, RMSNorm),
// patches of 4 pixels, merge 2, window_size 16 = 2 x 2 merged tokens (4 x 4 patches) a side; block 1 attends to
// the whole frame (fullatt_block_indexes = [1]), blocks 0 and 2 inside the windows.
const char* const kTinyQwen25VlToml = R"(
[model]
name = "tiny_qwen2_5_vl"
model_type = "qwen2_5_vl"

[text_config]
hidden_size = 48
num_hidden_layers = 2
num_attention_heads = 4
num_key_value_heads = 2
intermediate_size = 96
vocab_size = 256
tie_word_embeddings = false

[vision_config]
depth = 3
hidden_size = 32
num_heads = 4
intermediate_size = 40
out_hidden_size = 48
patch_size = 4
temporal_patch_size = 2
spatial_merge_size = 2
in_chans = 3
window_size = 16
fullatt_block_indexes = [1]
)";

// Images drawn from grids the window does and does not divide, with and without t > 1 (in patches; the merged
// grid is h/2 x w/2, the window 2 x 2 merged tokens):
//   1x6x4  merged 3 x 2: windows 2x2, 1x2 (an edge window)
//   2x6x6  merged 3 x 3 per frame: windows 2x2, 2x1, 1x2, 1x1, two frames
//   2x4x4  merged 2 x 2: one window per frame, two frames
//   1x4x8  merged 2 x 4: two whole windows
vlm::data_options windowed_vit_options() {
  vlm::data_options options;
  options.row_length = 160;
  options.image_grids = {{1, 6, 4, 0, 0}, {2, 6, 6, 0, 0}, {2, 4, 4, 0, 0}, {1, 4, 8, 0, 0}};
  return options;
}

bool window_divides(const vlm::image_item& image, std::int64_t merge, std::int64_t window) {
  return (image.h / merge) % window == 0 && (image.w / merge) % window == 0;
}

// The first row of that stream with an item the window does not divide, an item with t > 1, two grids, padding.
vlm::packed_row row_with_edge_windows_and_video(const vlm::data_options& options, const flopmeter::model_spec& spec) {
  for (std::int64_t step = 1; step < 400; ++step) {
    vlm::packed_row row = vlm::make_row(options, spec, 0, step, 0);
    bool edge = false, video = false;
    std::set<std::int64_t> grids;
    for (const vlm::image_item& image : row.images) {
      edge = edge || !window_divides(image, 2, 2);
      video = video || image.t > 1;
      grids.insert(image.t * 10000 + image.h * 100 + image.w);
    }
    if (edge && video && grids.size() >= 2 && row.padding_tokens > 0) return row;
  }
  throw std::runtime_error("no row with an edge window, a video and two grids in 400 steps");
}

// Window pairs of one item by brute force over (query, key) patches of each frame: both in the same window,
// a patch's window being (row / (m v), column / (m v)) of its position in the h x w grid.
std::int64_t brute_force_vision_window_pairs(const vlm::image_item& image, std::int64_t merge, std::int64_t window) {
  const std::int64_t edge = merge * window;  // a window's side in patches
  std::int64_t pairs = 0;
  for (std::int64_t a = 0; a < image.h * image.w; ++a) {
    for (std::int64_t b = 0; b < image.h * image.w; ++b) {
      const bool same = (a / image.w) / edge == (b / image.w) / edge && (a % image.w) / edge == (b % image.w) / edge;
      pairs += same ? 1 : 0;
    }
  }
  return image.t * pairs;
}

// Every term, forward and backward, at ratio 1.0000 in every regime (frozen parts, LoRA, recomputation), and the
// ViT pinned by hand, independently of flopmeter's coefficients:
//   window core  2 window blocks x (QK^T + PV: 2 x 32 = 64 multiply-adds per pair) x window pairs, forward 2
//                FLOPs each, backward 2x
//   frame core   1 block x 64 x sum t (h w)^2
//   dense        per patch and block qkv 32*96 = 3,072 + proj 32*32 = 1,024 + gate, up, down 3 x 32*40 = 3,840
//                = 7,936 multiply-adds, x3 blocks, forward 2 FLOPs each
TEST(ExampleFlops, WindowedVitQwen25VlTypeEveryTermMatchesForwardAndBackward) {
  using flopmeter::lora_target;
  const flopmeter::model_spec spec = flopmeter::parse_model_spec(kTinyQwen25VlToml, "tiny_qwen2_5_vl.toml");
  ASSERT_TRUE(spec.vision);
  ASSERT_EQ(spec.vision->num_window_blocks(), 2);
  const vlm::data_options options = windowed_vit_options();
  const vlm::packed_row row = row_with_edge_windows_and_video(options, spec);
  const batch_facts f = flopmeter_view(spec, row);

  std::int64_t window_pairs = 0, frame_pairs = 0;
  std::printf("items:");
  for (const vlm::image_item& image : row.images) {
    window_pairs += brute_force_vision_window_pairs(image, 2, 2);
    frame_pairs += image.t * (image.h * image.w) * (image.h * image.w);
    std::printf(" %lldx%lldx%lld%s", static_cast<long long>(image.t), static_cast<long long>(image.h),
                static_cast<long long>(image.w), window_divides(image, 2, 2) ? "" : " (edge windows)");
  }
  std::printf("; window pairs %lld, frame pairs %lld\n", static_cast<long long>(window_pairs),
              static_cast<long long>(frame_pairs));
  ASSERT_EQ(f.counts.vision_window_pairs, window_pairs);
  ASSERT_EQ(f.counts.vision_pairs_per_frame, frame_pairs);
  ASSERT_LT(window_pairs, frame_pairs);

  const measurement full_run = measure(spec, row);
  expect_all_counted(full_run);
  const category_flops window = full_run.flops.at(vlm::kVisionWindowAttnCore);
  const category_flops frame = full_run.flops.at(vlm::kVisionAttnCore);
  EXPECT_EQ(window.forward, 2.0 * 2 * 64 * static_cast<double>(window_pairs));
  EXPECT_EQ(window.backward, 2 * window.forward);
  EXPECT_EQ(frame.forward, 2.0 * 1 * 64 * static_cast<double>(frame_pairs));
  EXPECT_EQ(full_run.flops.at(vlm::kVisionDense).forward, 2.0 * 3 * 7936 * static_cast<double>(f.counts.patches));

  // Full training, every frozen-parts regime, the text-only row, LoRA and the recompute policies (the ViT blocks
  // and their window cores checkpointed with recompute_vision).
  check_regime(spec, row, {"none (full training)", frozen(false, false, false), 2, 1, 2, 2, 2}, full_run);
  for (const regime_case& rc : kRegimes) check_regime(spec, row, rc, full_run);
  const vlm::packed_row text_row = row_without_items(options, spec);
  check_regime(spec, text_row, {"text (a row without images)", frozen(false, false, true), 0, 0, 0, 0, 0},
               measure(spec, text_row));
  regime_case lora{"vision,merger + LoRA", frozen(true, true, false), 0, 0, 0, std::nan(""), 2};
  lora.regime.lora_rank = 4;
  lora.regime.lora_targets = {lora_target::q_proj,    lora_target::k_proj,  lora_target::v_proj,   lora_target::o_proj,
                              lora_target::gate_proj, lora_target::up_proj, lora_target::down_proj};
  check_regime(spec, row, lora, full_run);
  check_recompute_cases(spec, options);
}

}  // namespace
