// Records, coefficients and estimates as values (flopmeter/c_api_values.h), through the shared library as a
// trainer links it: every value equals the one the JSON text of the same record or report carries (the
// deprecated JSON entry points, read with nlohmann-json), and the names table keeps each name's index.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "flopmeter/c_api.h"
#include "support/json_reading.h"

namespace {

namespace fs = std::filesystem;

struct record_copy {
  std::int64_t step = 0;
  std::vector<std::uint32_t> indices;
  std::vector<std::string> names;  // by the table, in the record's order
  std::vector<double> values;
  std::vector<std::string> table;  // the whole names table as it stood
};

struct capture {
  std::vector<record_copy> records;
  std::vector<std::string> lines;  // the JSON callback's, for the same records
};

void on_record(void* user, const flopmeter_record* r) {
  record_copy copy;
  EXPECT_EQ(r->struct_size, sizeof(flopmeter_record));
  copy.step = r->step;
  for (std::size_t i = 0; i < r->num_names; ++i) copy.table.emplace_back(r->name_table[i]);
  for (std::size_t i = 0; i < r->num_values; ++i) {
    EXPECT_LT(r->names[i], r->num_names);
    copy.indices.push_back(r->names[i]);
    copy.names.emplace_back(r->name_table[r->names[i]]);
    copy.values.push_back(r->values[i]);
  }
  static_cast<capture*>(user)->records.push_back(std::move(copy));
}

void on_line(void* user, int64_t, const char* json) { static_cast<capture*>(user)->lines.emplace_back(json); }

fs::path write_config() {
  const fs::path path = fs::temp_directory_path() / ("flopmeter_c_api_values_" + std::to_string(::getpid()) + ".toml");
  std::ofstream(path) << "[model]\nconfig = \"" FLOPMETER_SOURCE_DIR "/model_configs/qwen3_vl_2b.toml\"\n"
                      << "[peak]\ntflops_per_gpu = 100.0\n[sinks]\nconsole = false\n";
  return path;
}

flopmeter_log log_at(std::int64_t step, bool with_learning_rate) {
  flopmeter_log l{};
  l.struct_size = sizeof(l);
  l.step = step;
  if (with_learning_rate) {
    l.set_fields = FLOPMETER_LOG_LEARNING_RATE;
    l.learning_rate = 3e-4;
  }
  return l;
}

TEST(c_api_values, a_record_carries_the_json_lines_names_and_values_and_a_name_keeps_its_index) {
  const fs::path config = write_config();
  char error[512] = {};
  flopmeter_plugin* plugin = flopmeter_create(config.c_str(), nullptr, error, sizeof(error));
  ASSERT_NE(plugin, nullptr) << error;
  capture out;
  ASSERT_EQ(flopmeter_set_record_callback(plugin, on_record, &out), FLOPMETER_OK);
  ASSERT_EQ(flopmeter_set_metrics_callback(plugin, on_line, &out), FLOPMETER_OK);
  const std::vector<int64_t> docs = {100, 24};
  flopmeter_microbatch m{};
  m.struct_size = sizeof(m);
  m.document_lengths = docs.data();
  m.num_document_lengths = docs.size();
  m.samples = 1;
  // Step 1 without a learning rate, step 2 with one: the second record has a name the first had not.
  for (const std::int64_t step : {1, 2}) {
    ASSERT_EQ(flopmeter_on_microbatch(plugin, &m), FLOPMETER_OK);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // keeps the MFU below 100% of the peak
    const flopmeter_log l = log_at(step, step == 2);
    ASSERT_EQ(flopmeter_on_log(plugin, &l), FLOPMETER_OK);
  }
  ASSERT_EQ(flopmeter_flush(plugin), FLOPMETER_OK);
  ASSERT_EQ(flopmeter_destroy(plugin), FLOPMETER_OK);
  fs::remove(config);

  ASSERT_EQ(out.records.size(), 2u);
  ASSERT_EQ(out.lines.size(), 2u);
  for (std::size_t k = 0; k < 2; ++k) {
    const record_copy& r = out.records[k];
    // ordered_json keeps the line's key order (nlohmann::json sorts keys).
    const nlohmann::ordered_json line = nlohmann::ordered_json::parse(out.lines[k]);
    EXPECT_EQ(r.step, static_cast<std::int64_t>(k) + 1);
    // The line is {"step": N, then the values in the record's order}: the same names, the same order.
    std::vector<std::string> keys;
    for (auto it = line.begin(); it != line.end(); ++it) keys.push_back(it.key());
    ASSERT_FALSE(keys.empty());
    EXPECT_EQ(keys.front(), "step");
    EXPECT_EQ(std::vector<std::string>(keys.begin() + 1, keys.end()), r.names);
    for (std::size_t i = 0; i < r.names.size(); ++i) {
      const nlohmann::ordered_json& value = line.at(r.names[i]);
      if (std::isfinite(r.values[i])) {
        EXPECT_EQ(value.get<double>(), r.values[i]) << r.names[i];  // the shortest decimal reads back exactly
      } else {
        EXPECT_TRUE(value.is_null()) << r.names[i];
      }
    }
  }
  const record_copy& first = out.records[0];
  const record_copy& second = out.records[1];
  EXPECT_EQ(std::count(first.names.begin(), first.names.end(), "train/lr"), 0);
  EXPECT_EQ(std::count(second.names.begin(), second.names.end(), "train/lr"), 1);
  // The table only grows: the first record's table is the start of the second's, and train/lr, new in the
  // second record, is appended after it.
  ASSERT_GT(second.table.size(), first.table.size());
  EXPECT_EQ(std::vector<std::string>(second.table.begin(), second.table.begin() + first.table.size()), first.table);
  for (std::size_t i = 0; i < second.names.size(); ++i) {
    if (second.names[i] == "train/lr") {
      EXPECT_GE(second.indices[i], first.table.size());
    }
  }
  // The first record's names took the table's indices in their order of appearance: 0, 1, 2, ...
  for (std::size_t i = 0; i < first.indices.size(); ++i) EXPECT_EQ(first.indices[i], i);
}

// Every leaf of `json` (an empty array counts as one): what a report's entries must cover, one each.
std::size_t leaves(const nlohmann::json& json) {
  if (!json.is_structured() || json.empty()) return 1;
  std::size_t n = 0;
  for (const auto& child : json) n += leaves(child);
  return n;
}

// Each entry of report `report` against the JSON text of the same report: the key as a JSON pointer finds a
// value of the entry's kind and value, and the entries are all the leaves.
void expect_values_equal_json(const flopmeter_model* model, int report,
                              const std::vector<flopmeter_report_value>& values, const nlohmann::json& json) {
  std::size_t n = 0;
  int kind = -1;
  for (const char* key; (key = flopmeter_model_report_key(model, report, static_cast<uint32_t>(n), &kind)) != nullptr;
       ++n) {
    ASSERT_LT(n, values.size());
    const nlohmann::json& leaf = json.at(nlohmann::json::json_pointer("/" + std::string(key)));
    const flopmeter_report_value& v = values[n];
    switch (kind) {
      case FLOPMETER_VALUE_INTEGER: EXPECT_EQ(leaf.get<std::int64_t>(), v.integer) << key; break;
      case FLOPMETER_VALUE_NUMBER:
        if (std::isnan(v.number)) {
          EXPECT_TRUE(leaf.is_null()) << key;
        } else {
          EXPECT_EQ(leaf.get<double>(), v.number) << key;
        }
        break;
      case FLOPMETER_VALUE_BOOLEAN: EXPECT_EQ(leaf.get<bool>(), v.integer != 0) << key; break;
      case FLOPMETER_VALUE_TEXT:
        ASSERT_NE(v.text, nullptr) << key;
        EXPECT_EQ(leaf.get<std::string>(), v.text) << key;
        break;
      case FLOPMETER_VALUE_EMPTY_LIST: EXPECT_TRUE(leaf.is_array() && leaf.empty()) << key; break;
      default: ADD_FAILURE() << key << ": kind " << kind;
    }
  }
  EXPECT_EQ(n, values.size());
  EXPECT_EQ(n, leaves(json));
}

std::string json_text(const std::function<int64_t(char*, size_t)>& call) {
  const int64_t size = call(nullptr, 0);
  EXPECT_GT(size, 0);
  std::string text(static_cast<std::size_t>(size) + 1, '\0');
  call(text.data(), text.size());
  text.resize(static_cast<std::size_t>(size));
  return text;
}

TEST(c_api_values, coefficients_and_estimates_are_the_json_reports_values) {
  char error[512] = {};
  // gpt_oss_20b has attention windows (arrays of numbers and of objects); qwen3_vl_2b a vision tower.
  for (const char* name : {"gpt_oss_20b", "qwen3_vl_2b"}) {
    const std::string path = std::string(FLOPMETER_SOURCE_DIR "/model_configs/") + name + ".toml";
    flopmeter_model* base = flopmeter_model_load(path.c_str(), error, sizeof(error));
    ASSERT_NE(base, nullptr) << error;
    // A frozen vision side and LoRA: texts in arrays ("frozen", "lora_targets").
    const char* targets[] = {"q_proj", "v_proj"};
    flopmeter_model_options options{};
    options.struct_size = sizeof(options);
    options.vision_frozen = std::string(name) == "qwen3_vl_2b";
    options.lora_rank = 8;
    options.lora_targets = targets;
    options.num_lora_targets = 2;
    flopmeter_model* regime = flopmeter_model_with_options(base, &options, error, sizeof(error));
    ASSERT_NE(regime, nullptr) << error;
    for (flopmeter_model* model : {base, regime}) {
      const int64_t n = flopmeter_model_coefficients(model, nullptr, 0);
      ASSERT_GT(n, 0);
      std::vector<flopmeter_report_value> values(static_cast<std::size_t>(n));
      ASSERT_EQ(flopmeter_model_coefficients(model, values.data(), values.size()), n);
      expect_values_equal_json(model, FLOPMETER_REPORT_COEFFICIENTS, values,
                               flopmeter::testing::parse_json(json_text([&](char* out, size_t size) {
                                 return flopmeter_model_coefficients_json(model, out, size);
                               })));
      // Counts of two documents and (for the VLM) one image, both scopes, with and without a row length.
      flopmeter_counts counts{};
      counts.struct_size = sizeof(counts);
      const std::vector<int64_t> docs = {300, 21};
      const std::vector<flopmeter_grid> grids = {{1, 8, 8}};
      flopmeter_microbatch m{};
      m.struct_size = sizeof(m);
      m.document_lengths = docs.data();
      m.num_document_lengths = docs.size();
      if (std::string(name) == "qwen3_vl_2b") {
        m.grids = grids.data();
        m.num_grids = grids.size();
      }
      ASSERT_EQ(flopmeter_model_count(model, &m, &counts, error, sizeof(error)), FLOPMETER_OK) << error;
      for (const int scope : {FLOPMETER_SCOPE_COMPLETE, FLOPMETER_SCOPE_SEED}) {
        for (const int64_t seq_len : {int64_t{0}, int64_t{4096}}) {
          std::vector<flopmeter_report_value> estimate(64);
          const int64_t count =
              flopmeter_model_estimate(model, &counts, scope, seq_len, estimate.data(), estimate.size());
          ASSERT_GT(count, 0);
          ASSERT_LE(count, 64);
          estimate.resize(static_cast<std::size_t>(count));
          expect_values_equal_json(model, FLOPMETER_REPORT_ESTIMATE, estimate,
                                   flopmeter::testing::parse_json(json_text([&](char* out, size_t size) {
                                     return flopmeter_model_estimate_json(model, &counts, scope, seq_len, out, size);
                                   })));
        }
      }
      // An empty batch: no row length, so the Megatron figures are NaN (null in the JSON).
      flopmeter_counts empty{};
      empty.struct_size = sizeof(empty);
      std::vector<flopmeter_report_value> estimate(64);
      const int64_t count = flopmeter_model_estimate(model, &empty, FLOPMETER_SCOPE_COMPLETE, 0, estimate.data(), 64);
      ASSERT_GT(count, 0);
      estimate.resize(static_cast<std::size_t>(count));
      expect_values_equal_json(model, FLOPMETER_REPORT_ESTIMATE, estimate,
                               flopmeter::testing::parse_json(json_text([&](char* out, size_t size) {
                                 return flopmeter_model_estimate_json(model, &empty, FLOPMETER_SCOPE_COMPLETE, 0, out,
                                                                      size);
                               })));
    }
    EXPECT_EQ(flopmeter_model_destroy(regime), FLOPMETER_OK);
    EXPECT_EQ(flopmeter_model_destroy(base), FLOPMETER_OK);
  }
}

TEST(c_api_values, bad_arguments_are_refused_and_a_short_buffer_is_filled_as_far_as_it_goes) {
  char error[512] = {};
  flopmeter_model* model =
      flopmeter_model_load(FLOPMETER_SOURCE_DIR "/model_configs/qwen3_vl_2b.toml", error, sizeof(error));
  ASSERT_NE(model, nullptr) << error;
  int kind = -1;
  EXPECT_EQ(flopmeter_model_report_key(model, 2, 0, &kind), nullptr);  // no report 2
  EXPECT_EQ(flopmeter_model_report_key(nullptr, FLOPMETER_REPORT_COEFFICIENTS, 0, &kind), nullptr);
  // The first key of the coefficients report is the model's name (`flopmeter coefficients --json`).
  EXPECT_STREQ(flopmeter_model_report_key(model, FLOPMETER_REPORT_COEFFICIENTS, 0, &kind), "model");
  EXPECT_EQ(kind, FLOPMETER_VALUE_TEXT);
  flopmeter_report_value one[1] = {};
  const int64_t n = flopmeter_model_coefficients(model, one, 1);
  EXPECT_GT(n, 1);  // the full count, with only the first value written
  EXPECT_STREQ(one[0].text, "qwen3_vl_2b");
  flopmeter_counts counts{};
  counts.struct_size = sizeof(counts);
  EXPECT_EQ(flopmeter_model_estimate(model, &counts, 7, 0, nullptr, 0), FLOPMETER_E_REJECTED);  // unknown scope
  EXPECT_EQ(flopmeter_model_estimate(model, &counts, FLOPMETER_SCOPE_COMPLETE, -1, nullptr, 0), FLOPMETER_E_REJECTED);
  EXPECT_EQ(flopmeter_model_estimate(model, nullptr, FLOPMETER_SCOPE_COMPLETE, 0, nullptr, 0),
            FLOPMETER_E_NULL_ARGUMENT);
  EXPECT_EQ(flopmeter_model_destroy(model), FLOPMETER_OK);
  EXPECT_EQ(flopmeter_model_coefficients(model, nullptr, 0), FLOPMETER_E_INVALID_HANDLE);
  EXPECT_EQ(flopmeter_model_report_key(model, FLOPMETER_REPORT_COEFFICIENTS, 0, &kind), nullptr);
}

}  // namespace
