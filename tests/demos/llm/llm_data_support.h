#pragma once
// Shared fixtures of the LLM data tests (tests/demos/llm/test_tokenizer.cpp, test_token_data.cpp,
// tests/demos/test_demo_cli.cpp):
// a small corpus, a tokenizer trained on it once per test binary, and the Python reference
// (demos/llm/reference/token_file.py) run as a process.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "boring_model.h"
#include "volt/demos/llm/tokenizer.h"

namespace volt::testing {

inline const std::string kWikiText = std::string(VOLT_SOURCE_DIR) + "/../shared/data/wikitext-2";

inline void write_file(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary);
  out << text;
}

/// About 6 KB of varied text (words, digits, punctuation, accents, CJK, an emoji, tabs, runs of
/// spaces), line by line, enough to train a 400-piece tokenizer.
inline std::string small_corpus() {
  std::string s;
  const std::vector<std::string> lines = {
      " = Valkyria Chronicles III = ",
      " Senjō no Valkyria 3 : Unrecorded Chronicles is a tactical role @-@ playing video game .",
      "The game began development in 2010 , carrying over a large portion of the work done on Valkyria Chronicles II .",
      "Café naïve résumé — déjà vu ; 東京 は 大きい 。",
      "Tabs\tand  double  spaces stay as they are.",
      "Numbers like 1234567 and 3.14159 are split into digits 😀 !",
  };
  for (int rep = 0; rep < 12; ++rep)
    for (size_t i = 0; i < lines.size(); ++i) s += lines[(i + static_cast<size_t>(rep)) % lines.size()] + "\n \n";
  return s;
}

/// A folder holding small.txt (small_corpus) and tok.model, a 400-piece tokenizer trained on it;
/// made once per process.
inline const std::string& small_fixture() {
  static const std::string dir = [] {
    const std::string d = temp_dir("llm-data-fixture");
    write_file(d + "/small.txt", small_corpus());
    volt::demos::TokenizerTrainOptions o;
    o.vocab_size = 400;
    volt::demos::train_tokenizer({d + "/small.txt"}, d + "/tok.model", o);
    return d;
  }();
  return dir;
}

inline const char* const kPython = "/usr/bin/python3";
inline const std::string kTokenFilePy = std::string(VOLT_SOURCE_DIR) + "/demos/llm/reference/token_file.py";

/// True where /usr/bin/python3 imports sentencepiece and numpy (python3-sentencepiece).
inline bool python_sentencepiece() {
  static const bool ok = [] {
    const auto codes =
        run_processes({{kPython, "-c", "import sentencepiece, numpy"}}, {}, 120, temp_dir("llm-py-probe") + "/probe");
    return codes.at(0) == 0;
  }();
  if (!ok) WARN("/usr/bin/python3 cannot import sentencepiece and numpy (python3-sentencepiece): skipped");
  return ok;
}

/// Runs token_file.py with `args`; its exit code, its output (stdout and stderr) in `output`.
inline int run_token_file_py(const std::vector<std::string>& args, std::string& output) {
  std::vector<std::string> argv = {kPython, kTokenFilePy};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<std::map<std::string, std::string>> env(1);
  env[0]["PYTHONDONTWRITEBYTECODE"] = "1";
  const std::string log = temp_dir("llm-py") + "/run";
  const auto codes = run_processes({argv}, env, 300, log);
  output = read_text(log + ".0.log");
  return codes.at(0);
}

inline std::vector<int64_t> to_vec(const torch::Tensor& t) {
  auto c = t.contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

}  // namespace volt::testing
