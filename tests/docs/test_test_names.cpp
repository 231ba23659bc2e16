// Every test case must be one ctest entry that runs it. catch_discover_tests splits a listed name at
// ';' (a CMake list separator): a case named "a; b" became two ctest entries, "a" and " b", each a
// filter that matched nothing and passed without running anything. Test names use "," or "and".
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

TEST_CASE("no test case name holds a semicolon, which ctest would split into entries that run nothing",
          "[docs][tests]") {
  const std::regex name(R"(TEST_CASE\s*\(\s*"((?:[^"\\]|\\.)*)\")");
  std::vector<std::string> bad;
  size_t cases = 0;
  for (const auto& e : fs::recursive_directory_iterator(fs::path(VOLT_SOURCE_DIR) / "tests")) {
    if (e.path().extension() != ".cpp" && e.path().extension() != ".h") continue;
    std::ifstream in(e.path());
    std::stringstream text;
    text << in.rdbuf();
    const std::string s = text.str();
    for (std::sregex_iterator it(s.begin(), s.end(), name), end; it != end; ++it) {
      ++cases;
      if ((*it)[1].str().find(';') != std::string::npos)
        bad.push_back(e.path().filename().string() + ": " + (*it)[1].str());
    }
  }
  CHECK(cases > 500);  // the scan sees the suite
  for (const auto& b : bad) FAIL_CHECK(b);
}
