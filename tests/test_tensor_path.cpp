// The LibTorch tensor path: tensors copied to the host and counted by the host counter give the host path's
// counts exactly, malformed tensors are refused and counted, and a 2-rank Gloo job fed tensors reports
// bit-identical FLOPs to the same job fed host descriptions.
#include "flopmeter/torch.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "flopmeter/c10d.h"
#include "flopmeter/error.h"
#include "flopmeter/hooks.h"
#include "flopmeter/model_config.h"
#include "gloo_harness.h"
#include "support/capture_sink.h"
#include "support/json_reading.h"
#include "support/small_models.h"

namespace flopmeter {
namespace {

using testing::capture_sink;
using testing::small_vlm;


at::Tensor longs(const std::vector<std::int64_t>& values) {
  return at::tensor(values, at::TensorOptions().dtype(at::kLong));
}
at::Tensor grids(const std::vector<image_grid>& g) {
  std::vector<std::int64_t> flat;
  for (const image_grid& x : g) flat.insert(flat.end(), {x.t, x.h, x.w});
  return longs(flat).view({static_cast<std::int64_t>(g.size()), 3});
}
// The device of the counting tests: $FLOPMETER_TEST_DEVICE ("cpu", the default, or "cuda" on a GPU machine:
// scripts/gpu_check.sh). The counts are formed where the tensors live; the multi-rank tests stay on Gloo.
at::Device test_device() {
  const char* name = std::getenv("FLOPMETER_TEST_DEVICE");
  const std::string device = (name == nullptr || *name == '\0') ? "cpu" : name;
  if (device != "cpu" && device != "cuda") throw std::runtime_error("FLOPMETER_TEST_DEVICE must be cpu or cuda");
  return device == "cpu" ? at::Device(at::kCPU) : at::Device(at::kCUDA, 0);
}
at::Tensor dev_longs(const std::vector<std::int64_t>& values) { return longs(values).to(test_device()); }
at::Tensor dev_grids(const std::vector<image_grid>& g) { return grids(g).to(test_device()); }

// What the tensor path counted of `batches` in one 1 s interval of a one-rank Gloo job over `spec`: the
// record's train/flops_seen (the exact FLOPs of the interval's counts, rounded once), tokens_seen, and health.
// The counting tests below compare it with the host counter's counts of the same arrays: exact_total_flops of
// them (FLOPs are linear in every count, so equal FLOPs over varied batches say the counts are the same).
struct one_interval {
  std::optional<double> flops_seen;
  double tokens_seen = -1;
  throughput_health health;
};
one_interval count_through_tensor_path(const model_spec& spec, const std::vector<tensor_microbatch>& batches) {
  one_interval out;
  flopmeter_test::run_gloo_ranks(1, [&](int, c10::intrusive_ptr<c10d::ProcessGroup> group) {
    auto sink = std::make_shared<capture_sink>();
    throughput_options o;
    o.model = spec;
    o.peak_tflops_per_gpu = 1e-3;
    o.sinks = {sink};
    auto clock = std::make_shared<double>(0.0);
    o.clock_seconds = [clock] { return *clock; };
    auto plugin = tensor_throughput::create(o, std::move(group), test_device());
    for (const tensor_microbatch& b : batches) plugin->on_microbatch(b);
    *clock = 1.0;
    log_event l;
    l.step = 1;
    plugin->on_log(l);
    plugin->flush();
    if (!sink->records.empty()) {
      if (const double* f = sink->records[0].find("train/flops_seen")) out.flops_seen = *f;
      out.tokens_seen = *sink->records[0].find("train/tokens_seen");
    }
    out.health = plugin->health();
  });
  return out;
}
// The host counter's exact FLOPs of `counts` in full training, as the record rounds them.
double host_flops(const model_spec& spec, const batch_counts& counts) {
  return std::stod(exact_total_flops(compute_coefficients(spec), counts, throughput_options{}.scope));
}
double host_flops(const model_spec& spec, const std::vector<batch_counts>& counts) {
  batch_counts sum;
  for (const batch_counts& c : counts) sum += c;
  return host_flops(spec, sum);
}

TEST(tensor_path, device_counts_equal_host_counts) {
  const model_spec spec = small_vlm();
  const vision_geometry g = geometry_of(spec);
  std::printf("device: %s\n", test_device().str().c_str());
  const std::vector<image_grid> items = {{1, 2, 2}, {2, 4, 2}, {3, 8, 6}};
  // int32 cu_seqlens as flash-attention uses them; the path widens them to int64.
  tensor_microbatch by_cu;
  by_cu.cu_seqlens = dev_longs({0, 3, 4, 8, 8, 10}).to(at::kInt);
  by_cu.grid_thw = dev_grids(items).to(at::kInt);
  by_cu.padding_tokens = 5;
  const std::vector<std::int64_t> cu = {0, 3, 4, 8, 8, 10};
  // Without images its text work is itemless (what a frozen decoder bills forward only), as on the host path:
  // 10 + 5 device tokens; documents of 3, 1, 4, 0, 2 tokens: 6 + 1 + 10 + 0 + 3 = 20 pairs.
  tensor_microbatch text_only = by_cu;
  text_only.grid_thw = at::Tensor();
  const batch_counts text_counts = count_from_cu_seqlens(cu, 5, {}, g);
  EXPECT_EQ(text_counts.itemless_device_tokens, 15);
  EXPECT_EQ(text_counts.itemless_causal_pairs, 20);
  EXPECT_EQ(count_from_cu_seqlens(cu, 5, items, g).itemless_device_tokens, 0);

  tensor_microbatch by_positions;
  const std::vector<std::int64_t> positions = {0, 1, 2, 0, 0, 1, 2, 3, 0, 1};
  by_positions.positions = dev_longs(positions);
  by_positions.grid_thw = dev_grids(items);
  by_positions.padding_tokens = 5;
  const batch_counts from_positions = count_from_positions(positions, 5, items, g);
  // By hand: pairs 6 + 1 + 10 + 3 = 20; patches 4 + 16 + 144 = 164; per frame 16 + 2*64 + 3*48^2 = 7056.
  EXPECT_EQ(from_positions.causal_pairs, 20);
  EXPECT_EQ(from_positions.patches, 164);
  EXPECT_EQ(from_positions.vision_pairs_per_frame, 7056);

  for (const auto& [batch, counts] : std::vector<std::pair<tensor_microbatch, batch_counts>>{
           {by_cu, count_from_cu_seqlens(cu, 5, items, g)}, {text_only, text_counts}, {by_positions, from_positions}}) {
    const one_interval got = count_through_tensor_path(spec, {batch});
    EXPECT_EQ(got.health.bad_microbatches, 0u);
    ASSERT_TRUE(got.flops_seen);
    EXPECT_EQ(*got.flops_seen, host_flops(spec, counts));
    EXPECT_EQ(got.tokens_seen, static_cast<double>(counts.real_tokens));
  }
}

// The vision counts of the newer towers through the tensor path equal the host's: Qwen2.5-VL's window pairs
// (grids whose merged grid is not a multiple of the window, a video of 3 frames), InternViT's CLS tokens (and an
// item that is not a whole tile, refused as on the host), Gemma 3's image-block pairs.
TEST(tensor_path, vision_counts_of_the_new_families_equal_host_counts) {
  const std::string data = std::string(FLOPMETER_SOURCE_DIR) + "/tests/data/vlm/";
  const std::pair<const char*, std::vector<image_grid>> cases[] = {
      {"qwen2.5-vl-3b-instruct.json", {{1, 36, 50}, {3, 16, 16}, {2, 6, 10}}},
      {"internvl3-8b-hf-partial.json", {{1, 32, 32}, {5, 32, 32}}},
      {"gemma-3-4b-it.json", {{1, 64, 64}, {3, 64, 64}}}};
  for (const auto& [file, items] : cases) {
    const model_spec spec = load_model_spec(data + file);
    const vision_geometry g = geometry_of(spec);
    tensor_microbatch b;
    b.cu_seqlens = dev_longs({0, 700, 1000});
    b.grid_thw = dev_grids(items);
    const batch_counts host = count_from_cu_seqlens(std::vector<std::int64_t>{0, 700, 1000}, 0, items, g);
    EXPECT_GT(host.vision_window_pairs + host.vision_cls_tokens + host.image_block_pairs, 0) << file;
    const one_interval got = count_through_tensor_path(spec, {b});
    EXPECT_EQ(got.health.bad_microbatches, 0u) << file;
    ASSERT_TRUE(got.flops_seen) << file;
    EXPECT_EQ(*got.flops_seen, host_flops(spec, host)) << file;
    if (g.segment_side > 0) {
      b.grid_thw = dev_grids({{1, g.segment_side, g.segment_side - 2}});
      EXPECT_EQ(count_through_tensor_path(spec, {b}).health.bad_microbatches, 1u) << file;
    }
  }
}

// Attention windows through the tensor path: the same counts as the host path (which a brute-force per-pair
// test checks, test_positions_scan.cpp), for cu_seqlens and int32 positions, with and without images, on a model
// with a sliding and a chunked window. By hand for the cu_seqlens batch, documents 3, 1, 4, 0, 2 under sliding 2:
// (1+2+2) + 1 + (1+2+2+2) + 0 + (1+2) = 16; chunked 3: (1+2+3) + 1 + (1+2+3 + 1) + 0 + (1+2) = 17.
TEST(tensor_path, window_counts_equal_host_counts) {
  vision_geometry g = geometry_of(small_vlm());
  g.window_count = 2;
  g.windows[0] = {window_kind::sliding, 2};
  g.windows[1] = {window_kind::chunked, 3};
  const std::vector<std::int64_t> cu = {0, 3, 4, 8, 8, 10};
  const batch_counts by_hand = count_from_cu_seqlens(cu, 0, {}, g);
  EXPECT_EQ(by_hand.window_pairs_0, 16);
  EXPECT_EQ(by_hand.window_pairs_1, 17);
  EXPECT_EQ(by_hand.itemless_window_pairs_0, 16);
  // A model whose layers carry those windows: the tensor path counts with the model's own geometry.
  const std::string data = std::string(FLOPMETER_SOURCE_DIR) + "/tests/data/vlm/";
  const model_spec spec = load_model_spec(data + "gemma-3-4b-it.json");
  const vision_geometry model_g = geometry_of(spec);
  ASSERT_GT(model_g.window_count, 0);
  const std::vector<std::int64_t> positions = {0, 1, 2, 0, 0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6};
  const std::vector<image_grid> items = {{1, 64, 64}};
  for (const bool with_items : {false, true}) {
    tensor_microbatch by_cu;
    by_cu.cu_seqlens = dev_longs(cu);
    by_cu.padding_tokens = 2;
    tensor_microbatch by_positions;
    by_positions.positions = dev_longs(positions).to(at::kInt);
    if (with_items) by_cu.grid_thw = by_positions.grid_thw = dev_grids(items);
    const array_view<image_grid> grid_view = with_items ? array_view<image_grid>(items) : array_view<image_grid>();
    const std::vector<batch_counts> host = {count_from_cu_seqlens(cu, 2, grid_view, model_g),
                                            count_from_positions(positions, 0, grid_view, model_g)};
    const one_interval got = count_through_tensor_path(spec, {by_cu, by_positions});
    EXPECT_EQ(got.health.bad_microbatches, 0u);
    ASSERT_TRUE(got.flops_seen);
    EXPECT_EQ(*got.flops_seen, host_flops(spec, host)) << with_items;
  }
}

// The tensor path accepts every document the host path accepts (up to 2^32 - 1 tokens, whose pair count still
// fits int64) and refuses the next length, as the host path does: it is the host path's counter. 3,037,000,500
// tokens is the first length whose L(L+1) overflows int64 (the pair count is formed halving first); its pairs
// are 3,037,000,500 * 3,037,000,501 / 2 = 4,611,686,020,018,625,250 by hand (> 2^53 = 9,007,199,254,740,992).
TEST(tensor_path, documents_up_to_the_host_paths_limit_are_counted) {
  const model_spec spec = small_vlm();
  const vision_geometry g = geometry_of(spec);
  for (const std::int64_t length : {std::int64_t{3037000500}, (std::int64_t{1} << 32) - 1}) {
    tensor_microbatch batch;
    batch.cu_seqlens = dev_longs({0, length});
    const std::vector<std::int64_t> cu = {0, length};
    EXPECT_GT(count_from_cu_seqlens(cu, 0, {}, g).causal_pairs, std::int64_t{1} << 53) << length;
    // Counted, not refused; its interval's pairs are beyond the 2^53 a row carries exactly, so the interval is
    // skipped by every rank, as on the host path.
    const one_interval got = count_through_tensor_path(spec, {batch});
    EXPECT_EQ(got.health.bad_microbatches, 0u) << length;
    EXPECT_EQ(got.health.skipped_intervals, 1u) << length;
  }
  EXPECT_EQ(count_from_cu_seqlens(std::vector<std::int64_t>{0, 3037000500}, 0, {}, g).causal_pairs,
            4611686020018625250);
  tensor_microbatch too_long;
  too_long.cu_seqlens = dev_longs({0, std::int64_t{1} << 32});
  EXPECT_EQ(count_through_tensor_path(spec, {too_long}).health.bad_microbatches, 1u);
  EXPECT_THROW(count_from_cu_seqlens(std::vector<std::int64_t>{0, std::int64_t{1} << 32}, 0, {}, g), error);
}

// Each malformed batch is one refused micro-batch (health().bad_microbatches), whether its fault is in the
// tensors' values (found when counted) or in what the host knows (refused before any copy).
TEST(tensor_path, malformed_tensors_are_refused_and_counted) {
  const model_spec spec = small_vlm();
  tensor_microbatch decreasing;
  decreasing.cu_seqlens = dev_longs({0, 5, 4});
  tensor_microbatch not_from_zero;
  not_from_zero.cu_seqlens = dev_longs({2, 5});
  tensor_microbatch jumping;
  jumping.positions = dev_longs({0, 1, 3, 0, 2});  // 3 and 2 break their runs
  tensor_microbatch bad_grids;
  bad_grids.grid_thw = dev_grids({{1, 0, 2}, {1, 3, 2}, {1, 2, 2}, {1000000, 1000000, 1000000}});
  tensor_microbatch both;
  both.cu_seqlens = dev_longs({0, 2});
  both.positions = dev_longs({0, 1});
  tensor_microbatch good;
  good.cu_seqlens = dev_longs({0, 7});
  for (const tensor_microbatch& bad : {decreasing, not_from_zero, jumping, bad_grids, both}) {
    const one_interval got = count_through_tensor_path(spec, {good, bad});
    EXPECT_EQ(got.health.bad_microbatches, 1u);
    EXPECT_EQ(got.tokens_seen, 7.0);  // the good batch's only
  }
  tensor_microbatch text_only_with_grid;
  text_only_with_grid.grid_thw = dev_grids({{1, 2, 2}});
  model_spec text_model = spec;
  text_model.vision.reset();
  EXPECT_EQ(count_through_tensor_path(text_model, {text_only_with_grid}).health.bad_microbatches, 1u);
}

struct rank_run {
  std::vector<metrics_record> records;
  throughput_health health;
};

// Ends a rank's interval: the log of step 1 at t = 1 s, then flush; what the rank's sink got and its health.
rank_run end_of_step_one(tensor_throughput& plugin, const capture_sink& sink, double& clock) {
  clock = 1.0;
  log_event l;
  l.step = 1;
  plugin.on_log(l);
  plugin.flush();
  return {sink.records, plugin.health()};
}

// The options every two-rank run here uses: small_vlm, a 1 GFLOP/s peak, every rank emitting into `sink`,
// the clock read from `clock`.
throughput_options two_rank_options(const std::shared_ptr<capture_sink>& sink, const std::shared_ptr<double>& clock) {
  throughput_options o;
  o.model = small_vlm();
  o.peak_tflops_per_gpu = 1e-3;
  o.emit = emit_ranks::all;
  o.sinks = {sink};
  o.clock_seconds = [clock] { return *clock; };
  return o;
}

// One rank's plugin over `group`: tensor_throughput when fed tensors, else a plain plugin fed host lengths.
struct rank_plugin {
  std::shared_ptr<tensor_throughput> tensor;
  std::shared_ptr<throughput_plugin> host;

