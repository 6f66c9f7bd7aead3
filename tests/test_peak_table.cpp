// Peak table: every listed GPU is found by its table name and by the name its driver reports, the most
// specific name wins, ambiguous or unknown names give no number, and a missing precision gives no number.

#include <gtest/gtest.h>

#include <iterator>
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
//   A800       624 sparse BF16 -> 312 (the A100's tensor cores); no FP8
//   H800 SXM   as H100 SXM (1979 / 3958 sparse -> 989.4 / 1978.9); H800 PCIe as H100 PCIe (756.5 / 1513)
//   H20        148 / 296 dense as published;  L20 119.5 / 239 dense (239 / 478 sparse)
//   L40        181.05 / 362 dense (362.1 / 724 sparse);  L4 242 / 485 sparse -> 121 / 242.5
//   A10        125 dense (250 sparse);  A40 149.7 dense (299.4 sparse); neither has FP8
//   RTX 6000 Ada  1457 FP8 sparse -> 728.5 FP8 dense, BF16 half of it = 364.25
//   RTX PRO 6000 Blackwell Workstation  FP4 sparse 4030.4 -> FP4 dense 2015.2 -> FP8 1007.6 -> BF16 503.8
//   MI250X     383.0 dense BF16 per module of 2 GCDs -> 191.5 per GCD (one device); no FP8
const peak_case kByTableName[] = {
    {"A100 SXM", "A100 SXM", 312.0, 0.0},
    {"A100 PCIe", "A100 PCIe", 312.0, 0.0},
    {"H100 SXM", "H100 SXM", 989.4, 1978.9},
    {"H100 PCIe", "H100 PCIe", 756.5, 1513.0},
    {"H100 NVL", "H100 NVL", 835.5, 1670.5},
    {"H200", "H200", 989.4, 1978.9},
    {"H200 NVL", "H200 NVL", 835.5, 1670.5},
    {"GH200", "GH200", 989.4, 1978.9},
    {"B200", "B200", 2250.0, 4500.0},
    {"B300", "B300", 2250.0, 4500.0},
    {"GB200", "GB200", 2500.0, 5000.0},
    {"MI300X", "MI300X", 1307.4, 2614.9},
    {"MI325X", "MI325X", 1307.4, 2614.9},
    {"MI355X", "MI355X", 2516.6, 5033.2},
    {"L40S", "L40S", 362.05, 733.0},
    {"A800", "A800", 312.0, 0.0},
    {"H800 SXM", "H800 SXM", 989.4, 1978.9},
    {"H800 PCIe", "H800 PCIe", 756.5, 1513.0},
    {"H20", "H20", 148.0, 296.0},
    {"L20", "L20", 119.5, 239.0},
    {"L40", "L40", 181.05, 362.0},
    {"L4", "L4", 121.0, 242.5},
    {"A10", "A10", 125.0, 0.0},
    {"A40", "A40", 149.7, 0.0},
    {"RTX 6000 Ada", "RTX 6000 Ada", 364.25, 728.5},
    {"RTX PRO 6000 Blackwell Workstation", "RTX PRO 6000 Blackwell Workstation", 503.8, 1007.6},
    {"MI250X", "MI250X", 191.5, 0.0},
    {"GB300", "GB300", 2500.0, 5000.0},
};

