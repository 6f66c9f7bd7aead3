// The LibTorch tensor path: counts computed with ATen ops equal the host path's exactly, malformed tensors are
// masked out and counted, and a 2-rank Gloo job fed tensors reports bit-identical FLOPs to the same job fed
// host descriptions.
#include "flopmeter/torch.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "flopmeter/c10d.h"
#include "flopmeter/error.h"
#include "gloo_harness.h"
#include "support/capture_sink.h"
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
std::int64_t invalid_entries(const at::Tensor& counts) { return counts[9].item<std::int64_t>(); }

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

TEST(tensor_path, device_counts_equal_host_counts) {
  const vision_geometry g = geometry_of(small_vlm());
  std::printf("device: %s\n", test_device().str().c_str());
  const std::vector<image_grid> items = {{1, 2, 2}, {2, 4, 2}, {3, 8, 6}};
  // int32 cu_seqlens as flash-attention uses them; the path widens to int64 on the device.
  tensor_microbatch by_cu;
  by_cu.cu_seqlens = dev_longs({0, 3, 4, 8, 8, 10}).to(at::kInt);
  by_cu.grid_thw = dev_grids(items).to(at::kInt);
  by_cu.padding_tokens = 5;
  const at::Tensor from_cu = tensor_batch_counts(by_cu, g);
  EXPECT_EQ(invalid_entries(from_cu), 0);
  const std::vector<std::int64_t> cu = {0, 3, 4, 8, 8, 10};
  EXPECT_EQ(to_batch_counts(from_cu), count_from_cu_seqlens(cu, 5, items, g));

  tensor_microbatch by_positions;
  const std::vector<std::int64_t> positions = {0, 1, 2, 0, 0, 1, 2, 3, 0, 1};
  by_positions.positions = dev_longs(positions);
  by_positions.grid_thw = dev_grids(items);
  by_positions.padding_tokens = 5;
  const at::Tensor from_positions = tensor_batch_counts(by_positions, g);
  EXPECT_EQ(invalid_entries(from_positions), 0);
  EXPECT_EQ(to_batch_counts(from_positions), count_from_positions(positions, 5, items, g));
  // By hand: pairs 6 + 1 + 10 + 3 = 20; patches 4 + 16 + 144 = 164; per frame 16 + 2*64 + 3*48^2 = 7056.
  EXPECT_EQ(to_batch_counts(from_positions).causal_pairs, 20);
  EXPECT_EQ(to_batch_counts(from_positions).patches, 164);
  EXPECT_EQ(to_batch_counts(from_positions).vision_pairs_per_frame, 7056);
}

TEST(tensor_path, malformed_tensors_are_flagged_on_the_device) {
  const vision_geometry g = geometry_of(small_vlm());
  tensor_microbatch decreasing;
  decreasing.cu_seqlens = dev_longs({0, 5, 4});
  EXPECT_EQ(invalid_entries(tensor_batch_counts(decreasing, g)), 1);
  tensor_microbatch not_from_zero;
  not_from_zero.cu_seqlens = dev_longs({2, 5});
  EXPECT_EQ(invalid_entries(tensor_batch_counts(not_from_zero, g)), 1);
  tensor_microbatch jumping;
  jumping.positions = dev_longs({0, 1, 3, 0, 2});  // 3 and 2 break their runs
  EXPECT_EQ(invalid_entries(tensor_batch_counts(jumping, g)), 2);
  tensor_microbatch bad_grids;
  bad_grids.grid_thw = dev_grids({{1, 0, 2}, {1, 3, 2}, {1, 2, 2}, {1000000, 1000000, 1000000}});
  EXPECT_EQ(invalid_entries(tensor_batch_counts(bad_grids, g)), 3);  // zero, odd h, too many patches
  // Host-known shape errors throw at once.
  tensor_microbatch both;
  both.cu_seqlens = dev_longs({0, 2});
  both.positions = dev_longs({0, 1});
  EXPECT_THROW(tensor_batch_counts(both, g), error);
  tensor_microbatch text_only_with_grid;
  text_only_with_grid.grid_thw = dev_grids({{1, 2, 2}});
  EXPECT_THROW(tensor_batch_counts(text_only_with_grid, vision_geometry{}), error);
}

