// plugin/families/registry.cpp — the list of the decoder family files, in the order messages name their model types
// (families.h: find_family, all_families, find_decoder). A new family is one file with its table, build step and
// `<family>_adapters()`, and one line here.

#include <string_view>
#include <vector>

#include "families/families.h"
#include "families/qwen_families.h"

namespace flopmeter::detail {

// Each family file's one function: its adapters, its model types in the order messages list them.
const std::vector<const family_adapter*>& llama_adapters();             // llama.cpp
const std::vector<const family_adapter*>& qwen2_adapters();             // qwen2.cpp
const std::vector<const family_adapter*>& mistral_adapters();           // mistral.cpp
const std::vector<const family_adapter*>& gemma3_adapters();            // gemma3.cpp
const std::vector<const family_adapter*>& gpt_oss_adapters();           // gpt_oss.cpp
const std::vector<const family_adapter*>& deepseek_adapters();          // deepseek.cpp
const std::vector<const family_adapter*>& olmo3_adapters();             // olmo3.cpp
const std::vector<const family_adapter*>& seed_oss_adapters();          // seed_oss.cpp
const std::vector<const family_adapter*>& llama4_adapters();            // llama4.cpp
const std::vector<const family_adapter*>& smollm3_adapters();           // smollm3.cpp
const std::vector<const family_adapter*>& apertus_adapters();           // apertus.cpp
const std::vector<const family_adapter*>& ernie4_5_adapters();          // ernie4_5.cpp
const std::vector<const family_adapter*>& minimax_m2_adapters();        // minimax_m2.cpp
const std::vector<const family_adapter*>& nemotron_h_adapters();        // nemotron_h.cpp
const std::vector<const family_adapter*>& granitemoehybrid_adapters();  // granitemoehybrid.cpp
const std::vector<const family_adapter*>& falcon_h1_adapters();         // falcon_h1.cpp
const std::vector<const family_adapter*>& lfm2_adapters();              // lfm2.cpp

const std::vector<const family_adapter*>& all_families() {
  using list = const std::vector<const family_adapter*>& (*)();
  static constexpr list kFamilyFiles[] = {
      qwen_text_adapters,         // qwen_families.cpp: qwen3, qwen3_moe, qwen3_next
      llama_adapters,             // llama.cpp
      qwen2_adapters,             // qwen2.cpp: qwen2, qwen2_moe
      mistral_adapters,           // mistral.cpp: mistral, mixtral
      gemma3_adapters,            // gemma3.cpp: gemma3_text
      gpt_oss_adapters,           // gpt_oss.cpp
      deepseek_adapters,          // deepseek.cpp: deepseek_v3, kimi_k2, glm4_moe, deepseek_v32, glm_moe_dsa
      olmo3_adapters,             // olmo3.cpp
      seed_oss_adapters,          // seed_oss.cpp
      llama4_adapters,            // llama4.cpp: llama4_text
      smollm3_adapters,           // smollm3.cpp
      apertus_adapters,           // apertus.cpp
      ernie4_5_adapters,          // ernie4_5.cpp: ernie4_5, ernie4_5_moe
      minimax_m2_adapters,        // minimax_m2.cpp
      nemotron_h_adapters,        // nemotron_h.cpp
      granitemoehybrid_adapters,  // granitemoehybrid.cpp
      falcon_h1_adapters,         // falcon_h1.cpp
      lfm2_adapters,              // lfm2.cpp
  };
  static const std::vector<const family_adapter*> all = [] {
    std::vector<const family_adapter*> adapters;
    for (const list file : kFamilyFiles) adapters.insert(adapters.end(), file().begin(), file().end());
    return adapters;
  }();
  return all;
}

const family_adapter* find_family(std::string_view model_type) {
  for (const family_adapter* a : all_families()) {
    if (a->model_type == model_type) return a;
  }
  return nullptr;
}

const family_adapter* find_decoder(std::string_view model_type) {
  if (const family_adapter* a = find_family(model_type)) return a;
  for (const family_adapter* a : qwen_vlm_decoders()) {
    if (a->model_type == model_type) return a;
  }
  return nullptr;
}

}  // namespace flopmeter::detail