// Names as torch.cuda.get_device_name() / hipDeviceProp_t::name report them.
const peak_case kByDeviceName[] = {
    {"NVIDIA A100-SXM4-80GB", "A100 SXM", 312.0, 0.0},
    {"NVIDIA A100-SXM4-40GB", "A100 SXM", 312.0, 0.0},
    {"NVIDIA A100-PCIE-40GB", "A100 PCIe", 312.0, 0.0},
    {"NVIDIA A100 80GB PCIe", "A100 PCIe", 312.0, 0.0},    // alias: name does not contain "A100 PCIe"
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
    {"NVIDIA A800-SXM4-80GB", "A800", 312.0, 0.0},
    {"NVIDIA A800 80GB PCIe", "A800", 312.0, 0.0},
    {"NVIDIA A800 40GB Active", "A800", 312.0, 0.0},
    {"NVIDIA H800 80GB HBM3", "H800 SXM", 989.4, 1978.9},  // alias: the SXM5's CUDA name
    {"NVIDIA H800 PCIe", "H800 PCIe", 756.5, 1513.0},
    {"NVIDIA H20", "H20", 148.0, 296.0},
    {"NVIDIA L20", "L20", 119.5, 239.0},
    {"NVIDIA L40", "L40", 181.05, 362.0},
    {"NVIDIA L4", "L4", 121.0, 242.5},
    {"NVIDIA A10", "A10", 125.0, 0.0},
    {"NVIDIA A40", "A40", 149.7, 0.0},
    {"NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada", 364.25, 728.5},
    {"NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "RTX PRO 6000 Blackwell Workstation", 503.8, 1007.6},
    {"AMD Instinct MI250X", "MI250X", 191.5, 0.0},
    {"AMD Instinct MI250X / MI250", "MI250X", 191.5, 0.0},
    // A separator ends a model number, so what follows may be digits: "H200" then "141GB".
    {"NVIDIA H200 141GB HBM3e", "H200", 989.4, 1978.9},
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
  // The short names of the new rows are inside longer ones: H20 in H200, L4 and L40 in L40S, L4 in L40.
  EXPECT_STREQ(find_peak("NVIDIA H200", peak_precision::bf16)->entry->name, "H200");
  EXPECT_STREQ(find_peak("NVIDIA H200 NVL", peak_precision::bf16)->entry->name, "H200 NVL");
  EXPECT_STREQ(find_peak("NVIDIA L40S", peak_precision::bf16)->entry->name, "L40S");
  EXPECT_STREQ(find_peak("NVIDIA L40", peak_precision::bf16)->entry->name, "L40");
}

// A model number that ends in a digit matches only as a whole number: the device name must not go on with a
// letter or digit after it. Without the rule, each of these would take a short row's figure (A10 125, A40 149.7,
// L4 121, H20 148) for a GPU with a different peak, or guess between variants.
TEST(PeakTable, ShortModelNumbersMatchOnlyAsWholeNumbers) {
  for (const char* device : {"NVIDIA A100",       // SXM or PCIe: ambiguous, not an A10
                             "A100",              //
                             "NVIDIA A10G",       // AWS's A10G: another clock and peak
                             "NVIDIA RTX A4000",  // not an A40
                             "NVIDIA RTX A1000",  // not an A10
                             "NVIDIA L40G",       // not an L40 (hypothetical suffix)
                             "NVIDIA H20X",       //
                             "NVIDIA H2000"}) {
    SCOPED_TRACE(device);
    EXPECT_FALSE(find_peak(device, peak_precision::bf16).has_value());
  }
  // A letter ends a row name like "A100 SXM" anywhere, as before: "A100-SXM4" is an A100 SXM.
  EXPECT_STREQ(find_peak("NVIDIA A100-SXM4-40GB", peak_precision::bf16)->entry->name, "A100 SXM");
}

TEST(PeakTable, UnknownOrAmbiguousDeviceHasNoNumber) {
  EXPECT_FALSE(find_peak("NVIDIA GeForce RTX 4090", peak_precision::bf16).has_value());
  EXPECT_FALSE(find_peak("RTX 4090", peak_precision::bf16).has_value());
  // Bare "H100" could be SXM (989.4), NVL (835.5) or PCIe (756.5): no guess.
  EXPECT_FALSE(find_peak("H100", peak_precision::bf16).has_value());
  EXPECT_FALSE(find_peak("NVIDIA H100", peak_precision::bf16).has_value());
  EXPECT_FALSE(find_peak("", peak_precision::bf16).has_value());
  // H800 alone could be the SXM (989.4) or the PCIe card (756.5); its NVL version has no row.
  EXPECT_FALSE(find_peak("NVIDIA H800", peak_precision::bf16).has_value());
  EXPECT_FALSE(find_peak("NVIDIA H800 NVL", peak_precision::bf16).has_value());
  // Only the RTX PRO 6000 Blackwell Workstation Edition has a row: the Max-Q and Server Editions run at other
  // clocks, and the bare name could be any of them.
  EXPECT_FALSE(find_peak("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", peak_precision::bf16));
  EXPECT_FALSE(find_peak("NVIDIA RTX PRO 6000 Blackwell Server Edition", peak_precision::bf16));
  EXPECT_FALSE(find_peak("NVIDIA RTX PRO 6000 Blackwell", peak_precision::bf16));
  EXPECT_FALSE(find_peak("AMD Instinct MI250", peak_precision::bf16).has_value());  // MI250 is not MI250X
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
  // Every row is pinned by a hand-derived case above.
  EXPECT_EQ(peak_table().size(), std::size(kByTableName));
  for (const peak_case& c : kByTableName) EXPECT_EQ(names.count(c.row), 1u) << c.row;
}

TEST(PeakTable, EveryAliasStandsForARowAndIsFound) {
  ASSERT_EQ(peak_aliases().size(), 3u);  // H100 80GB HBM3, A100 80GB PCIe, H800 80GB HBM3
  for (const peak_alias& alias : peak_aliases()) {
    SCOPED_TRACE(alias.name);
    const auto found = find_peak(alias.name, peak_precision::bf16);
    ASSERT_TRUE(found.has_value());
    EXPECT_STREQ(found->entry->name, alias.row);
    EXPECT_GT(std::string(alias.source).size(), 20u);
  }
}

TEST(PeakTable, AutoIsRecognisedInAnyCase) {
  for (const char* gpu : {"auto", "AUTO", "Auto", " auto "}) EXPECT_TRUE(is_auto_gpu(gpu)) << gpu;
  for (const char* gpu : {"", "autos", "au to", "H100 SXM", "automatic"}) EXPECT_FALSE(is_auto_gpu(gpu)) << gpu;
}

// resolve_peak: what the plugin and the Python package (torch.cuda.get_device_name()) call.
TEST(PeakTable, ResolveAutoWithTheDeviceName) {
  const peak_resolution h800 = resolve_peak("auto", "NVIDIA H800 80GB HBM3", peak_precision::bf16);
  EXPECT_EQ(h800.device, "NVIDIA H800 80GB HBM3");
  ASSERT_TRUE(h800.match.has_value());
  EXPECT_STREQ(h800.match->entry->name, "H800 SXM");
  EXPECT_DOUBLE_EQ(h800.match->tflops, 989.4);
  EXPECT_TRUE(h800.warning.empty());
  const peak_resolution fp8 = resolve_peak("Auto", "NVIDIA L4", peak_precision::fp8);
  ASSERT_TRUE(fp8.match.has_value());
  EXPECT_DOUBLE_EQ(fp8.match->tflops, 242.5);
  // The configured name is used as is when it is not "auto"; the device name is then ignored.
  const peak_resolution named = resolve_peak("H20", "NVIDIA H100 80GB HBM3", peak_precision::bf16);
  EXPECT_EQ(named.device, "H20");
  EXPECT_DOUBLE_EQ(named.match->tflops, 148.0);
}

TEST(PeakTable, ResolveWithoutANumberSaysWhyInOneWarning) {
  // An unknown device found by "auto": named, no number.
  const peak_resolution unknown = resolve_peak("auto", "NVIDIA GeForce RTX 4090", peak_precision::bf16);
  EXPECT_FALSE(unknown.match.has_value());
  EXPECT_EQ(unknown.warning.rfind("no bf16 peak FLOP/s for GPU 'NVIDIA GeForce RTX 4090' (the device gpu = "
                                  "\"auto\" found); perf/mfu will not be reported. Set peak_tflops_per_gpu, or gpu "
                                  "to one of: A100 SXM, ",
                                  0),
            0u)
      << unknown.warning;
  EXPECT_NE(unknown.warning.find("`flopmeter peaks`"), std::string::npos);
  // No device at all: the reason is named.
  const peak_resolution none = resolve_peak("auto", "", peak_precision::bf16, "no CUDA driver");
  EXPECT_FALSE(none.match.has_value());
  EXPECT_EQ(none.device, "");
  EXPECT_EQ(none.warning.rfind("gpu = \"auto\" found no GPU (no CUDA driver); perf/mfu will not be reported.", 0), 0u)
      << none.warning;
  // A configured name without the precision: the precision is named.
  const peak_resolution a10 = resolve_peak("NVIDIA A10", "", peak_precision::fp8);
  EXPECT_FALSE(a10.match.has_value());
  EXPECT_EQ(a10.warning.rfind("no fp8 peak FLOP/s for GPU 'NVIDIA A10'; perf/mfu", 0), 0u) << a10.warning;
  // A hostile device name cannot drive the terminal the warning is printed on.
  const peak_resolution hostile = resolve_peak("auto", "Z\x1b[2J", peak_precision::bf16);
  EXPECT_EQ(hostile.warning.find('\x1b'), std::string::npos);
  EXPECT_NE(hostile.warning.find("Z\\u001b[2J"), std::string::npos) << hostile.warning;
}

TEST(PeakTable, PrecisionNames) {
  EXPECT_STREQ(to_string(peak_precision::bf16), "bf16");
  EXPECT_STREQ(to_string(peak_precision::fp8), "fp8");
}

}  // namespace
}  // namespace flopmeter
