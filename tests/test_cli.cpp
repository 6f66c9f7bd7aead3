// Tests of the `flopmeter` command-line tool, run as a subprocess (FLOPMETER_CLI_PATH) with stdout, stderr
// and the exit status captured. The expected numbers are derived by hand in the comments from the
// architecture facts in model_configs/ (qwen3_vl_2b: h=2048, L=28, nh=16, nkv=8, hd=128, I=6144, V=151936;
// ViT depth 24, hv=1024, Iv=4096, patch input 3*2*16^2=1536, spatial_merge_size 2, 3 DeepStack indexes).
// The JSON output is read with nlohmann-json (strict), so malformed JSON fails the tests.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "flopmeter/peak_table.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;

const std::string kSourceDir = FLOPMETER_SOURCE_DIR;
const std::string kConfigs = kSourceDir + "/model_configs";
const std::string kQwen3Vl2b = kConfigs + "/qwen3_vl_2b.toml";

// ---------------------------------------------------------------------------------------------------------
// JSON output is read with nlohmann-json: parse() is strict (RFC 8259) and throws on malformed text, and
// at() throws on a missing key or index, so a malformed document or a missing field fails the test.
using json = nlohmann::json;
using flopmeter::peak_alias;
using flopmeter::peak_aliases;
using flopmeter::peak_entry;
using flopmeter::peak_table;

json parse_json(const std::string& text) { return json::parse(text); }

// ---------------------------------------------------------------------------------------------------------
// Running the tool.
struct result {
  int status = -1;  // exit code; -1 when the process did not exit normally (crash, abort)
  std::string out;
  std::string err;
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "flopmeter_test_cli_XXXXXX").string();
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    ASSERT_NE(::mkdtemp(buffer.data()), nullptr);
    dir_ = buffer.data();
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  // Runs the tool with `args`. FLOPMETER_MODEL_CONFIGS is set to `configs` ("" removes it from the
  // environment, so the tool falls back to the source tree), so the user's environment cannot change
  // what the tests see.
  result run(const std::vector<std::string>& args, const std::string& configs = kConfigs) {
    const fs::path out_path = dir_ / ("stdout_" + std::to_string(runs_));
    const fs::path err_path = dir_ / ("stderr_" + std::to_string(runs_));
    ++runs_;
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::strncmp(*e, "FLOPMETER_MODEL_CONFIGS=", 24) != 0) env_strings.emplace_back(*e);
    }
    if (!configs.empty()) env_strings.push_back("FLOPMETER_MODEL_CONFIGS=" + configs);
    std::vector<char*> envp;
    for (std::string& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> argv_strings = {FLOPMETER_CLI_PATH};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& s : argv_strings) argv.push_back(s.data());
    argv.push_back(nullptr);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    pid_t pid = 0;
    const int spawn_error = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    result r;
    if (spawn_error != 0) {
      ADD_FAILURE() << "posix_spawn(" << argv[0] << ") failed: " << std::strerror(spawn_error);
      return r;
    }
    int wait_status = 0;
    while (waitpid(pid, &wait_status, 0) < 0) {
    }
    r.status = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : -1;
    r.out = read_file(out_path);
    r.err = read_file(err_path);
    return r;
  }

  fs::path dir_;
  int runs_ = 0;
};

std::string describe(const std::vector<std::string>& args, const result& r) {
  std::string text = "flopmeter";
  for (const std::string& a : args) text += " '" + a + "'";
  return text + "\n  exit " + std::to_string(r.status) + "\n  stdout: " + r.out + "\n  stderr: " + r.err;
}

// The shipped configs' names (the .toml files' stems), sorted as strings: the order the CLI takes them in.
std::vector<std::string> shipped_model_names() {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(kConfigs)) {
    if (entry.path().extension() == ".toml") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}
std::size_t shipped_model_count() { return shipped_model_names().size(); }

// ---------------------------------------------------------------------------------------------------------
// Hand-derived numbers for qwen3_vl_2b (see the file comment for the sizes).
//
// dense_per_token = 6 * (L*(h*(q + 2kv + q) + 3*h*I) + h*V) with q = nh*hd = 2048, kv = nkv*hd = 1024
//   = 6 * (28*(2048*6144 + 3*2048*6144) + 2048*151936)
//   = 6 * (28*(12582912 + 37748736) + 311164928) = 6 * 1720451072 = 10322706432
constexpr double kDense = 10322706432.0;
// text_attn_pair = 6 * 2*nh*hd * L = 6 * 2*16*128 * 28 = 688128
constexpr double kTextPair = 688128.0;
// vision_per_patch = 6 * 24 * (4*1024^2 + 2*1024*4096) = 144 * 12582912 = 1811939328
constexpr double kVisionPatch = 1811939328.0;
// vision_attn_pair = 6 * 24 * 2*1024 = 294912
constexpr double kVisionPair = 294912.0;
// patch_embed_per_patch = 4 * 1536 * 1024 = 6291456 (pixels need no gradient: forward + weight gradient)
constexpr double kPatchEmbed = 6291456.0;
// merger_per_merged_token = 6 * (1 + 3 DeepStack) * ((4*1024)^2 + 4*1024*2048) = 24 * 25165824 = 603979776
constexpr double kMerger = 603979776.0;

// ---------------------------------------------------------------------------------------------------------
// Help, version, dispatch.

TEST_F(CliTest, TopLevelHelpListsCommands) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{{"--help"}, {"-h"}, {"help"}}) {
    const result r = run(args);
    EXPECT_EQ(r.status, 0) << describe(args, r);
    EXPECT_NE(r.out.find("check"), std::string::npos);
    EXPECT_NE(r.out.find("coefficients"), std::string::npos);
    EXPECT_NE(r.out.find("estimate"), std::string::npos);
    EXPECT_NE(r.out.find("peaks"), std::string::npos);
    EXPECT_EQ(r.err, "");
  }
}

TEST_F(CliTest, EveryCommandHasHelp) {
  for (const std::string command : {"check", "coefficients", "estimate", "import", "peaks"}) {
    const std::vector<std::vector<std::string>> variants = {
        {command, "--help"}, {command, "-h"}, {"help", command},
        {command, "--bogus", "--help"}};  // --help wins over otherwise bad arguments
    for (const std::vector<std::string>& args : variants) {
      const result r = run(args);
      EXPECT_EQ(r.status, 0) << describe(args, r);
      EXPECT_NE(r.out.find("usage: flopmeter " + command), std::string::npos) << describe(args, r);
    }
  }
}