  rank_plugin(bool tensors, const throughput_options& o, c10::intrusive_ptr<c10d::ProcessGroup> group) {
    if (tensors) {
      tensor = tensor_throughput::create(o, std::move(group), c10::Device(c10::kCPU));
    } else {
      host = throughput_plugin::create(o, make_c10d_communicator(std::move(group)));
    }
  }
  void on_log(const log_event& l) { tensor ? tensor->on_log(l) : host->on_log(l); }
  // Flushes and returns what the rank emitted and its health.
  rank_run finish(const capture_sink& sink) {
    if (tensor) {
      tensor->flush();
      return {sink.records, tensor->health()};
    }
    host->flush();
    return {sink.records, host->health()};
  }
};

// Two Gloo ranks run the same three micro-batches per rank in a 2 s interval, either as tensors through
// tensor_throughput or as host lengths through a plain plugin.
std::vector<rank_run> run_two_ranks(bool tensors, bool add_malformed) {
  std::vector<rank_run> out(2);
  flopmeter_test::run_gloo_ranks(2, [&](int rank, c10::intrusive_ptr<c10d::ProcessGroup> group) {
    auto sink = std::make_shared<capture_sink>();
    auto clock = std::make_shared<double>(0.0);
    const throughput_options o = two_rank_options(sink, clock);
    const std::vector<std::vector<std::int64_t>> docs = {{100 + rank, 28}, {4000}, {7, 7, 7 * rank + 1}};
    const std::vector<image_grid> items = {{2, 4, 6}, {1, 2, 2}};
    rank_plugin plugin(tensors, o, group);
    for (const auto& lengths : docs) {
      if (tensors) {
        std::vector<std::int64_t> cu = {0};
        for (const std::int64_t l : lengths) cu.push_back(cu.back() + l);
        tensor_microbatch b;
        b.cu_seqlens = longs(cu);
        b.grid_thw = grids(items);
        b.padding_tokens = 3;
        b.samples = 1;
        plugin.tensor->on_microbatch(b);
      } else {
        microbatch_event e;
        e.document_lengths = lengths;
        e.grid_thw = items;
        e.padding_tokens = 3;
        e.samples = 1;
        plugin.host->on_microbatch(e);
      }
    }
    if (add_malformed && tensors) {
      tensor_microbatch bad;
      bad.cu_seqlens = longs({0, 9, 3});
      plugin.tensor->on_microbatch(bad);
    }
    *clock = 2.0;
    log_event l;
    l.step = 5;
    plugin.on_log(l);
    out[static_cast<std::size_t>(rank)] = plugin.finish(*sink);
  });
  return out;
}

TEST(tensor_path, bit_identical_flops_to_the_host_path) {
  const auto by_tensor = run_two_ranks(true, false);
  const auto by_host = run_two_ranks(false, false);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(by_tensor[static_cast<std::size_t>(r)].records.size(), 1u);
    ASSERT_EQ(by_host[static_cast<std::size_t>(r)].records.size(), 1u);
    const metrics_record& t = by_tensor[static_cast<std::size_t>(r)].records[0];
    const metrics_record& h = by_host[static_cast<std::size_t>(r)].records[0];
    for (const char* name :
         {"perf/tflops_per_second", "perf/mfu", "perf/tflops_per_second_megatron", "perf/mfu_megatron",
          "perf/tokens_per_second", "train/batch_efficiency", "train/tokens_seen", "train/num_samples"}) {
      ASSERT_NE(t.find(name), nullptr) << name;
      EXPECT_EQ(*t.find(name), *h.find(name)) << name;  // bit-identical, not merely close
    }
    // Real tokens: rank 0 has (100 + 28) + 4000 + (7 + 7 + 1) = 4143, rank 1 (101 + 28) + 4000 + (7 + 7 + 8)
    // = 4151; 8294 over 2 s.
    EXPECT_DOUBLE_EQ(*t.find("perf/tokens_per_second"), 4147.0);
    // train/flops_seen: the tensor path counts with the host counter, so both paths give the exact total
    // (small_vlm, small_models.h). Per micro-batch the items (2, 4, 6) and (1, 2, 2) are 48 + 4 = 52 patches,
    // 12 + 1 = 13 merged tokens, 2 x 24^2 + 4^2 = 1168 pairs per frame: 768 x 52 + 48 x 1168 + 64 x 52 +
    // 2304 x 13 = 129,280 vision FLOPs; the text is 7392 per device token (real + 3 padding) and 192 per causal pair:
    //   rank 0: 4143 + 9 = 4152 device tokens; pairs 5050 + 406 + 8,002,000 + 28 + 28 + 1 = 8,007,513;
    //   rank 1: 4151 + 9 = 4160 device tokens; pairs 5151 + 406 + 8,002,000 + 28 + 28 + 36 = 8,007,649;
    //   7392 x (4152 + 4160) + 192 x (8,007,513 + 8,007,649) + 6 x 129,280 = 61,442,304 + 3,074,911,104 +
    //   775,680 = 3,137,129,088.
    ASSERT_NE(t.find("train/flops_seen"), nullptr);
    EXPECT_EQ(*t.find("train/flops_seen"), 3137129088.0);
    EXPECT_EQ(*t.find("train/flops_seen"), *h.find("train/flops_seen"));
  }
}

// train/flops_seen past 2^53 on the tensor path, with host and device micro-batches in one rank's row, in a full
// training and a frozen-decoder regime (whose micro-batches without images take the itemless counts'
// coefficients). Two Gloo ranks, three intervals. Rank 0 runs one tensor document of L = 100,000,001
// tokens per interval; rank 1 one of L + 2 tokens, described on the host in intervals 1 and 3 and as a tensor in
// interval 2. Per document of n tokens
// (small_vlm, no images; small_models.h and test_flop_model's regime tests):
//   full training: F(n) = 7392 n + 192 n(n+1)/2: F(L) + F(L+2) = 960,000,768,000,007,584 +
//   960,000,806,400,023,328 = 1,920,001,574,400,030,912;
//   decoder frozen: G(n) = 2464 n + 64 n(n+1)/2 (the coefficients of a micro-batch without images):
//   G(L) + G(L+2) = 640,000,524,800,010,304.
// After interval k the figure is k x that sum, rounded once to double (spacing 256 there): full 1,920,001,574,
// 400,030,976, 3,840,003,148,800,061,952, 5,760,004,723,200,093,184; frozen 640,000,524,800,010,240,
// 1,280,001,049,600,020,480, 1,920,001,574,400,030,976.
TEST(tensor_path, flops_seen_is_exact_past_two_to_the_53_for_device_and_host_microbatches) {
  const std::int64_t length = 100000001;
  struct regime_case {
    bool frozen_text;
    double expected[3];
  };
  const regime_case cases[] = {
      {false, {1920001574400030976.0, 3840003148800061952.0, 5760004723200093184.0}},
      {true, {640000524800010240.0, 1280001049600020480.0, 1920001574400030976.0}},
  };
  for (const regime_case& c : cases) {
    std::vector<rank_run> out(2);
    flopmeter_test::run_gloo_ranks(2, [&](int rank, c10::intrusive_ptr<c10d::ProcessGroup> group) {
      auto sink = std::make_shared<capture_sink>();
      auto clock = std::make_shared<double>(0.0);
      throughput_options o = two_rank_options(sink, clock);
      if (c.frozen_text) add_frozen_part(o.training, "text", "test");
      auto plugin = tensor_throughput::create(o, std::move(group), c10::Device(c10::kCPU));
      const std::int64_t n = length + 2 * rank;
      const std::vector<std::int64_t> lengths = {n};
      for (std::int64_t step = 1; step <= 3; ++step) {
        *clock += 1.0;
        if (rank == 1 && step != 2) {
          microbatch_event e;
          e.document_lengths = lengths;
          e.samples = 1;
          plugin->on_microbatch(e);
        } else {
          tensor_microbatch b;
          b.cu_seqlens = longs({0, n});
          b.samples = 1;
          plugin->on_microbatch(b);
        }
        log_event l;
        l.step = step;
        plugin->on_log(l);
      }
      plugin->flush();
      out[static_cast<std::size_t>(rank)] = {sink->records, plugin->health()};
    });
    for (std::size_t r = 0; r < 2; ++r) {
      ASSERT_EQ(out[r].records.size(), 3u) << "rank " << r;
      for (std::size_t i = 0; i < 3; ++i) {
        const double* seen = out[r].records[i].find("train/flops_seen");
        ASSERT_NE(seen, nullptr) << "rank " << r << " record " << i;
        EXPECT_EQ(*seen, c.expected[i]) << "frozen " << c.frozen_text << ", rank " << r << " record " << i;
        EXPECT_EQ(*out[r].records[i].find("train/tokens_seen"), static_cast<double>((2 * length + 2) * (i + 1)));
      }
    }
  }
}

// Two Gloo ranks, one document of 10 tokens per micro-batch and one micro-batch per 1 s interval, six
// intervals each; rank 1 misses the on_log of step 2 (its interval then spans steps 2-3: 2 micro-batches in
// 2 s). The collectives pair as: (1, 1); (step 2, step 3): out of step, discarded on both; rank 0, behind,
// starts none at step 3 while it gets back in step; (4, 4), (5, 5), (6, 6). Records: steps 1, 4, 5, 6.
// Rank 0's step-3 interval had no collective: it still ends there, so step 4's record covers step 4 alone,
// 10 + 10 tokens in 1 s = 20 tokens/s, and its tokens join the running totals: tokens_seen 40 + 40 = 80 at
// step 4 and 120 at step 6 (every token fed). The host path must give the same records, bit for bit.
std::vector<rank_run> run_two_ranks_one_missing_a_log(bool tensors) {
  std::vector<rank_run> out(2);
  flopmeter_test::run_gloo_ranks(2, [&](int rank, c10::intrusive_ptr<c10d::ProcessGroup> group) {
    auto sink = std::make_shared<capture_sink>();
    auto clock = std::make_shared<double>(0.0);
    rank_plugin plugin(tensors, two_rank_options(sink, clock), group);
    const std::vector<std::int64_t> lengths = {10};
    for (std::int64_t step = 1; step <= 6; ++step) {
      *clock += 1.0;
      if (tensors) {
        tensor_microbatch b;
        b.cu_seqlens = longs({0, 10});
        b.samples = 1;
        plugin.tensor->on_microbatch(b);
      } else {
        microbatch_event e;
        e.document_lengths = lengths;
        e.samples = 1;
        plugin.host->on_microbatch(e);
      }
      if (rank == 1 && step == 2) continue;
      log_event l;
      l.step = step;
      plugin.on_log(l);
    }
    out[static_cast<std::size_t>(rank)] = plugin.finish(*sink);
  });
  return out;
}

TEST(tensor_path, an_interval_without_a_collective_ends_at_its_log_and_counts_in_the_totals) {
  const auto by_tensor = run_two_ranks_one_missing_a_log(true);
  const auto by_host = run_two_ranks_one_missing_a_log(false);
  for (std::size_t r = 0; r < 2; ++r) {
    const std::vector<metrics_record>& t = by_tensor[r].records;
    const std::vector<metrics_record>& h = by_host[r].records;
    ASSERT_EQ(t.size(), 4u) << "rank " << r;
    ASSERT_EQ(h.size(), 4u) << "rank " << r;
    const std::int64_t steps[] = {1, 4, 5, 6};
    const double tokens_seen[] = {20, 80, 100, 120};
    for (std::size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(t[i].step, steps[i]) << "rank " << r << " record " << i;
      EXPECT_DOUBLE_EQ(*t[i].find("train/tokens_seen"), tokens_seen[i]) << "rank " << r << " record " << i;
      EXPECT_DOUBLE_EQ(*t[i].find("train/num_samples"), tokens_seen[i] / 10) << "rank " << r << " record " << i;
      for (const char* name :
           {"perf/tokens_per_second", "perf/tflops_per_second", "train/tokens_seen", "train/num_samples"}) {
        EXPECT_EQ(*t[i].find(name), *h[i].find(name)) << name << ", rank " << r << " record " << i;
      }
    }
    EXPECT_DOUBLE_EQ(*t[1].find("perf/tokens_per_second"), 20.0) << "rank " << r;
    // train/flops_seen counts the same intervals as train/tokens_seen, the lost ones included (rank 1's step-3
    // row that met rank 0's step 2, rank 0's skipped step 3): each 10-token document costs 7392 x 10 + 192 x 55
    // = 84,480 FLOPs (small_vlm), so tokens_seen / 10 x 84,480. The tensor path adds its device FLOPs to its
    // rank's total at every interval's end, whatever became of the collective, as the host path does.
    for (std::size_t i = 0; i < 4; ++i) {
      ASSERT_NE(t[i].find("train/flops_seen"), nullptr) << "rank " << r << " record " << i;
      EXPECT_EQ(*t[i].find("train/flops_seen"), tokens_seen[i] / 10 * 84480) << "rank " << r << " record " << i;
      EXPECT_EQ(*t[i].find("train/flops_seen"), *h[i].find("train/flops_seen")) << "rank " << r << " record " << i;
    }
  }
}

TEST(tensor_path, a_malformed_tensor_batch_is_excluded_and_counted_one_log_later) {
  const auto with_bad = run_two_ranks(true, true);
  const auto clean = run_two_ranks(true, false);
  for (int r = 0; r < 2; ++r) {
    const auto& bad_run = with_bad[static_cast<std::size_t>(r)];
    EXPECT_EQ(bad_run.health.bad_microbatches, 1u);
    EXPECT_EQ(*bad_run.records.at(0).find("train/tokens_seen"),
              *clean[static_cast<std::size_t>(r)].records.at(0).find("train/tokens_seen"));
  }
}

// The counters are on the host whatever the tensors' device, so any group that spans the job serves: a Gloo group
// with tensors declared on a CUDA device is accepted (no device is touched until a CUDA tensor comes).
TEST(tensor_path, any_group_serves_whatever_the_tensors_device) {
  flopmeter_test::run_gloo_ranks(1, [](int, c10::intrusive_ptr<c10d::ProcessGroup> group) {
    throughput_options o;
    o.model = small_vlm();
    EXPECT_NO_THROW(tensor_throughput::create(o, group, c10::Device(c10::kCUDA, 0)));
  });
}

// ---- What a rejected tensor batch contributes, warnings, dtypes, creation from a file, hooks ----

// Sets (or, with nullopt, unsets) one environment variable for a scope.
class scoped_env_var {
 public:
  scoped_env_var(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~scoped_env_var() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  scoped_env_var(const scoped_env_var&) = delete;
  scoped_env_var& operator=(const scoped_env_var&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// Everything written to stderr while `run` runs (flopmeter's private loggers write there).
template <class F>
std::string capture_stderr(F run) {
  std::fflush(stderr);
  char path[] = "/tmp/flopmeter_stderr_XXXXXX";
  const int file = ::mkstemp(path);
  const int saved = ::dup(2);
  ::dup2(file, 2);
  try {
    run();
  } catch (...) {
    std::fflush(stderr);
    ::dup2(saved, 2);
    ::close(saved);
    ::close(file);
    ::unlink(path);
    throw;
  }
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  ::close(file);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  ::unlink(path);
  return text.str();
}

std::size_t occurrences(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

tensor_microbatch good_batch(int rank) {
  tensor_microbatch b;
  b.cu_seqlens = longs({0, 100 + rank, 128 + rank});  // 128 + rank real tokens
  b.padding_tokens = 4;
  b.samples = 2;
  b.loss_sum = 10.0;
  b.label_tokens = 3;
  return b;
}

// A sink calling back into the tensor plugin that is emitting to it (inside on_log, with the tensor path's
// lock and the plugin's held): health() answers; the hooks are refused and counted instead of deadlocking.
class calling_back_sink : public capture_sink {
 public:
  tensor_throughput* plugin = nullptr;
  throughput_health first, after;

 protected:
  void write_(const metrics_record& record) override {
    capture_sink::write_(record);
    if (records.size() != 1 || plugin == nullptr) return;
    first = plugin->health();
    plugin->on_microbatch(good_batch(0));
    plugin->on_microbatch(microbatch_event{});
    log_event again;
    again.step = 102;
    plugin->on_log(again);
    plugin->flush();
    after = plugin->health();
  }
};

// The running total of label tokens (train/assistant_tokens_seen) of tensor micro-batches, like tokens_seen: 3
// label tokens per batch, two batches before log 1 and one before log 2: 6, then 9.
TEST(tensor_path, label_tokens_join_their_running_total_on_the_device) {
  flopmeter_test::run_gloo_ranks(1, [&](int, c10::intrusive_ptr<c10d::ProcessGroup> group) {
    auto sink = std::make_shared<capture_sink>();
    auto clock = std::make_shared<double>(0.0);
    auto plugin = tensor_throughput::create(two_rank_options(sink, clock), group, c10::Device(c10::kCPU));
    log_event log;
    plugin->on_microbatch(good_batch(0));
    plugin->on_microbatch(good_batch(0));
    *clock = 1;
    log.step = 1;
    plugin->on_log(log);
    plugin->on_microbatch(good_batch(0));
    *clock = 2;
    log.step = 2;
    plugin->on_log(log);
    plugin->flush();
    ASSERT_EQ(sink->records.size(), 2u);
    EXPECT_EQ(sink->value(0, "train/assistant_tokens_seen"), 6.0);
    EXPECT_EQ(sink->value(1, "train/assistant_tokens_seen"), 9.0);
  });
}

TEST(tensor_path, a_sink_calling_back_into_the_tensor_plugin_is_answered_not_deadlocked) {
  flopmeter_test::run_gloo_ranks(1, [&](int, c10::intrusive_ptr<c10d::ProcessGroup> group) {
    auto sink = std::make_shared<calling_back_sink>();
    auto clock = std::make_shared<double>(0.0);
    throughput_options o = two_rank_options(nullptr, clock);
    o.sinks = {sink};
    auto plugin = tensor_throughput::create(std::move(o), group, c10::Device(c10::kCPU));
    sink->plugin = plugin.get();
    log_event log;
    plugin->on_microbatch(good_batch(0));
    *clock = 1;
    log.step = 1;
    plugin->on_log(log);
    plugin->on_microbatch(good_batch(0));
    *clock = 2;
    log.step = 2;
    plugin->on_log(log);  // emits step 1: the sink calls back from inside (run_gloo_ranks' deadline catches a hang)
    EXPECT_EQ(sink->first.reentrant_calls, 0u);
    EXPECT_EQ(sink->first.collectives_started, 1u);  // log 1's; log 2's starts after the emission
    // Four refused hooks: the tensor batch, the host batch, on_log and flush.
    EXPECT_EQ(sink->after.reentrant_calls, 4u);
    EXPECT_EQ(sink->after.bad_microbatches, 0u);
    plugin->flush();  // not flushed by the refused call: emits step 2
    ASSERT_EQ(sink->records.size(), 2u);
    // good_batch(0) has 128 real tokens; one per interval, none of the refused ones: 128, then 256 seen.
    EXPECT_DOUBLE_EQ(sink->value(0, "train/tokens_seen"), 128.0);
    EXPECT_DOUBLE_EQ(sink->value(1, "train/tokens_seen"), 256.0);
    EXPECT_EQ(plugin->health().reentrant_calls, 4u);
  });
}

TEST(tensor_path, a_rejected_batch_adds_no_loss_labels_or_samples) {
  // Per rank: one good batch (loss 10 over 3 labels, 2 samples), one refused for its values (cu_seqlens
  // decreasing) and one for what the host knows at once (float cu_seqlens), each claiming a large loss and
  // labels, and one valid description whose 9 label tokens exceed its 4 real tokens (refused likewise).
  // By hand: train/loss = (10 + 10) / (3 + 3) = 3.333...; samples 2 + 2 = 4; tokens 128 + 129 = 257.
  // Counting the rejected ones would give (20 + 2 * (1000 + 500)) / (6 + 2 * (7 + 5)) = 101; counting only the
  // one with too many labels (20 + 2 * 300) / (6 + 2 * 9) = 25.83, tokens 257 + 2 * 4 = 265.
  std::vector<rank_run> out(2);
  flopmeter_test::run_gloo_ranks(2, [&](int rank, c10::intrusive_ptr<c10d::ProcessGroup> group) {
    auto sink = std::make_shared<capture_sink>();
    auto clock = std::make_shared<double>(0.0);
    auto plugin = tensor_throughput::create(two_rank_options(sink, clock), group, c10::Device(c10::kCPU));
    plugin->on_microbatch(good_batch(rank));
    tensor_microbatch device_rejected;
    device_rejected.cu_seqlens = longs({0, 9, 3});
    device_rejected.samples = 5;
    device_rejected.loss_sum = 1000.0;
    device_rejected.label_tokens = 7;
    plugin->on_microbatch(device_rejected);
    tensor_microbatch host_rejected;
    host_rejected.cu_seqlens = at::tensor(std::vector<double>{0, 2.5, 5});
    host_rejected.samples = 5;
    host_rejected.loss_sum = 500.0;
    host_rejected.label_tokens = 5;
    plugin->on_microbatch(host_rejected);
    tensor_microbatch too_many_labels;
    too_many_labels.cu_seqlens = longs({0, 4});
    too_many_labels.samples = 5;
    too_many_labels.loss_sum = 300.0;
    too_many_labels.label_tokens = 9;
    plugin->on_microbatch(too_many_labels);
    out[static_cast<std::size_t>(rank)] = end_of_step_one(*plugin, *sink, *clock);
  });
  for (const rank_run& run : out) {
    ASSERT_EQ(run.records.size(), 1u);
    EXPECT_DOUBLE_EQ(*run.records[0].find("train/loss"), 20.0 / 6.0);
    EXPECT_EQ(*run.records[0].find("train/num_samples"), 4.0);
    EXPECT_EQ(*run.records[0].find("train/tokens_seen"), 257.0);
    EXPECT_EQ(run.health.bad_microbatches, 3u);
  }
}

TEST(tensor_path, rejection_warnings_are_rate_limited_like_the_host_path) {
  // 40 rejected batches per rank within a second: one warning per rank (one a minute per kind), while
  // health counts all 40.
  std::vector<rank_run> out(2);
  const std::string logged = capture_stderr([&] {
    flopmeter_test::run_gloo_ranks(2, [&](int rank, c10::intrusive_ptr<c10d::ProcessGroup> group) {
      auto sink = std::make_shared<capture_sink>();
      auto clock = std::make_shared<double>(0.0);
      auto plugin = tensor_throughput::create(two_rank_options(sink, clock), group, c10::Device(c10::kCPU));
      for (int i = 0; i < 40; ++i) {
        tensor_microbatch bad;
        bad.positions = at::tensor(std::vector<float>{0, 1, 2});
        plugin->on_microbatch(bad);
      }
      out[static_cast<std::size_t>(rank)] = end_of_step_one(*plugin, *sink, *clock);
    });
  });
  EXPECT_EQ(occurrences(logged, "tensor micro-batch not counted"), 2u) << logged;
  EXPECT_EQ(occurrences(logged, "positions must have an integer dtype (got Float)"), 2u) << logged;
  for (const rank_run& run : out) EXPECT_EQ(run.health.bad_microbatches, 40u);
}

TEST(tensor_path, floating_point_and_bool_tensors_are_rejected) {
  const model_spec spec = small_vlm();
  tensor_microbatch float_cu;
  float_cu.cu_seqlens = at::tensor(std::vector<double>{0, 2.5, 5});  // would count as [0, 2, 5]
  tensor_microbatch float_positions;
  float_positions.positions = at::tensor(std::vector<float>{0, 1, 2});
  tensor_microbatch bool_positions;
  bool_positions.positions = at::tensor(std::vector<std::int64_t>{0, 1}).to(at::kBool);
  tensor_microbatch float_grid;
  float_grid.grid_thw = grids({{1, 2, 2}}).to(at::kFloat);
  for (const tensor_microbatch& bad : {float_cu, float_positions, bool_positions, float_grid}) {
    EXPECT_EQ(count_through_tensor_path(spec, {bad}).health.bad_microbatches, 1u);
  }
  const std::string logged = capture_stderr([&] { count_through_tensor_path(spec, {float_cu}); });
  EXPECT_NE(logged.find("cu_seqlens must have an integer dtype (got Double)"), std::string::npos) << logged;
  // Integer dtypes of every width stay accepted (int32 as flash-attention gives them, uint8, int16): 5 tokens.
  for (const at::ScalarType type : {at::kInt, at::kShort, at::kByte, at::kLong}) {
    tensor_microbatch ok;
    ok.cu_seqlens = longs({0, 3, 5}).to(type);
    const one_interval got = count_through_tensor_path(spec, {ok});
    EXPECT_EQ(got.health.bad_microbatches, 0u) << c10::toString(type);
    EXPECT_EQ(got.tokens_seen, 5.0) << c10::toString(type);
  }
}

// A scratch directory for plugin files and their JSONL output.
class scratch_dir {
 public:
  explicit scratch_dir(const std::string& name)
      : path_(std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~scratch_dir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

TEST(tensor_path, one_call_creation_from_a_plugin_file_honours_its_sinks) {
  // The plugin file names a JSONL sink per rank; both ranks write their own file, one line per log. By hand:
  // tokens_seen = 128 + 129 = 257 on both ranks (emit = "all").
  scratch_dir dir("flopmeter_tensor_sinks");
  std::ofstream(dir.file("plugin.toml")) << "[model]\nconfig = \"" FLOPMETER_SOURCE_DIR "/model_configs/tiny_vlm.toml\"\n"
                                         << "[peak]\ntflops_per_gpu = 1.0\n"
                                         << "[logging]\nemit = \"all\"\n"
                                         << "[sinks]\nconsole = false\njsonl = \"" << dir.file("m_{rank}.jsonl")
                                         << "\"\n";
  flopmeter_test::run_gloo_ranks(2, [&](int rank, c10::intrusive_ptr<c10d::ProcessGroup> group) {
    auto plugin = create_tensor_throughput(dir.file("plugin.toml"), group, c10::Device(c10::kCPU));
    tensor_microbatch b;
    b.cu_seqlens = longs({0, 100 + rank, 128 + rank});
    plugin->on_microbatch(b);
    log_event l;
    l.step = 7;
    plugin->on_log(l);
    plugin->flush();
  });
  for (int rank = 0; rank < 2; ++rank) {
    const std::vector<nlohmann::json> lines = testing::read_jsonl(dir.file("m_" + std::to_string(rank) + ".jsonl"));
    ASSERT_EQ(lines.size(), 1u) << "rank " << rank;
    EXPECT_EQ(testing::number_field(lines[0], "step"), 7) << lines[0].dump();
    EXPECT_EQ(testing::number_field(lines[0], "train/tokens_seen"), 257) << lines[0].dump();
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("m_{rank}.jsonl")));
  // A bad file names itself.
  std::ofstream(dir.file("bad.toml")) << "[model]\nconfig = \"missing.toml\"\n";
  flopmeter_test::run_gloo_ranks(1, [&](int, c10::intrusive_ptr<c10d::ProcessGroup> group) {
    try {
      create_tensor_throughput(dir.file("bad.toml"), group, c10::Device(c10::kCPU));
      ADD_FAILURE() << "a missing model file was accepted";
    } catch (const error& e) {
      EXPECT_NE(std::string(e.what()).find("missing.toml"), std::string::npos) << e.what();
    }
  });
}

TEST(tensor_path, make_jsonl_sink_expands_the_rank) {
  scratch_dir dir("flopmeter_jsonl_rank");
  metrics_record r;
  r.step = 3;
  r.values = {{"train/tokens_seen", 5.0}};
  make_jsonl_sink(dir.file("x_{rank}_{rank}.jsonl"), 12)->write(r);
  EXPECT_EQ(testing::read_jsonl(dir.file("x_12_12.jsonl")).size(), 1u);
  // Without a rank, "{rank}" is an error that says what to call, never a file literally named "x_{rank}".
  EXPECT_THROW(make_jsonl_sink(dir.file("x_{rank}.jsonl")), error);
  EXPECT_THROW(make_jsonl_sink(dir.file("x_{rank}.jsonl"), -1), error);
}

TEST(tensor_path, registers_with_hooks_like_the_host_path) {
  // The tensor plugin is a flopmeter::plugin: registered with hooks, it takes host-described batches and
  // logs from hooks and tensor batches directly. By hand per rank: 50 host tokens + (128 + rank) tensor
  // tokens; the job: 50 + 128 + 50 + 129 = 357 tokens_seen.
  flopmeter_test::run_gloo_ranks(2, [&](int rank, c10::intrusive_ptr<c10d::ProcessGroup> group) {
    auto sink = std::make_shared<capture_sink>();
    auto clock = std::make_shared<double>(0.0);
    std::shared_ptr<tensor_throughput> plugin =
        tensor_throughput::create(two_rank_options(sink, clock), group, c10::Device(c10::kCPU));
    hooks h;
    registration reg = h.add(plugin);
    const std::vector<std::int64_t> lengths = {50};
    microbatch_event host;
    host.document_lengths = lengths;
    h.on_microbatch(host);
    tensor_microbatch b;
    b.cu_seqlens = longs({0, 100 + rank, 128 + rank});
    plugin->on_microbatch(b);
    *clock = 1.0;
    log_event l;
    l.step = 1;
    h.on_log(l);
    h.flush();
    ASSERT_EQ(sink->records.size(), 1u);
    EXPECT_EQ(sink->value(0, "train/tokens_seen"), 357.0);
    EXPECT_EQ(h.swallowed_exceptions(), 0u);
  });
}

TEST(tensor_path, a_group_smaller_than_the_job_is_refused) {
  // The data-parallel group of a dp 2 x tp 2 job: 2 ranks of 4. Refused, with what to pass instead.
  scoped_env_var world("WORLD_SIZE", "4");
  flopmeter_test::run_gloo_ranks(2, [&](int, c10::intrusive_ptr<c10d::ProcessGroup> group) {
    throughput_options o;
    o.model = small_vlm();
    try {
      tensor_throughput::create(o, group, c10::Device(c10::kCPU));
      ADD_FAILURE() << "a 2-rank group was accepted in a 4-rank job";
    } catch (const error& e) {
      EXPECT_NE(std::string(e.what()).find("the group has 2 ranks but the job has 4 (WORLD_SIZE=4)"),
                std::string::npos)
          << e.what();
    }
    // The size the trainer states wins over the environment: a group of the stated size is accepted.
    c10d_options two;
    two.job_world_size = 2;
    EXPECT_NO_THROW(tensor_throughput::create(o, group, c10::Device(c10::kCPU), two));
  });
}

}  // namespace
}  // namespace flopmeter
