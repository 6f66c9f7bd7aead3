// Peak table: every listed GPU is found by its table name and by the name its driver reports, the most
// specific name wins, ambiguous or unknown names give no number, and a missing precision gives no number.

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "flopmeter/peak_table.h"

namespace flopmeter {
namespace {

struct peak_case {
  const char* device;  // what is looked up
  const char* row;     // the row expected
  double bf16;         // dense TFLOP/s expected (datasheet sparsity figure / 2 for NVIDIA)
  double fp8;          // 0: no FP8 (the lookup must fail)
};

// Expected figures, by hand from the datasheets (NVIDIA headlines sparsity; dense is half of it):
//   H100 SXM   1979 / 3958 sparse  -> 989.4 / 1978.9 (NVIDIA's exact dense figures)
//   H100 PCIe  1513 / 3026 sparse  -> 756.5 / 1513
//   H100 NVL   1671 / 3341 sparse  -> 835.5 / 1670.5
//   B200       36 / 72 PF sparse per 8 GPUs -> 4.5 / 9 PF per GPU sparse -> 2250 / 4500 dense
//   GB200      360 / 720 PF sparse per 72 GPUs -> 5 / 10 PF per GPU sparse -> 2500 / 5000 dense
//   A100       312 dense BF16, no FP8 tensor cores.   AMD figures are dense as published.
const peak_case kByTableName[] = {
    {"A100 SXM", "A100 SXM", 312.0, 0.0},       {"A100 PCIe", "A100 PCIe", 312.0, 0.0},
    {"H100 SXM", "H100 SXM", 989.4, 1978.9},    {"H100 PCIe", "H100 PCIe", 756.5, 1513.0},
    {"H100 NVL", "H100 NVL", 835.5, 1670.5},    {"H200", "H200", 989.4, 1978.9},
    {"H200 NVL", "H200 NVL", 835.5, 1670.5},    {"GH200", "GH200", 989.4, 1978.9},
    {"B200", "B200", 2250.0, 4500.0},           {"B300", "B300", 2250.0, 4500.0},
    {"GB200", "GB200", 2500.0, 5000.0},         {"MI300X", "MI300X", 1307.4, 2614.9},
    {"MI325X", "MI325X", 1307.4, 2614.9},       {"MI355X", "MI355X", 2516.6, 5033.2},
    {"L40S", "L40S", 362.05, 733.0},
};

// Names as torch.cuda.get_device_name() / hipDeviceProp_t::name report them.
const peak_case kByDeviceName[] = {
    {"NVIDIA A100-SXM4-80GB", "A100 SXM", 312.0, 0.0},
    {"NVIDIA A100-SXM4-40GB", "A100 SXM", 312.0, 0.0},
    {"NVIDIA A100-PCIE-40GB", "A100 PCIe", 312.0, 0.0},
    {"NVIDIA A100 80GB PCIe", "A100 PCIe", 312.0, 0.0},  // alias: name does not contain "A100 PCIe"
    {"NVIDIA H100 80GB HBM3", "H100 SXM", 989.4, 1978.9},  // alias: the SXM5's CUDA name
    {"NVIDIA H100 PCIe", "H100 PCIe", 756.5, 1513.0},
    {"NVIDIA H100 NVL", "H100 NVL", 835.5, 1670.5},
    {"NVIDIA H200", "H200", 989.4, 1978.9},
    {"NVIDIA H200 NVL", "H200 NVL", 835.5, 1670.5},  // longer "H200NVL" wins over "H200"
    {"NVIDIA GH200 480GB", "GH200", 989.4, 1978.9},  // longer "GH200" wins over "H200"
    {"NVIDIA B200", "B200", 2250.0, 4500.0},
    {"NVIDIA B300 SXM6 AC", "B300", 2250.0, 4500.0},
    {"NVIDIA GB200", "GB200", 2500.0, 5000.0},  // longer "GB200" wins over "B200"
    {"NVIDIA GB300", "GB300", 2500.0, 5000.0},  // and "GB300" over "B300"
    {"AMD Instinct MI300X", "MI300X", 1307.4, 2614.9},
    {"AMD Instinct MI300X VF", "MI300X", 1307.4, 2614.9},
    {"AMD Instinct MI325X", "MI325X", 1307.4, 2614.9},
    {"AMD Instinct MI355X", "MI355X", 2516.6, 5033.2},
    {"NVIDIA L40S", "L40S", 362.05, 733.0},
    {"nvidia_h100-nvl", "H100 NVL", 835.5, 1670.5},  // case, '_' and '-' are ignored
};

void expect_case(const peak_case& c) {
  SCOPED_TRACE(c.device);
  const auto bf16 = find_peak(c.device, peak_precision::bf16);
  ASSERT_TRUE(bf16.has_value());
  ASSERT_NE(bf16->entry, nullptr);
  EXPECT_STREQ(bf16->entry->name, c.row);
  EXPECT_DOUBLE_EQ(bf16->tflops, c.bf16);
  EXPECT_DOUBLE_EQ(bf16->entry->bf16_dense_tflops, c.bf16);
  const auto fp8 = find_peak(c.device, peak_precision::fp8);
  if (c.fp8 == 0) {
    EXPECT_FALSE(fp8.has_value());
  } else {
    ASSERT_TRUE(fp8.has_value());
    EXPECT_STREQ(fp8->entry->name, c.row);
    EXPECT_DOUBLE_EQ(fp8->tflops, c.fp8);
  }
}

TEST(PeakTable, FindsEveryListedGpuByTableName) {
  for (const peak_case& c : kByTableName) expect_case(c);
}

TEST(PeakTable, FindsEveryListedGpuByDriverDeviceName) {
  for (const peak_case& c : kByDeviceName) expect_case(c);
}

TEST(PeakTable, LongestNameWins) {
  // "NVIDIAGB200" contains both "GB200" and "B200"; B200's 2250 would understate GB200's 2500.
  EXPECT_STREQ(find_peak("GB200", peak_precision::bf16)->entry->name, "GB200");
  // "GH200" contains "H200"; the numbers agree, but the row must be GH200's.
  EXPECT_STREQ(find_peak("GH200", peak_precision::bf16)->entry->name, "GH200");
  EXPECT_STREQ(find_peak("NVIDIA GH200 480GB", peak_precision::bf16)->entry->name, "GH200");
}

TEST(PeakTable, UnknownOrAmbiguousDeviceHasNoNumber) {
  EXPECT_FALSE(find_peak("NVIDIA GeForce RTX 4090", peak_precision::bf16).has_value());
  EXPECT_FALSE(find_peak("RTX 4090", peak_precision::bf16).has_value());
  // Bare "H100" could be SXM (989.4), NVL (835.5) or PCIe (756.5): no guess.
  EXPECT_FALSE(find_peak("H100", peak_precision::bf16).has_value());
  EXPECT_FALSE(find_peak("NVIDIA H100", peak_precision::bf16).has_value());
  EXPECT_FALSE(find_peak("", peak_precision::bf16).has_value());
  EXPECT_FALSE(find_peak("NVIDIA L40", peak_precision::bf16).has_value());  // L40 is not L40S
}

TEST(PeakTable, MissingPrecisionHasNoNumber) {
  // A100 has no FP8: its row holds 0, which must not come back as a peak of 0 (MFU = inf).
  EXPECT_TRUE(find_peak("A100 SXM", peak_precision::bf16).has_value());
  EXPECT_FALSE(find_peak("A100 SXM", peak_precision::fp8).has_value());
  EXPECT_FALSE(find_peak("NVIDIA A100-SXM4-80GB", peak_precision::fp8).has_value());
}

TEST(PeakTable, RowsAreDenseFiguresWithSources) {
  std::set<std::string> names;
  for (const peak_entry& row : peak_table()) {
    SCOPED_TRACE(row.name);
    EXPECT_TRUE(names.insert(row.name).second) << "duplicate row";
    EXPECT_GT(row.bf16_dense_tflops, 0);
    EXPECT_GE(row.fp8_dense_tflops, 0);
    // Dense FP8 is twice dense BF16 on every GPU that has it, within the vendors' rounding (H100:
    // 1978.9 vs 2*989.4 = 1978.8; L40S: 733 vs 2*362.05 = 724.1, 1.2%): a 2% band catches a row whose
    // FP8 figure is a sparsity figure (4x) or a copy of the BF16 one (1x).
    if (row.fp8_dense_tflops > 0) {
      EXPECT_NEAR(row.fp8_dense_tflops, 2 * row.bf16_dense_tflops, 0.02 * row.fp8_dense_tflops);
    }
    ASSERT_NE(row.source, nullptr);
    EXPECT_GT(std::string(row.source).size(), 20u);
    // Each row is found by its own name (no row is shadowed by a longer one).
    const auto found = find_peak(row.name, peak_precision::bf16);
    ASSERT_TRUE(found.has_value());
    EXPECT_EQ(found->entry, &row);
  }
  EXPECT_GE(peak_table().size(), 15u);
}

TEST(PeakTable, PrecisionNames) {
  EXPECT_STREQ(to_string(peak_precision::bf16), "bf16");
  EXPECT_STREQ(to_string(peak_precision::fp8), "fp8");
}

}  // namespace
}  // namespace flopmeter