TEST_F(CliTest, VersionPrintsProjectVersion) {
  const result r = run({"--version"});
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out.rfind("flopmeter ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find('.'), std::string::npos) << r.out;
}

TEST_F(CliTest, MissingOrUnknownCommandIsUsageError) {
  result r = run({});
  EXPECT_EQ(r.status, 2) << describe({}, r);
  EXPECT_NE(r.err.find("missing command"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--help"), std::string::npos) << r.err;

  r = run({"frobnicate"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("unknown command 'frobnicate'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("flopmeter --help"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");

  r = run({"--frobnicate"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--frobnicate"), std::string::npos) << r.err;
}

// ---------------------------------------------------------------------------------------------------------
// check

TEST_F(CliTest, CheckOverShippedConfigsPasses) {
  const std::size_t models = shipped_model_count();
  ASSERT_GE(models, 5u);
  // Human table: every row PASS.
  result r = run({"check"});
  EXPECT_EQ(r.status, 0) << describe({"check"}, r);
  EXPECT_NE(r.out.find("PASS"), std::string::npos);
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("qwen3_vl_2b  S=32768  PASS"), std::string::npos) << r.out;

  // JSON: one object per (model, S) for S in {4096, 8192, 32768}, every one passing, every row passing.
  r = run({"check", "--json"});
  ASSERT_EQ(r.status, 0) << describe({"check", "--json"}, r);
  const json doc = parse_json(r.out);
  ASSERT_TRUE(doc.is_array());
  ASSERT_EQ(doc.size(), models * 3);
  std::map<std::string, int> per_model;
  for (std::size_t i = 0; i < doc.size(); ++i) {
    const json& report = doc.at(i);
    EXPECT_TRUE(report.at("pass").get<bool>()) << report.at("model").get<std::string>();
    const double expected_s[] = {4096, 8192, 32768};
    EXPECT_EQ(report.at("seq_len").get<double>(), expected_s[i % 3]);
    per_model[report.at("model").get<std::string>()] += 1;
    for (const char* key : {"megatron_text_per_token", "megatron_vision_per_token", "megatron_text_linear_per_token",
                            "megatron_text_attention_per_token", "megatron_vision_linear_per_token",
                            "megatron_vision_attention_per_token"}) {
      EXPECT_TRUE(report.at(key).is_number()) << key;
    }
    ASSERT_TRUE(report.at("rows").is_array());
    EXPECT_GE(report.at("rows").size(), 4u);
    for (const json& row : report.at("rows")) {
      EXPECT_TRUE(row.at("pass").get<bool>()) << row.at("term").get<std::string>();
      for (const char* key : {"exact", "megatron", "expected_ratio", "ratio", "relative_error"}) {
        EXPECT_TRUE(row.at(key).is_number()) << key;
      }
      EXPECT_FALSE(row.at("explanation").get<std::string>().empty());
    }
  }
  EXPECT_EQ(per_model.size(), models);
  // The text-only decoders are checked like the vision-language models, at every S.
  for (const char* text_only :
       {"qwen3_1_7b", "qwen3_8b", "qwen3_32b", "qwen3_30b_a3b", "qwen3_235b_a22b", "qwen3_next_80b_a3b"}) {
    EXPECT_EQ(per_model[text_only], 3) << text_only;
  }
  // Files are taken in name order (of the directory's .toml files, listed here), whatever the directory holds.
  const std::vector<std::string> names = shipped_model_names();
  EXPECT_EQ(doc.front().at("model").get<std::string>(), names.front());
  EXPECT_EQ(doc.back().at("model").get<std::string>(), names.back());
}

TEST_F(CliTest, CheckFindsSourceTreeConfigsWithoutEnvironment) {
  const result r = run({"check", "--seq-len", "64", "--json"}, "");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(parse_json(r.out).size(), shipped_model_count());
}

TEST_F(CliTest, CheckMegatronConstantOfQwen3Vl2bMatchesHandDerivation) {
  const std::vector<std::string> args = {"check", kQwen3Vl2b, "--seq-len", "4096", "--json"};
  const result r = run(args);
  ASSERT_EQ(r.status, 0) << describe(args, r);
  const json doc = parse_json(r.out);
  ASSERT_EQ(doc.size(), 1u);
  const json& report = doc.at(0);
  EXPECT_EQ(report.at("model").get<std::string>(), "qwen3_vl_2b");
  EXPECT_EQ(report.at("seq_len").get<double>(), 4096);
  // Megatron per token = 6*[L*(h*(q+2kv) + q*h) + L*3*h*I + h*V] + 6*L*2*q*S/2, q = 2048, kv = 1024:
  //   token-linear = 6*[28*(2048*4096 + 2048*2048) + 28*3*2048*6144 + 2048*151936]
  //                = 6*[352321536 + 1056964608 + 311164928] = 6*1720451072 = 10322706432
  //   attention    = 6*28*2*2048*4096/2 = 1409286144
  //   total        = 11731992576
  EXPECT_EQ(report.at("megatron_text_linear_per_token").get<double>(), 10322706432.0);
  EXPECT_EQ(report.at("megatron_text_attention_per_token").get<double>(), 1409286144.0);
  EXPECT_EQ(report.at("megatron_text_per_token").get<double>(), 11731992576.0);
  // ViT: 12*depth*hv^2*((1 + 1) + Iv/hv) = 12*24*1024^2*6 = 1811939328 token-linear, and
  // 12*depth*hv^2*(S/hv/2) = 6*24*1024*4096 = 603979776 attention.
  EXPECT_EQ(report.at("megatron_vision_linear_per_token").get<double>(), 1811939328.0);
  EXPECT_EQ(report.at("megatron_vision_attention_per_token").get<double>(), 603979776.0);
  EXPECT_EQ(report.at("megatron_vision_per_token").get<double>(), 2415919104.0);
  // Integral values are printed as integers (exact), not in exponent form.
  EXPECT_NE(r.out.find("\"megatron_text_per_token\": 11731992576,"), std::string::npos) << r.out;
}

TEST_F(CliTest, CheckUsesEnvironmentConfigsDirectoryAndRepeatedSeqLen) {
  const fs::path configs = dir_ / "configs";
  fs::create_directory(configs);
  fs::copy_file(kConfigs + "/tiny_vlm.toml", configs / "tiny_vlm.toml");
  write_file(configs / "README.md", "not a model\n");
  const result r = run({"check", "--seq-len", "100", "--seq-len=200", "--json"}, configs.string());
  ASSERT_EQ(r.status, 0) << r.err;
  const json doc = parse_json(r.out);
  ASSERT_EQ(doc.size(), 2u);
  EXPECT_EQ(doc.at(0).at("model").get<std::string>(), "tiny_vlm");
  EXPECT_EQ(doc.at(0).at("seq_len").get<double>(), 100);
  EXPECT_EQ(doc.at(1).at("seq_len").get<double>(), 200);

  // A bare model name is looked up in the same directory.
  const result named = run({"check", "tiny_vlm", "--seq-len", "8", "--json"}, configs.string());
  ASSERT_EQ(named.status, 0) << named.err;
  EXPECT_EQ(parse_json(named.out).size(), 1u);
}

TEST_F(CliTest, CheckWithEmptyOrMissingConfigsDirectoryFails) {
  const fs::path empty = dir_ / "empty";
  fs::create_directory(empty);
  result r = run({"check"}, empty.string());
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("no *.toml"), std::string::npos) << r.err;

  r = run({"check"}, (dir_ / "does_not_exist").string());
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("FLOPMETER_MODEL_CONFIGS"), std::string::npos) << r.err;
}

// ---------------------------------------------------------------------------------------------------------
// coefficients

TEST_F(CliTest, CoefficientsOfQwen3Vl2bMatchHandDerivation) {
  const result r = run({"coefficients", kQwen3Vl2b, "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  const json c = parse_json(r.out);
  EXPECT_EQ(c.at("model").get<std::string>(), "qwen3_vl_2b");
  EXPECT_EQ(c.at("dense_per_token").get<double>(), kDense);
  EXPECT_EQ(c.at("text_attn_pair").get<double>(), kTextPair);
  EXPECT_EQ(c.at("vision_per_patch").get<double>(), kVisionPatch);
  EXPECT_EQ(c.at("vision_attn_pair").get<double>(), kVisionPair);
  EXPECT_EQ(c.at("patch_embed_per_patch").get<double>(), kPatchEmbed);
  EXPECT_EQ(c.at("merger_per_merged_token").get<double>(), kMerger);
  EXPECT_EQ(c.at("mtp_per_token").get<double>(), 0);  // qwen3_vl has no MTP layers
  EXPECT_EQ(c.at("mtp_attn_pair").get<double>(), 0);
  EXPECT_EQ(c.at("patches_per_merged_token").get<double>(), 4);  // spatial_merge_size^2 = 2^2

  // Human form: labeled, grouped digits, a meaning per line; the bare name resolves to the shipped file.
  const result human = run({"coefficients", "qwen3_vl_2b"});
  ASSERT_EQ(human.status, 0) << human.err;
  EXPECT_NE(human.out.find("dense_per_token"), std::string::npos);
  EXPECT_NE(human.out.find("10,322,706,432"), std::string::npos) << human.out;
  EXPECT_NE(human.out.find("per (query, key) pair"), std::string::npos) << human.out;
}

// A model name (or a path) from a file is data: in text output its control characters are written as
// escapes, never as the bytes, so a config cannot clear the screen (ESC [2J), retitle the terminal or start
// a CSI sequence with the C1 byte U+009B. JSON output keeps the exact string (escaped as JSON).
TEST_F(CliTest, TextOutputEscapesControlCharacters) {
  std::string text = read_file(kConfigs + "/tiny_vlm.toml");
  const std::string key = "name = \"tiny_vlm\"";
  ASSERT_NE(text.find(key), std::string::npos);
  text.replace(text.find(key), key.size(), "name = \"ti\\u001b[2Jny\\u009bvlm\\u0007\"");
  const fs::path odd = dir_ / "odd.toml";
  write_file(odd, text);
  const auto no_raw_controls = [](const std::string& out) {
    return out.find('\x1b') == std::string::npos && out.find('\x07') == std::string::npos &&
           out.find("\xC2\x9B") == std::string::npos;
  };
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"coefficients", odd.string()}, {"estimate", odd.string(), "--docs", "3"},
           {"check", odd.string(), "--seq-len", "64"}}) {
    const result r = run(args);
    ASSERT_EQ(r.status, 0) << describe(args, r);
    EXPECT_NE(r.out.find("ti\\u001b[2Jny\\u009bvlm\\u0007"), std::string::npos) << r.out;
    EXPECT_TRUE(no_raw_controls(r.out)) << r.out;
  }
  const result j = run({"coefficients", odd.string(), "--json"});
  ASSERT_EQ(j.status, 0) << j.err;
  EXPECT_EQ(parse_json(j.out).at("model").get<std::string>(), "ti\x1b[2Jny\xC2\x9Bvlm\x07");

  // An error message quoting a path with an escape sequence, on stderr.
  const result missing = run({"coefficients", (dir_ / "no\x1b]0;owned\x07.toml").string()});
  EXPECT_EQ(missing.status, 1) << missing.err;
  EXPECT_NE(missing.err.find("no\\u001b]0;owned\\u0007.toml"), std::string::npos) << missing.err;
  EXPECT_TRUE(no_raw_controls(missing.err)) << missing.err;
}

// Mixture of experts: dense_per_token stays the total and dense_per_token_breakdown splits it (router, routed
// experts, shared expert, its gate, ...); the values are derived by hand in tests/test_flop_model.cpp.
TEST_F(CliTest, CoefficientsOfAnMoeModelCarryABreakdownThatSumsToTheTotal) {
  const result r = run({"coefficients", "qwen3_5_35b_a3b", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  const json c = parse_json(r.out);
  EXPECT_EQ(c.at("dense_per_token").get<double>(), 18055004160.0);
  const json& parts = c.at("dense_per_token_breakdown");
  EXPECT_EQ(parts.at("moe_router").get<double>(), 125829120.0);
  EXPECT_EQ(parts.at("moe_routed_experts").get<double>(), 6039797760.0);
  EXPECT_EQ(parts.at("moe_shared_expert").get<double>(), 754974720.0);
  EXPECT_EQ(parts.at("moe_shared_expert_gate").get<double>(), 491520.0);
  double sum = 0;
  for (const auto& member : parts.items()) sum += member.value().get<double>();
  EXPECT_EQ(sum, c.at("dense_per_token").get<double>());
}

// --frozen: the regime's coefficients and the frozen list. qwen3_vl_2b's full-training dense_per_token
// 10,322,706,432 and text_attn_pair 688,128 (test_flop_model.cpp): with text frozen a micro-batch with images
// runs the decoder's GEMMs forward + input gradient (4 of 6): 6,881,804,288, its attention core in full (688,128);
// one without images forward only (2 of 6): 3,440,902,144 and 229,376. The vision side trains: unchanged.
TEST_F(CliTest, CoefficientsWithFrozenPartsAreTheRegimesAndSayWhichParts) {
  const result r = run({"coefficients", "qwen3_vl_2b", "--frozen", "text", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  const json c = parse_json(r.out);
  EXPECT_EQ(c.at("frozen"), json::array({"text"}));
  EXPECT_EQ(c.at("dense_per_token").get<double>(), 6881804288.0);
  EXPECT_EQ(c.at("text_attn_pair").get<double>(), 688128.0);
  EXPECT_EQ(c.at("vision_per_patch").get<double>(), 1811939328.0);
  EXPECT_EQ(c.at("without_items").at("dense_per_token").get<double>(), 3440902144.0);
  EXPECT_EQ(c.at("without_items").at("text_attn_pair").get<double>(), 229376.0);
  // estimate: one 100-token document with a 1x4x4 image (16 patches, 4 merged tokens) under the same regime.
  const result e = run({"estimate", "qwen3_vl_2b", "--docs", "100", "--images", "1x4x4", "--frozen", "text", "--json"});
  ASSERT_EQ(e.status, 0) << e.err;
  const json x = parse_json(e.out);
  EXPECT_EQ(x.at("frozen"), json::array({"text"}));
  EXPECT_EQ(x.at("text_dense").get<double>(), 6881804288.0 * 100);
  EXPECT_EQ(x.at("text_attention").get<double>(), 688128.0 * 5050);
  // Bad parts are a usage error; a regime where nothing trains is a model error.
  EXPECT_EQ(run({"coefficients", "qwen3_vl_2b", "--frozen", "decoder"}).status, 2);
  EXPECT_EQ(run({"coefficients", "qwen3_vl_2b", "--frozen", "vision,merger,text"}).status, 1);
  EXPECT_EQ(run({"coefficients", "qwen3_vl_2b", "--lora-rank", "8"}).status, 2);
  // check stays full training and passes, printing the regime's factor per term.
  const result k = run({"check", "qwen3_vl_2b", "--seq-len", "4096", "--frozen", "vision", "--json"});
  ASSERT_EQ(k.status, 0) << k.err;
  const json f = parse_json(k.out).at(0).at("regime").at("factors");
  EXPECT_DOUBLE_EQ(f.at("vision_per_patch").get<double>(), 1.0 / 3);
  EXPECT_DOUBLE_EQ(f.at("patch_embed_per_patch").get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(f.at("dense_per_token").get<double>(), 1.0);
}

// --recompute: qwen3_vl_2b's decoder layers are dense_per_token less the LM head, 10,322,706,432 - 6 x 2048 x
// 151,936 = 8,455,716,864 per token (test_flop_model.cpp); "full" runs their forward once more: a third of it,
// 2,818,572,288, and a third of text_attn_pair 688,128: 229,376. estimate: one 100-token document (5050 pairs):
// hardware_flops = flops + 2,818,572,288 x 100 + 229,376 x 5050.
TEST_F(CliTest, RecomputeAddsItsCoefficientsAndTheHardwareFlops) {
  const result r = run({"coefficients", "qwen3_vl_2b", "--recompute", "full", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  const json c = parse_json(r.out).at("recompute");
  EXPECT_EQ(c.at("settings").at("policy"), "full");
  EXPECT_EQ(c.at("text_per_token").get<double>(), 2818572288.0);
  EXPECT_EQ(c.at("text_attn_pair").get<double>(), 229376.0);
  EXPECT_EQ(c.at("vision_per_patch").get<double>(), 0.0);             // no --recompute-vision
  EXPECT_FALSE(c.at("text_per_token_breakdown").contains("logits"));  // the LM head is in no checkpointed layer
  const result e = run({"estimate", "qwen3_vl_2b", "--docs", "100", "--recompute", "full", "--json"});
  ASSERT_EQ(e.status, 0) << e.err;
  const json x = parse_json(e.out);
  EXPECT_EQ(x.at("recompute").at("text_dense").get<double>(), 2818572288.0 * 100);
  EXPECT_EQ(x.at("recompute").at("text_attention").get<double>(), 229376.0 * 5050);
  EXPECT_EQ(x.at("hardware_flops").get<double>(), x.at("flops").get<double>() + 2818572288.0 * 100 + 229376.0 * 5050);
  const json none = parse_json(run({"estimate", "qwen3_vl_2b", "--docs", "100", "--json"}).out);
  EXPECT_EQ(none.at("hardware_flops"), none.at("flops"));
  EXPECT_EQ(none.at("recompute").at("settings").at("policy"), "none");
  // Bad flags are usage errors; a selection that checkpoints no layer is a model error.
  EXPECT_EQ(run({"coefficients", "qwen3_vl_2b", "--recompute", "block"}).status, 2);
  EXPECT_EQ(run({"coefficients", "qwen3_vl_2b", "--recompute-every", "2"}).status, 2);
  EXPECT_EQ(
      run({"coefficients", "qwen3_vl_2b", "--recompute", "full", "--recompute-every", "2", "--recompute-layers", "2"})
          .status,
      2);
  EXPECT_EQ(run({"coefficients", "qwen3_vl_2b", "--recompute", "full", "--recompute-every", "29"}).status, 1);
}

// ---------------------------------------------------------------------------------------------------------
// estimate

TEST_F(CliTest, EstimateSmallBatchMatchesHandDerivation) {
  const std::vector<std::string> args = {"estimate", kQwen3Vl2b, "--docs", "3,5", "--padding", "2",
                                         "--images", "1x2x2", "--json"};
  const result r = run(args);
  ASSERT_EQ(r.status, 0) << describe(args, r);
  const json e = parse_json(r.out);
  // Counts: real 3+5 = 8, padding 2, pairs 3*4/2 + 5*6/2 = 6 + 15 = 21; one 1x2x2 image: 4 patches,
  // 4/2^2 = 1 merged token, (2*2)^2 = 16 pairs per frame and whole.
  const json& n = e.at("counts");
  EXPECT_EQ(n.at("real_tokens").get<double>(), 8);
  EXPECT_EQ(n.at("padding_tokens").get<double>(), 2);
  EXPECT_EQ(n.at("documents").get<double>(), 2);
  EXPECT_EQ(n.at("causal_pairs").get<double>(), 21);
  EXPECT_EQ(n.at("items").get<double>(), 1);
  EXPECT_EQ(n.at("patches").get<double>(), 4);
  EXPECT_EQ(n.at("merged_tokens").get<double>(), 1);
  EXPECT_EQ(n.at("vision_pairs_per_frame").get<double>(), 16);
  EXPECT_EQ(n.at("vision_pairs_whole").get<double>(), 16);
  // FLOPs (complete scope) = coefficient x count:
  //   text_dense       10322706432 x 10 = 103227064320
  //   text_attention        688128 x 21 =     14450688
  //   vision_dense      1811939328 x  4 =   7247757312
  //   vision_attention      294912 x 16 =      4718592
  //   patch_embed          6291456 x  4 =     25165824
  //   merger             603979776 x  1 =    603979776
  //   total                              = 111123136512
  EXPECT_EQ(e.at("scope").get<std::string>(), "complete");
  EXPECT_EQ(e.at("text_dense").get<double>(), kDense * 10);
  EXPECT_EQ(e.at("text_attention").get<double>(), kTextPair * 21);
  EXPECT_EQ(e.at("vision_dense").get<double>(), kVisionPatch * 4);
  EXPECT_EQ(e.at("vision_attention").get<double>(), kVisionPair * 16);
  EXPECT_EQ(e.at("patch_embed").get<double>(), kPatchEmbed * 4);
  EXPECT_EQ(e.at("merger").get<double>(), kMerger * 1);
  EXPECT_EQ(e.at("mtp").get<double>(), 0);
  EXPECT_EQ(e.at("flops").get<double>(), 111123136512.0);
  // The constant at S = 8 + 2 = 10 tokens:
  //   text per token   = 10322706432 + 6*28*2*2048*10/2 = 10322706432 + 3440640 = 10326147072
  //   vision per token = 1811939328 + 6*24*1024*10      = 1811939328 + 1474560 = 1813413888
  //   megatron_flops   = 10326147072 x 10 + 1813413888 x 4 = 103261470720 + 7253655552 = 110515126272
  EXPECT_EQ(e.at("row_length").get<double>(), 10);
  EXPECT_EQ(e.at("megatron_text_per_token").get<double>(), 10326147072.0);
  EXPECT_EQ(e.at("megatron_vision_per_token").get<double>(), 1813413888.0);
  EXPECT_EQ(e.at("megatron_flops").get<double>(), 110515126272.0);
  EXPECT_DOUBLE_EQ(e.at("megatron_over_exact").get<double>(), 110515126272.0 / 111123136512.0);
}

TEST_F(CliTest, EstimateSeedAndCompleteScopeDifferForVideo) {
  // One video of 2 temporal patches of 4x4: 32 patches, 32/4 = 8 merged tokens; ViT pairs per temporal
  // patch 2*(4*4)^2 = 512 (complete), over the whole item (2*4*4)^2 = 1024 (seed).
  const auto estimate = [&](const std::string& scope) {
    const std::vector<std::string> args = {"estimate", kQwen3Vl2b, "--docs", "4", "--images", "2x4x4",
                                           "--scope", scope, "--json"};
    const result r = run(args);
    EXPECT_EQ(r.status, 0) << describe(args, r);
    return parse_json(r.out);
  };
  const json seed = estimate("seed");
  const json complete = estimate("complete");
  for (const json* e : {&seed, &complete}) {
    EXPECT_EQ((*e).at("counts").at("patches").get<double>(), 32);
    EXPECT_EQ((*e).at("counts").at("merged_tokens").get<double>(), 8);
    EXPECT_EQ((*e).at("counts").at("vision_pairs_per_frame").get<double>(), 512);
    EXPECT_EQ((*e).at("counts").at("vision_pairs_whole").get<double>(), 1024);
    EXPECT_EQ((*e).at("text_dense").get<double>(), kDense * 4);
    EXPECT_EQ((*e).at("text_attention").get<double>(), kTextPair * 10);  // 4*5/2 pairs
    EXPECT_EQ((*e).at("vision_dense").get<double>(), kVisionPatch * 32);
  }
  EXPECT_EQ(seed.at("scope").get<std::string>(), "seed");
  EXPECT_EQ(seed.at("vision_attention").get<double>(), kVisionPair * 1024);  // 301989888
  EXPECT_EQ(seed.at("patch_embed").get<double>(), 0);
  EXPECT_EQ(seed.at("merger").get<double>(), 0);
  EXPECT_EQ(complete.at("vision_attention").get<double>(), kVisionPair * 512);  // 150994944
  EXPECT_EQ(complete.at("patch_embed").get<double>(), kPatchEmbed * 32);        // 201326592
  EXPECT_EQ(complete.at("merger").get<double>(), kMerger * 8);                  // 4831838208
  EXPECT_EQ(complete.at("flops").get<double>() - seed.at("flops").get<double>(),
            kVisionPair * (512.0 - 1024.0) + kPatchEmbed * 32 + kMerger * 8);
}

TEST_F(CliTest, EstimateReportsHowFarTheConstantIsOff) {
  // One 1000-token document billed by the constant at S = 32768: the constant's attention part assumes
  // 16384 keys per token, the document has ~500. Exact = 1000*dense + 500500*pair; constant = 1000 *
  // (dense + pair*16384).
  const std::vector<std::string> args = {"estimate", kQwen3Vl2b, "--docs", "1000", "--seq-len", "32768"};
  const result r = run(args);
  ASSERT_EQ(r.status, 0) << describe(args, r);
  EXPECT_NE(r.out.find("would report"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("S=32768"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("text_dense"), std::string::npos) << r.out;

  const result j = run({"estimate", kQwen3Vl2b, "--docs", "1000", "--seq-len", "32768", "--json"});
  ASSERT_EQ(j.status, 0) << j.err;
  const json e = parse_json(j.out);
  EXPECT_EQ(e.at("row_length").get<double>(), 32768);
  const double exact = 1000 * kDense + 500500 * kTextPair;
  const double constant = 1000 * (kDense + kTextPair * 16384);
  EXPECT_EQ(e.at("flops").get<double>(), exact);
  EXPECT_EQ(e.at("megatron_flops").get<double>(), constant);
  EXPECT_DOUBLE_EQ(e.at("megatron_over_exact").get<double>(), constant / exact);
}

// In seed scope the exact count has no MTP layers (the reference trainer has none), so the constant it is
// compared with leaves them out too. Qwen3.5-0.8B with train_mtp_layers = true (a copy of the shipped file with
// that one line changed): its seed-scope constant must equal the shipped file's (MTP not trained), and its
// complete-scope constant must be larger (it bills the MTP layer). Before, the seed scope took the MTP
// constant and megatron_over_exact reported mostly the MTP layer.
TEST_F(CliTest, EstimateSeedScopeComparesWithAConstantWithoutMtp) {
  const std::string shipped = kConfigs + "/qwen3_5_0_8b.toml";
  std::ifstream in(shipped);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string off = "train_mtp_layers = false";
  ASSERT_NE(text.find(off), std::string::npos);
  text.replace(text.find(off), off.size(), "train_mtp_layers = true");
  const fs::path trained = dir_ / "qwen3_5_0_8b_mtp.toml";
  write_file(trained, text);
  const auto constant = [&](const std::string& model, const char* scope) {
    const result r = run({"estimate", model, "--docs", "1000", "--seq-len", "4096", "--scope", scope, "--json"});
    EXPECT_EQ(r.status, 0) << r.err;
    return parse_json(r.out).at("megatron_text_per_token").get<double>();
  };
  const double untrained = constant(shipped, "complete");
  EXPECT_EQ(constant(trained.string(), "seed"), untrained);
  EXPECT_GT(constant(trained.string(), "complete"), untrained);
}

// --json names the file a model name resolved to (a local directory or file may shadow a shipped name).
TEST_F(CliTest, JsonOutputNamesTheModelFile) {
  const result c = run({"coefficients", "qwen3_vl_2b", "--json"});
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_EQ(fs::path(parse_json(c.out).at("file").get<std::string>()).filename(), "qwen3_vl_2b.toml");
  const result e = run({"estimate", kQwen3Vl2b, "--docs", "10", "--json"});
  ASSERT_EQ(e.status, 0) << e.err;
  EXPECT_EQ(parse_json(e.out).at("file").get<std::string>(), kQwen3Vl2b);
}

TEST_F(CliTest, EstimateEmptyBatchHasNoRatio) {
  const result r = run({"estimate", kQwen3Vl2b, "--docs", "0", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  const json e = parse_json(r.out);
  EXPECT_EQ(e.at("flops").get<double>(), 0);
  EXPECT_EQ(e.at("row_length").get<double>(), 0);
  EXPECT_TRUE(e.at("megatron_flops").is_null());
  EXPECT_TRUE(e.at("megatron_over_exact").is_null());
}

TEST_F(CliTest, EstimateOnTextOnlyModel) {
  // qwen3_5_0_8b without its [vision_config] table is a valid text-only model.
  const std::string text = read_file(kConfigs + "/qwen3_5_0_8b.toml");
  std::istringstream lines(text);
  std::string line, stripped;
  bool skip = false;
  while (std::getline(lines, line)) {
    if (line.rfind("[", 0) == 0) skip = line.rfind("[vision_config]", 0) == 0;
    if (!skip) stripped += line + "\n";
  }
  ASSERT_EQ(stripped.find("[vision_config]"), std::string::npos);
  const fs::path text_only = dir_ / "text_only.toml";
  write_file(text_only, stripped);

  result r = run({"estimate", text_only.string(), "--docs", "3", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  const json e = parse_json(r.out);
  EXPECT_EQ(e.at("vision_dense").get<double>(), 0);
  EXPECT_EQ(e.at("counts").at("causal_pairs").get<double>(), 6);

  // Images on a text-only model: the batch is invalid (exit 1), not a crash.
  r = run({"estimate", text_only.string(), "--docs", "3", "--images", "1x2x2"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("no vision tower"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

// ---------------------------------------------------------------------------------------------------------
// Errors: exit code and a message that names the problem.

struct error_case {
  std::vector<std::string> args;
  int status;
  std::string message;  // must appear in stderr
};

TEST_F(CliTest, BadCommandLinesAreRejectedWithClearMessages) {
  const std::string m = kQwen3Vl2b;
  const std::vector<error_case> cases = {
      // missing / extra model arguments
      {{"estimate"}, 2, "missing the MODEL argument"},
      {{"coefficients"}, 2, "missing the MODEL argument"},
      {{"coefficients", m, m}, 2, "unexpected argument"},
      {{"estimate", m, m, "--docs", "1"}, 2, "unexpected argument"},
      // unknown flags
      {{"estimate", m, "--docs", "1", "--bogus"}, 2, "unknown option '--bogus'"},
      {{"check", "--frob"}, 2, "unknown option '--frob'"},
      {{"coefficients", m, "--json=1"}, 2, "--json takes no value"},
      // --docs
      {{"estimate", m}, 2, "missing --docs"},
      {{"estimate", m, "--docs"}, 2, "--docs needs a value"},
      {{"estimate", m, "--docs", "--json"}, 2, "--docs needs a value"},
      {{"estimate", m, "--docs", "1", "--docs", "2"}, 2, "--docs given more than once"},
      {{"estimate", m, "--docs", "3,-1"}, 2, "--docs entry 2"},
      {{"estimate", m, "--docs", "3,abc"}, 2, "'abc' is not an integer"},
      {{"estimate", m, "--docs", "3,,5"}, 2, "--docs entry 2 of '3,,5' is empty"},
      {{"estimate", m, "--docs", "3,"}, 2, "is empty"},
      {{"estimate", m, "--docs", ""}, 2, "--docs: expected comma-separated"},
      {{"estimate", m, "--docs", "1.5"}, 2, "'1.5' is not an integer"},
      {{"estimate", m, "--docs", "+3"}, 2, "'+3' is not an integer"},
      {{"estimate", m, "--docs", " 3"}, 2, "is not an integer"},
      {{"estimate", m, "--docs", "99999999999999999999"}, 2, "out of range"},
      // --padding
      {{"estimate", m, "--docs", "1", "--padding", "-1"}, 2, "--padding: expected a non-negative integer, got '-1'"},
      {{"estimate", m, "--docs", "1", "--padding", "x"}, 2, "--padding"},
      // --images syntax
      {{"estimate", m, "--docs", "1", "--images", "0x2x2"}, 2, "--images entry 1 '0x2x2' T"},
      {{"estimate", m, "--docs", "1", "--images", "2x3"}, 2, "expected TxHxW"},
      {{"estimate", m, "--docs", "1", "--images", "2x4x4x"}, 2, "expected TxHxW"},
      {{"estimate", m, "--docs", "1", "--images", "axbxc"}, 2, "'a' is not an integer"},
      {{"estimate", m, "--docs", "1", "--images", "1x2x2,"}, 2, "--images entry 2"},
      {{"estimate", m, "--docs", "1", "--images", "99999999999999999999x1x1"}, 2, "out of range"},
      // --scope, --seq-len
      {{"estimate", m, "--docs", "1", "--scope", "bogus"}, 2,
       "--scope: unknown FLOP scope 'bogus' (expected \"seed\" or \"complete\")"},
      {{"estimate", m, "--docs", "1", "--seq-len", "0"}, 2, "--seq-len: expected a positive integer"},
      {{"check", m, "--seq-len", "0"}, 2, "--seq-len: expected a positive integer, got '0'"},
      {{"check", m, "--seq-len", "-5"}, 2, "--seq-len: expected a positive integer, got '-5'"},
      {{"check", m, "--seq-len", "abc"}, 2, "'abc' is not an integer"},
      {{"check", m, "--seq-len", "1e3"}, 2, "'1e3' is not an integer"},
      {{"check", m, "--seq-len", "9223372036854775808"}, 2, "out of range"},
      // model and batch errors: exit 1
      {{"coefficients", "/nonexistent/model.toml"}, 1, "/nonexistent/model.toml: cannot open model config: no such file"},
      {{"check", "/nonexistent/model.toml"}, 1, "cannot open model config: no such file"},
      {{"coefficients", kConfigs}, 1, "cannot open model config: a directory without a config.json"},
      {{"estimate", m, "--docs", "1", "--images", "1x3x2"}, 1, "multiples of spatial_merge_size 2"},
      {{"estimate", m, "--docs", "1", "--images", "1x2x3"}, 1, "multiples of spatial_merge_size 2"},
      {{"estimate", m, "--docs", "4294967296"}, 1, "overflows"},
      {{"estimate", m, "--docs", "1", "--padding", "9223372036854775807"}, 1, "real tokens + padding_tokens overflows"},
      {{"estimate", m, "--docs", "1", "--images", "3037000500x2x2"}, 1, "overflows"},
      {{"check", m, "--seq-len", "9223372036854775807"}, 1, "check of qwen3_vl_2b at S=9223372036854775807"},
  };
  for (const error_case& c : cases) {
    const result r = run(c.args);
    EXPECT_EQ(r.status, c.status) << describe(c.args, r);
    EXPECT_NE(r.err.find(c.message), std::string::npos) << "expected '" << c.message << "' in stderr\n"
                                                         << describe(c.args, r);
    EXPECT_EQ(r.out, "") << describe(c.args, r);
    if (c.status == 2) {
      EXPECT_NE(r.err.find("--help' for usage"), std::string::npos) << describe(c.args, r);
    }
  }
}

// A bare model name that is neither a path here nor a shipped config: exit 1, and the error names the
// directory it looked in and lists the names it holds (the *.toml files' stems, sorted; other files are not
// models). A directory with two models and a README gives exactly those two names.
TEST_F(CliTest, AnUnknownBareModelNameListsTheShippedNames) {
  const fs::path configs = dir_ / "configs";
  fs::create_directories(configs);
  write_file(configs / "b_model.toml", "");
  write_file(configs / "a_model.toml", "");
  write_file(configs / "README.md", "");
  for (const std::string name : {"c_model", "c_model.toml"}) {
    const result r = run({"coefficients", name}, configs.string());
    EXPECT_EQ(r.status, 1) << describe({"coefficients", name}, r);
    EXPECT_EQ(r.err, "flopmeter: error: " + name + ": no such file, and no shipped config of that name in '" +
                         configs.string() + "' (shipped: a_model, b_model)\n")
        << describe({"coefficients", name}, r);
  }
  // The real shipped directory: sorted as strings, so qwen3_vl_2b comes before qwen3_vl_30b_a3b.
  const result r = run({"estimate", "qwen3_vl_3b", "--docs", "1"});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(" qwen3_vl_2b, qwen3_vl_30b_a3b, qwen3_vl_32b, qwen3_vl_4b, qwen3_vl_8b, "), std::string::npos)
      << r.err;
}

TEST_F(CliTest, BadTomlCitesFileLineAndColumn) {
  const fs::path bad = dir_ / "bad.toml";
  write_file(bad, "[model]\nname = \"bad\"\nmodel_type = = \"qwen3_vl\"\n");
  for (const std::string command : {"coefficients", "check"}) {
    const result r = run({command, bad.string()});
    EXPECT_EQ(r.status, 1) << describe({command, bad.string()}, r);
    // file:line:col — the error is on line 3.
    EXPECT_NE(r.err.find(bad.string() + ":3:"), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  }

  // A semantic error also exits 1 with a location (a shipped file with one value broken).
  std::string text = read_file(kQwen3Vl2b);
  const std::string key = "num_hidden_layers = 28";
  ASSERT_NE(text.find(key), std::string::npos);
  text.replace(text.find(key), key.size(), "num_hidden_layers = -3");
  const fs::path semantic = dir_ / "semantic.toml";
  write_file(semantic, text);
  const result r = run({"estimate", semantic.string(), "--docs", "1"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("semantic.toml:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("num_hidden_layers"), std::string::npos) << r.err;
}

TEST_F(CliTest, JsonStringsAreEscaped) {
  // A model name with quotes, a backslash and a tab must come out as a valid JSON string.
  std::string text = read_file(kConfigs + "/tiny_vlm.toml");
  const std::string key = "name = \"tiny_vlm\"";
  ASSERT_NE(text.find(key), std::string::npos);
  text.replace(text.find(key), key.size(), "name = \"ti\\\"ny\\\\vlm\\t\\u0001\"");
  const fs::path odd = dir_ / "odd.toml";
  write_file(odd, text);
  const result r = run({"coefficients", odd.string(), "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  const json c = parse_json(r.out);
  // The old hand-written parser turned \u0001 into '?'; nlohmann-json decodes it to the byte itself.
  EXPECT_EQ(c.at("model").get<std::string>(), std::string("ti\"ny\\vlm\t\x01"));
}

// ---------------------------------------------------------------------------------------------------------
// Global options, config.json wherever a model is named and `flopmeter import`, file-system causes.

// Qwen3-VL-2B's FLOP fields as a config.json (the full file, with the fields flopmeter ignores, is in
// test_model_config.cpp); line 3 holds the text sizes.
const char* const kQwen3Vl2bJson =
    "{\"model_type\": \"qwen3_vl\", \"tie_word_embeddings\": true, \"transformers_version\": \"4.57.0\",\n"
    "\"text_config\": {\"model_type\": \"qwen3_vl_text\", \"rope_theta\": 5000000, \"dtype\": \"bfloat16\",\n"
    "\"hidden_size\": 2048, \"num_hidden_layers\": 28, \"num_attention_heads\": 16, \"num_key_value_heads\": 8,\n"
    "\"head_dim\": 128, \"intermediate_size\": 6144, \"vocab_size\": 151936},\n"
    "\"vision_config\": {\"deepstack_visual_indexes\": [5, 11, 17], \"depth\": 24, \"hidden_size\": 1024,\n"
    "\"num_heads\": 16, \"intermediate_size\": 4096, \"out_hidden_size\": 2048, \"patch_size\": 16,\n"
    "\"temporal_patch_size\": 2, \"spatial_merge_size\": 2, \"in_channels\": 3, \"hidden_act\": \"gelu\"}}\n";

// `text` with every occurrence of `from` replaced by `to`.
std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

TEST_F(CliTest, JsonBeforeTheCommandIsTheSameAsAfter) {
  for (const std::string command : {"coefficients", "check"}) {
    const result before = run({"--json", command, kQwen3Vl2b});
    const result after = run({command, kQwen3Vl2b, "--json"});
    EXPECT_EQ(before.status, 0) << before.err;
    EXPECT_EQ(before.out, after.out);
    EXPECT_EQ(before.out.rfind(command == "check" ? "[" : "{", 0), 0u) << before.out;
  }
  const result alone = run({"--json"});
  EXPECT_EQ(alone.status, 2);
  EXPECT_NE(alone.err.find("missing command after --json"), std::string::npos) << alone.err;
}

// `flopmeter peaks`: every row of the library's table with its figures and source, in text and JSON, and the
// lookup of one device name. Figures by hand (test_peak_table derives each): H800 SXM 3958 FP8 sparse / 2 =
// 1978.9; L4 242 BF16 sparse / 2 = 121; MI250X 383 per module / 2 GCDs = 191.5, no FP8.
TEST_F(CliTest, PeaksListsTheTableWithSources) {
  const result text = run({"peaks"});
  ASSERT_EQ(text.status, 0) << text.err;
  for (const peak_entry& row : peak_table()) {
    EXPECT_NE(text.out.find(row.name), std::string::npos) << row.name;
    EXPECT_NE(text.out.find(row.source), std::string::npos) << row.name;
  }
  EXPECT_NE(text.out.find("H800 80GB HBM3                       -> H800 SXM"), std::string::npos) << text.out;

  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"peaks", "--json"}, {"--json", "peaks"}}) {
    const result r = run(args);
    ASSERT_EQ(r.status, 0) << describe(args, r);
    const json doc = parse_json(r.out);
    ASSERT_EQ(doc.at("rows").size(), peak_table().size());
    std::map<std::string, json> rows;
    for (const json& row : doc.at("rows")) {
      EXPECT_FALSE(row.at("source").get<std::string>().empty());
      rows[row.at("name").get<std::string>()] = row;
    }
    EXPECT_EQ(rows.at("H800 SXM").at("fp8_dense_tflops").get<double>(), 1978.9);
    EXPECT_EQ(rows.at("L4").at("bf16_dense_tflops").get<double>(), 121.0);
    EXPECT_EQ(rows.at("MI250X").at("bf16_dense_tflops").get<double>(), 191.5);
    EXPECT_TRUE(rows.at("MI250X").at("fp8_dense_tflops").is_null());  // no FP8: null, not 0
    ASSERT_EQ(doc.at("aliases").size(), peak_aliases().size());
    EXPECT_EQ(doc.at("aliases").at(2).at("row").get<std::string>(), "H800 SXM");
  }
}

TEST_F(CliTest, PeaksLooksUpOneDeviceName) {
  result r = run({"peaks", "NVIDIA RTX 6000 Ada Generation", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  json doc = parse_json(r.out);
  EXPECT_EQ(doc.at("device").get<std::string>(), "NVIDIA RTX 6000 Ada Generation");
  EXPECT_EQ(doc.at("row").get<std::string>(), "RTX 6000 Ada");
  EXPECT_EQ(doc.at("bf16_dense_tflops").get<double>(), 364.25);  // 1457 FP8 sparse / 2 / 2
  EXPECT_EQ(doc.at("fp8_dense_tflops").get<double>(), 728.5);
  r = run({"peaks", "NVIDIA L40"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.rfind("NVIDIA L40 -> L40: bf16 181.05, fp8 362 dense TFLOP/s\n", 0), 0u) << r.out;
  // "NVIDIA A100" names no row (SXM or PCIe?), and is not taken for an A10: exit 1, MFU would not be reported.
  r = run({"peaks", "NVIDIA A100"});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "flopmeter: error: no peak for GPU 'NVIDIA A100': MFU would not be reported (set [peak] "
            "tflops_per_gpu, or gpu to a name that `flopmeter peaks` lists)\n");
  r = run({"peaks", "A100 SXM", "H100 SXM"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("unexpected argument 'H100 SXM'"), std::string::npos) << r.err;
}

TEST_F(CliTest, VersionTakesNoFurtherArguments) {
  const result r = run({"--version", "--bogus"});
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("flopmeter: unexpected argument '--bogus' after --version"), std::string::npos) << r.err;
  EXPECT_EQ(run({"version", "x"}).status, 2);
}

TEST_F(CliTest, ConfigJsonAndCheckpointDirectoryWorkWhereverAModelIsNamed) {
  const fs::path ckpt = dir_ / "Qwen3-VL-2B-Instruct";
  fs::create_directory(ckpt);
  write_file(ckpt / "config.json", kQwen3Vl2bJson);
  const result toml = run({"coefficients", kQwen3Vl2b, "--json"});
  ASSERT_EQ(toml.status, 0) << toml.err;
  // The same numbers; only the model's name (the checkpoint directory) and its file differ.
  const auto numbers_of = [](const std::string& out) {
    json doc = parse_json(out);
    doc.erase("model");
    doc.erase("file");
    return doc;
  };
  for (const std::string& model : {(ckpt / "config.json").string(), ckpt.string()}) {
    const result from_json = run({"coefficients", model, "--json"});
    ASSERT_EQ(from_json.status, 0) << from_json.err;
    EXPECT_EQ(parse_json(from_json.out).at("model").get<std::string>(), "Qwen3-VL-2B-Instruct");
    EXPECT_EQ(parse_json(from_json.out).at("file").get<std::string>(), (ckpt / "config.json").string());
    EXPECT_EQ(numbers_of(from_json.out), numbers_of(toml.out));
    const result estimate = run({"estimate", model, "--docs", "3,5", "--json"});
    EXPECT_EQ(numbers_of(estimate.out), numbers_of(run({"estimate", kQwen3Vl2b, "--docs", "3,5", "--json"}).out));
    const result check = run({"check", model});
    EXPECT_EQ(check.status, 0) << check.out << check.err;
  }
}

TEST_F(CliTest, ConfigJsonErrorsCiteLineColumnAndPath) {
  // Line 3: "\"hidden_size\": " is 15 characters -> the value at column 16.
  const fs::path bad = dir_ / "config.json";
  write_file(bad, replace_all(kQwen3Vl2bJson, "\"hidden_size\": 2048", "\"hidden_size\": 0"));
  const result r = run({"coefficients", bad.string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "flopmeter: error: " + bad.string() + ":3:16: key 'text_config.hidden_size': must be > 0 (got 0)\n");
}

TEST_F(CliTest, ImportWritesTheEquivalentTomlWithSources) {
  const fs::path config_json = dir_ / "config.json";
  write_file(config_json, kQwen3Vl2bJson);
  const fs::path toml = dir_ / "imported.toml";
  const result r = run({"import", config_json.string(), "-o", toml.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "");
  // Round trip: the TOML gives what the config.json gives; both are named after dir_, the config.json's
  // directory, and each output names its file, which differs.
  const result from_json = run({"coefficients", config_json.string(), "--json"});
  const result from_toml = run({"coefficients", toml.string(), "--json"});
  ASSERT_EQ(from_toml.status, 0) << from_toml.err;
  EXPECT_EQ(replace_all(from_toml.out, toml.string(), config_json.string()), from_json.out);
  // The comment of a value: line 3, "\"hidden_size\": " + 15 -> 3:16.
  const std::string text = read_file(toml);
  EXPECT_NE(text.find("hidden_size = 2048                        # config.json:3:16 text_config.hidden_size\n"),
            std::string::npos)
      << text;
  // Standard output without -o.
  const result to_stdout = run({"import", config_json.string()});
  EXPECT_EQ(to_stdout.status, 0);
  EXPECT_EQ(to_stdout.out, text);
}

// Qwen3.5-0.8B's config.json without attn_output_gate (transformers has no such setting: its
// Qwen3.5 attention always builds the gated q_proj). `import` wrote no gate line and `coefficients` billed no
// gate; now both state the gate, and the imported TOML's dense coefficient is the shipped file's, 4,627,267,584
// (test_flop_model derives it), not 75,497,472 (= 6 * 1024 * 8 * 256 per full layer x 6 layers) less.
TEST_F(CliTest, ImportOfAQwen35ConfigWithoutTheGateWritesTheGate) {
  std::string layers;
  for (int i = 0; i < 24; ++i)
    layers += std::string(i > 0 ? ", " : "") + ((i + 1) % 4 == 0 ? "\"full_attention\"" : "\"linear_attention\"");
  const fs::path config_json = dir_ / "config.json";
  write_file(
      config_json,
      "{\"model_type\": \"qwen3_5\", \"tie_word_embeddings\": true, \"text_config\": {\"head_dim\": 256,\n"
      "\"hidden_size\": 1024, \"intermediate_size\": 3584, \"num_attention_heads\": 8, \"num_hidden_layers\": 24,\n"
      "\"num_key_value_heads\": 2, \"vocab_size\": 248320, \"full_attention_interval\": 4, \"layer_types\": [" +
          layers +
          "],\n\"linear_conv_kernel_dim\": 4, \"linear_key_head_dim\": 128, \"linear_num_key_heads\": 16,\n"
          "\"linear_num_value_heads\": 16, \"linear_value_head_dim\": 128, \"mtp_num_hidden_layers\": 1},\n"
          "\"vision_config\": {\"depth\": 12, \"hidden_size\": 768, \"num_heads\": 12, \"intermediate_size\": 3072,\n"
          "\"out_hidden_size\": 1024, \"patch_size\": 16, \"temporal_patch_size\": 2, \"spatial_merge_size\": 2,\n"
          "\"in_channels\": 3}}\n");
  const fs::path toml = dir_ / "imported.toml";
  const result r = run({"import", config_json.string(), "-o", toml.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(read_file(toml).find("attn_output_gate = true                   # not in the config.json: Qwen3.5 "
                                 "attention always has the output gate\n"),
            std::string::npos)
      << read_file(toml);
  for (const fs::path& model : {config_json, toml}) {
    const result c = run({"coefficients", model.string(), "--json"});
    ASSERT_EQ(c.status, 0) << c.err;
    EXPECT_EQ(parse_json(c.out)["dense_per_token"].get<std::int64_t>(), 4627267584) << model;
  }
}

// Text-only decoders from the command line: Qwen3-Next-80B-A3B's config.json (its decoder's fields at the top
// level, written as the checkpoint writes them, without the gate and without MTP fields) is imported with
// comments that name the top-level JSON paths; the TOML, the config.json and the shipped file by its bare name
// give dense_per_token 21,834,301,440 (test_model_config_text derives it term by term).
TEST_F(CliTest, ImportAndCoefficientsOfATextOnlyQwen3NextConfig) {
  const fs::path checkpoint = dir_ / "Qwen3-Next-80B-A3B-Instruct";
  fs::create_directories(checkpoint);
  const fs::path config_json = checkpoint / "config.json";
  const std::string next_json =
      "{\"architectures\": [\"Qwen3NextForCausalLM\"], \"model_type\": \"qwen3_next\",\n"
      "\"hidden_size\": 2048, \"num_hidden_layers\": 48, \"num_attention_heads\": 16, \"num_key_value_heads\": 2,\n"
      "\"head_dim\": 256, \"intermediate_size\": 5120, \"vocab_size\": 151936, \"full_attention_interval\": 4,\n"
      "\"linear_conv_kernel_dim\": 4, \"linear_key_head_dim\": 128, \"linear_num_key_heads\": 16,\n"
      "\"linear_num_value_heads\": 32, \"linear_value_head_dim\": 128, \"num_experts\": 512,\n"
      "\"num_experts_per_tok\": 10, \"moe_intermediate_size\": 512, \"shared_expert_intermediate_size\": 512,\n"
      "\"decoder_sparse_step\": 1, \"mlp_only_layers\": [], \"norm_topk_prob\": true, \"rope_theta\": 10000000,\n"
      "\"partial_rotary_factor\": 0.25, \"use_sliding_window\": false, \"tie_word_embeddings\": false}\n";
  write_file(config_json, next_json);
  const fs::path toml = dir_ / "next.toml";
  const result r = run({"import", checkpoint.string(), "-o", toml.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string text = read_file(toml);
  // Line 2: "\"hidden_size\": " is 15 characters -> 2:16; the JSON path is the top-level key.
  EXPECT_NE(text.find("hidden_size = 2048                        # config.json:2:16 hidden_size\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("model_type = \"qwen3_next\""), std::string::npos) << text;
  EXPECT_NE(text.find("attn_output_gate = true                   # not in the config.json: Qwen3-Next attention "
                      "always has the output gate\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("text_config."), std::string::npos) << text;
  for (const std::string& model : {config_json.string(), toml.string(), std::string("qwen3_next_80b_a3b")}) {
    const result c = run({"coefficients", model, "--json"});
    ASSERT_EQ(c.status, 0) << c.err;
    const json doc = parse_json(c.out);
    EXPECT_EQ(doc.at("dense_per_token").get<std::int64_t>(), 21834301440) << model;
    EXPECT_EQ(doc.at("text_attn_pair").get<std::int64_t>(), 589824) << model;
    EXPECT_EQ(doc.at("dense_per_token_breakdown").at("moe_shared_expert_gate").get<std::int64_t>(), 589824) << model;
  }
  // An error names the file, line, column and the top-level path.
  std::string broken = next_json;
  broken.replace(broken.find("2048"), 4, "-1");
  write_file(config_json, broken);
  const result bad = run({"coefficients", config_json.string()});
  EXPECT_EQ(bad.status, 1);
  EXPECT_EQ(bad.err, "flopmeter: error: " + config_json.string() + ":2:16: key 'hidden_size': must be > 0 (got -1)\n");
}

// A plugin config where a model config is expected said only "unknown key 'logging'".
TEST_F(CliTest, APluginConfigGivenAsTheModelSaysWhatItIs) {
  const fs::path plugin = dir_ / "plugin.toml";
  write_file(plugin, "[model]\nconfig = \"m.toml\"\n[logging]\nlog_interval_steps = 10\n");
  const result r = run({"coefficients", plugin.string()});
  EXPECT_EQ(r.status, 1);
  // Line 3, the key's name inside "[logging]" at column 2.
  EXPECT_EQ(r.err.rfind("flopmeter: error: " + plugin.string() +
                            ":3:2: unknown key 'logging': this file looks like a flopmeter plugin config",
                        0),
            0u)
      << r.err;
}

TEST_F(CliTest, ImportErrors) {
  const fs::path config_json = dir_ / "config.json";
  write_file(config_json, kQwen3Vl2bJson);
  result r = run({"import"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("missing the CONFIG.json argument"), std::string::npos) << r.err;
  r = run({"import", config_json.string(), "-o", (dir_ / "no_such_dir" / "m.toml").string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "flopmeter: error: " + (dir_ / "no_such_dir" / "m.toml").string() +
                       ": cannot create the TOML file: No such file or directory\n");
  // A trailing comma: nlohmann-json stops at the "}" after it, column 27 ("{" 1, key 2-13, value 16-25, "," 26).
  write_file(config_json, "{\"model_type\": \"qwen3_vl\",}");
  r = run({"import", config_json.string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err.rfind("flopmeter: error: " + config_json.string() + ":1:27: JSON syntax error: ", 0), 0u) << r.err;
  EXPECT_EQ(r.err.find("looks like a TOML file"), std::string::npos) << r.err;  // it starts with '{': JSON
  // A model TOML given to import: still a JSON syntax error at 1:1 (its first '#'), plus what the file is.
  r = run({"import", kQwen3Vl2b});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err.rfind("flopmeter: error: " + kQwen3Vl2b + ":1:1: JSON syntax error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("(this looks like a TOML file: import reads a Hugging Face config.json, and a model TOML "
                       "needs no import"),
            std::string::npos)
      << r.err;
}

TEST_F(CliTest, SymlinkLoopAndEscapeSequencesInErrors) {
  fs::create_symlink(dir_ / "b.toml", dir_ / "a.toml");
  fs::create_symlink(dir_ / "a.toml", dir_ / "b.toml");
  result r = run({"coefficients", (dir_ / "a.toml").string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "flopmeter: error: " + (dir_ / "a.toml").string() +
                       ": cannot open model config: too many levels of symbolic links\n");
  // A model type holding ESC [2J (clear screen) reaches the terminal as \u001b, never as the raw byte.
  const fs::path config_json = dir_ / "esc.json";
  write_file(config_json, "{\"model_type\": \"\\u001b[2J\"}");
  r = run({"coefficients", config_json.string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("unsupported model type \"\\u001b[2J\""), std::string::npos) << r.err;
}

// `import DIR -o DIR/config.json` wrote the TOML over its own input. The output is refused when
// it is the input file by any name (the same path, a path through "..", a symbolic link to it), with exit
// status 1 and the input left byte for byte as it was.
TEST_F(CliTest, ImportOntoItsOwnInputIsRefusedAndLeavesItUntouched) {
  const fs::path checkpoint = dir_ / "ckpt";
  fs::create_directory(checkpoint);
  const fs::path config_json = checkpoint / "config.json";
  write_file(config_json, kQwen3Vl2bJson);
  fs::create_symlink("config.json", checkpoint / "link.json");
  const std::string input = config_json.string();  // what import reads for the directory: DIR/config.json
  for (const fs::path& output : {config_json, checkpoint / ".." / "ckpt" / "config.json", checkpoint / "link.json"}) {
    SCOPED_TRACE(output.string());
    const result r = run({"import", checkpoint.string(), "-o", output.string()});
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err, "flopmeter: error: " + output.string() +
                         ": refusing to write the TOML over the input config.json '" + input +
                         "' (the same file): name another output file, e.g. -o " +
                         (output.parent_path() / "model.toml").string() + "; nothing was written\n");
    EXPECT_EQ(read_file(config_json), kQwen3Vl2bJson);
    EXPECT_TRUE(fs::is_symlink(checkpoint / "link.json"));
  }
  // The file named directly works the same; another output file in the same directory is written.
  result r = run({"import", input, "-o", input});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(read_file(config_json), kQwen3Vl2bJson);
  r = run({"import", checkpoint.string(), "-o", (checkpoint / "model.toml").string()});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(read_file(checkpoint / "model.toml").rfind("# flopmeter model config imported from config.json", 0), 0u);
}

// `check` over the configs directory skipped a *.toml it could not read and said every check passed: a
// dangling symbolic link, or a directory named *.toml, now fails the run naming it and why.
TEST_F(CliTest, CheckFailsNamingATomlEntryThatIsNotAReadableFile) {
  const fs::path configs = dir_ / "configs";
  fs::create_directory(configs);
  fs::copy_file(kConfigs + "/tiny_vlm.toml", configs / "tiny_vlm.toml");
  fs::create_symlink(dir_ / "gone.toml", configs / "z.toml");
  result r = run({"check", "--seq-len", "8"}, configs.string());
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(r.out, "");  // every model is loaded before any output
  EXPECT_EQ(r.err, "flopmeter: error: " + (configs / "z.toml").string() +
                       ": cannot read model file: a dangling symbolic link (to '" + (dir_ / "gone.toml").string() +
                       "', which does not exist) (every *.toml in the model configs directory '" + configs.string() +
                       "' is loaded: fix or remove it)\n");
  fs::remove(configs / "z.toml");
  fs::create_directory(configs / "z.toml");
  r = run({"check", "--seq-len", "8"}, configs.string());
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(r.err, "flopmeter: error: " + (configs / "z.toml").string() +
                       ": cannot read model file: a directory, not a model TOML file (every *.toml in the model "
                       "configs directory '" +
                       configs.string() + "' is loaded: fix or remove it)\n");
  // With only readable files left, the same directory passes.
  fs::remove(configs / "z.toml");
  r = run({"check", "--seq-len", "8"}, configs.string());
  EXPECT_EQ(r.status, 0) << r.err;
}

}  // namespace
