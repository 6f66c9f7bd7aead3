// flopmeter's one JSON writer (plugin/output/json_writer.h) and the JSONL sink that uses it. Expected texts
// are written out by hand from the rules in json_writer.h; every output is also read back with nlohmann-json
// (an independent, strict parser), which must give back the same double bit for bit and the same string.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "flopmeter/sinks.h"
#include "output/json_writer.h"
#include "output/model_report.h"

namespace {

using flopmeter::detail::json_number;
using flopmeter::detail::json_object;
using flopmeter::detail::json_string;
using json = nlohmann::json;

std::uint64_t bits_of(double value) {
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

TEST(JsonWriter, NumbersAreShortestRoundTrip) {
  struct number_case {
    double value;
    const char* text;
  };
  const number_case cases[] = {
      {41.2, "41.2"},                          // %.17g would print 41.200000000000003
      {0.1 + 0.2, "0.30000000000000004"},      // the sum is not 0.3: 17 digits are needed here
      {1.0 / 3.0, "0.3333333333333333"},       // 16 digits suffice
      {20.0, "20"},                            // integral: no ".0", no exponent
      {-7.0, "-7"},
      {11731992576.0, "11731992576"},          // the CLI's Megatron constant
      {9007199254740994.0, "9007199254740994"},  // 2^53 + 2, integral above 2^53
      {1e20, "100000000000000000000"},         // integral below 1e21: fixed, as JSON.stringify
      {1e21, "1e+21"},                         // from 1e21 on: exponent form
      {1.5e300, "1.5e+300"},
      {1e-7, "1e-07"},
      {0.5, "0.5"},
      {5e-324, "5e-324"},                      // the smallest subnormal
      {std::numeric_limits<double>::max(), "1.7976931348623157e+308"},
      {0.0, "0"},
      {-0.0, "0"},                             // JSON readers differ on -0; flopmeter writes 0
  };
  for (const number_case& c : cases) {
    EXPECT_EQ(json_number(c.value), c.text) << c.text;
    if (c.value != 0) {
      EXPECT_EQ(bits_of(json::parse(json_number(c.value)).get<double>()), bits_of(c.value)) << c.text;
    }
  }
  EXPECT_EQ(json_number(std::numeric_limits<double>::quiet_NaN()), "null");
  EXPECT_EQ(json_number(std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(json_number(-std::numeric_limits<double>::infinity()), "null");
}

TEST(JsonWriter, RandomDoublesRoundTripThroughAnIndependentParser) {
  std::mt19937_64 rng(42);
  for (int i = 0; i < 20000; ++i) {
    std::uint64_t bits = rng();
    double value = 0;
    std::memcpy(&value, &bits, sizeof value);
    if (!std::isfinite(value) || value == 0) continue;
    const std::string text = json_number(value);
    EXPECT_EQ(bits_of(json::parse(text).get<double>()), bits) << text;
    EXPECT_EQ(text.find_first_not_of("0123456789+-.e"), std::string::npos) << text;
  }
}

TEST(JsonWriter, StringsEscapeQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(json_string("perf/mfu"), "\"perf/mfu\"");
  EXPECT_EQ(json_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(json_string("\b\f\n\r\t"), "\"\\b\\f\\n\\r\\t\"");
  EXPECT_EQ(json_string(std::string("\x00\x01\x1b\x1f\x7f", 5)), "\"\\u0000\\u0001\\u001b\\u001f\\u007f\"");
  EXPECT_EQ(json_string(" ~"), "\" ~\"");  // 0x20 and 0x7E are printable
  // Valid UTF-8 passes through: é (2 bytes), € (3 bytes), 😀 (4 bytes).
  const std::string utf8 = "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80";
  EXPECT_EQ(json_string(utf8), "\"" + utf8 + "\"");
  EXPECT_EQ(json::parse(json_string(utf8)).get<std::string>(), utf8);
}

TEST(JsonWriter, InvalidUtf8BecomesOneReplacementCharacterPerByte) {
  struct utf8_case {
    std::string bytes;
    const char* json;
    const char* why;
  };
  const utf8_case cases[] = {
      {"a\x80" "b", "\"a\\ufffdb\"", "a lone continuation byte"},
      {"\xC3", "\"\\ufffd\"", "a 2-byte sequence cut short"},
      {"\xE2\x82", "\"\\ufffd\\ufffd\"", "a 3-byte sequence cut short: each byte replaced"},
      {"\xC0\xAF", "\"\\ufffd\\ufffd\"", "an overlong '/'"},
      {"\xE0\x80\xAF", "\"\\ufffd\\ufffd\\ufffd\"", "an overlong 3-byte '/'"},
      {"\xED\xA0\x80", "\"\\ufffd\\ufffd\\ufffd\"", "a UTF-16 surrogate (U+D800)"},
      {"\xF4\x90\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\"", "above U+10FFFF"},
      {"\xFF", "\"\\ufffd\"", "never valid in UTF-8"},
  };
  for (const utf8_case& c : cases) {
    EXPECT_EQ(json_string(c.bytes), c.json) << c.why;
    EXPECT_NO_THROW(json::parse(json_string(c.bytes))) << c.why;
  }
}

TEST(JsonWriter, ObjectsKeepKeyOrderAndSeparators) {
  json_object spaced;
  spaced.string("model", "x").integer("n", -3).number("r", 0.25).boolean("ok", true).null("none").raw("a", "[1]");
  EXPECT_EQ(spaced.str(), "{\"model\": \"x\", \"n\": -3, \"r\": 0.25, \"ok\": true, \"none\": null, \"a\": [1]}");
  json_object compact(false);
  compact.integer("step", 5).number("perf/mfu", 41.2);
  EXPECT_EQ(compact.str(), "{\"step\":5,\"perf/mfu\":41.2}");
  EXPECT_EQ(json_object().str(), "{}");
}

// A report's entries (model_report.h) render as nested objects and arrays: a path component that is an index
// opens an array, consecutive entries under the same prefix share its container, an empty_list entry is [].
TEST(JsonWriter, ReportEntriesRenderAsNestedObjectsAndArrays) {
  using flopmeter::detail::report_entry;
  using flopmeter::detail::report_kind;
  const auto integer = [](const char* key, std::int64_t v) {
    return report_entry{key, report_kind::integer, v, 0, ""};
  };
  const auto text = [](const char* key, const char* v) { return report_entry{key, report_kind::text, 0, 0, v}; };
  const flopmeter::detail::report_entries entries = {
      text("model", "m"),
      report_entry{"frozen", report_kind::empty_list, 0, 0, ""},
      integer("pairs/0", 2),
      integer("pairs/1", 3),
      text("windows/0/kind", "sliding"),
      integer("windows/0/size", 128),
      text("windows/1/kind", "chunked"),
      integer("windows/1/size", 8192),
      report_entry{"recompute/settings/vision", report_kind::boolean, 1, 0, ""},
      report_entry{"recompute/total", report_kind::number, 0, 0.5, ""},
      report_entry{"recompute/ratio", report_kind::number, 0, std::nan(""), ""},
      integer("n", -1),
  };
  // Written out by hand with json_object's separators (", " and ": "); the NaN is null.
  EXPECT_EQ(flopmeter::detail::report_json(entries),
            "{\"model\": \"m\", \"frozen\": [], \"pairs\": [2, 3], \"windows\": [{\"kind\": \"sliding\", "
            "\"size\": 128}, {\"kind\": \"chunked\", \"size\": 8192}], \"recompute\": {\"settings\": {\"vision\": "
            "true}, \"total\": 0.5, \"ratio\": null}, \"n\": -1}");
  EXPECT_EQ(flopmeter::detail::report_json({}), "{}");
}

// The JSONL sink writes through the writer: each line parses, in order, with the same values.
TEST(JsonWriter, JsonlSinkLinesParseBackToTheRecord) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("flopmeter_json_writer_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                                     "_" + std::to_string(reinterpret_cast<std::uintptr_t>(&dir)));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "metrics.jsonl").string();
  {
    auto sink = flopmeter::make_jsonl_sink(path);
    flopmeter::metrics_record r;
    r.step = 20;
    r.values = {{"perf/tokens_per_second", 123456.5}, {"perf/mfu", 41.2}, {"train/loss", 0.1 + 0.2},
                {"perf/tflops_per_second", std::numeric_limits<double>::quiet_NaN()}, {"train/tokens_seen", 1e20}};
    sink->write(r);
    r.step = 40;
    r.values = {{"perf/mfu", 1e-7}};
    sink->write(r);
    EXPECT_EQ(sink->failures(), 0u);
  }
  std::ifstream in(path);
  std::string first, second, extra;
  ASSERT_TRUE(std::getline(in, first));
  ASSERT_TRUE(std::getline(in, second));
  EXPECT_FALSE(std::getline(in, extra));
  EXPECT_EQ(first,
            "{\"step\":20,\"perf/tokens_per_second\":123456.5,\"perf/mfu\":41.2,\"train/loss\":0.30000000000000004,"
            "\"perf/tflops_per_second\":null,\"train/tokens_seen\":100000000000000000000}");
  const json a = json::parse(first);
  EXPECT_EQ(a.at("step").get<std::int64_t>(), 20);
  EXPECT_EQ(a.at("perf/mfu").get<double>(), 41.2);
  EXPECT_EQ(a.at("train/loss").get<double>(), 0.1 + 0.2);
  EXPECT_TRUE(a.at("perf/tflops_per_second").is_null());
  EXPECT_EQ(a.at("train/tokens_seen").get<double>(), 1e20);
  const json b = json::parse(second);
  EXPECT_EQ(b.at("step").get<std::int64_t>(), 40);
  EXPECT_EQ(b.at("perf/mfu").get<double>(), 1e-7);
  std::filesystem::remove_all(dir);
}

}  // namespace