struct rank_run {
  std::vector<metrics_record> records;
  throughput_health health;
};

// Two Gloo ranks run the same three micro-batches per rank in a 2 s interval, either as tensors through
// tensor_throughput or as host lengths through a plain plugin.
std::vector<rank_run> run_two_ranks(bool tensors, bool add_malformed) {
  std::vector<rank_run> out(2);
  flopmeter_test::run_gloo_ranks(2, [&](int rank, c10::intrusive_ptr<c10d::ProcessGroup> group) {
    auto sink = std::make_shared<capture_sink>();
    auto clock = std::make_shared<double>(0.0);
    throughput_options o;
    o.model = small_vlm();
    o.peak_tflops_per_gpu = 1e-3;
    o.emit = emit_ranks::all;
    o.sinks = {sink};
    o.clock_seconds = [clock] { return *clock; };
    const std::vector<std::vector<std::int64_t>> docs = {{100 + rank, 28}, {4000}, {7, 7, 7 * rank + 1}};
    const std::vector<image_grid> items = {{2, 4, 6}, {1, 2, 2}};
    std::shared_ptr<tensor_throughput> tensor_plugin;
    std::shared_ptr<throughput_plugin> host_plugin;
    if (tensors) {
      tensor_plugin = tensor_throughput::create(o, group, c10::Device(c10::kCPU));
    } else {
      host_plugin = throughput_plugin::create(o, make_c10d_communicator(group));
    }
    for (const auto& lengths : docs) {
      if (tensors) {
        std::vector<std::int64_t> cu = {0};
        for (const std::int64_t l : lengths) cu.push_back(cu.back() + l);
        tensor_microbatch b;
        b.cu_seqlens = longs(cu);
        b.grid_thw = grids(items);
        b.padding_tokens = 3;
        b.samples = 1;
        tensor_plugin->on_microbatch(b);
      } else {
        microbatch_event e;
        e.document_lengths = lengths;
        e.image_grids = items;
        e.padding_tokens = 3;
        e.samples = 1;
        host_plugin->on_microbatch(e);
      }
    }
    if (add_malformed && tensors) {
      tensor_microbatch bad;
      bad.cu_seqlens = longs({0, 9, 3});
      tensor_plugin->on_microbatch(bad);
    }
    *clock = 2.0;
    log_event l;
    l.step = 5;
    if (tensors) {
      tensor_plugin->on_log(l);
      tensor_plugin->flush();
      out[static_cast<std::size_t>(rank)] = {sink->records, tensor_plugin->health()};
    } else {
      host_plugin->on_log(l);
      host_plugin->flush();
      out[static_cast<std::size_t>(rank)] = {sink->records, host_plugin->health()};
    }
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
    for (const char* name : {"perf/tflops_per_second", "perf/mfu", "perf/tokens_per_second", "train/batch_efficiency",
                             "train/tokens_seen", "train/num_samples"}) {
      ASSERT_NE(t.find(name), nullptr) << name;
      EXPECT_EQ(*t.find(name), *h.find(name)) << name;  // bit-identical, not merely close
    }
    // Real tokens: rank 0 has (100 + 28) + 4000 + (7 + 7 + 1) = 4143, rank 1 (101 + 28) + 4000 + (7 + 7 + 8)
    // = 4151; 8294 over 2 s.
    EXPECT_DOUBLE_EQ(*t.find("perf/tokens_per_second"), 4147.0);
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

TEST(tensor_path, counters_must_live_where_the_group_reduces) {
  flopmeter_test::run_gloo_ranks(1, [](int, c10::intrusive_ptr<c10d::ProcessGroup> group) {
    throughput_options o;
    o.model = small_vlm();
    EXPECT_THROW(tensor_throughput::create(o, group, c10::Device(c10::kCUDA, 0)), error);
  });
}

}  // namespace
}  // namespace flopmeter
