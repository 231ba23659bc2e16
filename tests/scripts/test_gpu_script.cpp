// scripts/gpu.sh, dry-run (VOLT_GPU_DRY_RUN=1 prints its commands): each step builds only the
// targets it needs, the test filters pass through, and the carried .pc files are rewritten to point
// into the deps folder. Runs without a GPU or a PyTorch.
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>

#include "boring_model.h"

using namespace volt::testing;

namespace {
/// Runs scripts/gpu.sh with `env` and `steps` under a fake deps folder in `dir`; its output.
std::string dry_run(const std::string& dir, const std::string& env, const std::string& steps) {
  const std::string cmd = "cd " + dir + " && env VOLT_GPU_DRY_RUN=1 VOLT_GPU_DEPS=" + dir +
                          "/deps VOLT_GPU_BUILD_DIR=" + dir + "/bg " + env + " bash " + VOLT_SOURCE_DIR +
                          "/scripts/gpu.sh " + dir + "/out " + steps + " > " + dir + "/log 2>&1";
  const int rc = std::system(cmd.c_str());
  INFO(read_text(dir + "/log"));
  CHECK(rc == 0);
  return read_text(dir + "/log");
}
}  // namespace

TEST_CASE("scripts/gpu.sh builds only what its steps need and passes test filters through", "[scripts][gpu]") {
  const std::string dir = temp_dir("gpu-script");
  const std::string pc = dir + "/deps/usr/lib/x86_64-linux-gnu/pkgconfig";
  std::filesystem::create_directories(pc);
  std::ofstream(pc + "/sentencepiece.pc") << "prefix=/usr\nlibdir=${prefix}/lib/x86_64-linux-gnu\n"
                                          << "includedir=/usr/include\nName: sentencepiece\nVersion: 0.1.97\n"
                                          << "Libs: -L${libdir} -lsentencepiece\nCflags: -I/usr/include/sp\n";
  SECTION("build and bench: the library's program and the bench only") {
    const std::string log = dry_run(dir, "", "build bench");
    CHECK_THAT(log, Catch::Contains("--target volt_cli bench_gpu -- -k 0\n"));
    CHECK_THAT(log, !Catch::Contains("volt_tests"));
    CHECK_THAT(log, Catch::Contains("bench_gpu " + dir + "/deps/data/wikitext-2"));
    CHECK_THAT(log, !Catch::Contains("ctest"));
    CHECK_THAT(log, !Catch::Contains("lightning_fsdp.py"));
  }
  SECTION("build and test: the test programs too, only the chosen test files, a Catch filter") {
    const std::string log = dry_run(
        dir, "VOLT_GPU_TEST_SOURCES='strategies/test_cuda|optim/' VOLT_CATCH_FILTER='[cuda],[optim]'", "build test");
    CHECK_THAT(log, Catch::Contains("--target volt_cli bench_gpu volt_tests volt_test_worker"));
    CHECK_THAT(log, Catch::Contains("-DVOLT_TEST_SOURCE_FILTER=strategies/test_cuda\\|optim/"));
    CHECK_THAT(log,
               Catch::Contains("cd " + dir + "/bg/tests && timeout -k 10 900 ./volt_tests \\[cuda\\]\\,\\[optim\\]"));
    CHECK_THAT(log, !Catch::Contains("ctest"));
    CHECK_THAT(log, !Catch::Contains("bench_gpu " + dir));
  }
  SECTION("test without a Catch filter: ctest for the [cuda] cases one at a time, then for the others") {
    const std::string log = dry_run(dir, "VOLT_CTEST_ARGS='-R fsdp' VOLT_CTEST_JOBS=3", "test");
    const size_t cuda = log.find(
        "ctest --output-on-failure -j1 --timeout 300 -R \\^volt/\\(\\<the\\ "
        "\\[cuda\\]\\ cases\\>\\)\\$");
    const size_t ctest = log.find(
        "ctest --output-on-failure -j3 --timeout 300 -E \\^volt/\\(\\<the\\ "
        "\\[cuda\\]\\ cases\\>\\)\\$ -R fsdp");
    CHECK(cuda != std::string::npos);
    CHECK(ctest != std::string::npos);
    CHECK(cuda < ctest);
    CHECK_THAT(log, !Catch::Contains("cmake --build"));
  }
  SECTION("ops: bench_llm_ops built and run on the GPU in bf16 at the llm step's shape") {
    const std::string log = dry_run(dir, "VOLT_LLM_BLOCK=1024", "build ops");
    CHECK_THAT(log, Catch::Contains("--target volt_cli bench_gpu bench_llm_ops -- -k 0\n"));
    CHECK_THAT(log, Catch::Contains("/bench/bench_llm_ops --device cuda --dtype bf16 --batch 8 --block 1024 "));
    CHECK_THAT(log, !Catch::Contains("bench_gpu " + dir));
  }
  SECTION("Lightning's rows are separated by ';', each keeping its flags together") {
    const std::string log =
        dry_run(dir, "VOLT_LIGHTNING_VARIANTS='--strategy fsdp --ac 0;--strategy ddp --ac 1'", "lightning");
    CHECK_THAT(log, Catch::Contains("lightning_fsdp.py " + dir + "/deps/data/lightning " + dir +
                                    "/out/bench.jsonl --strategy fsdp --ac 0\n"));
    CHECK_THAT(log, Catch::Contains("/out/bench.jsonl --strategy ddp --ac 1\n"));
    CHECK_THAT(log, !Catch::Contains("/out/bench.jsonl --strategy\n"));
  }
  SECTION("VOLT_GPU_END: steps are limited to the time left, and skipped past it, failing the run") {
    const std::string soon = std::to_string(std::time(nullptr) + 100);
    std::string log = dry_run(dir, "VOLT_GPU_END=" + soon + " VOLT_GPU_VARIANTS=ddp", "bench");
    CHECK_THAT(log, Catch::Contains("+ timeout -k 10 "));
    CHECK_THAT(log, !Catch::Contains("+ timeout -k 10 300 "));  // 100 s left, not the row's 300
    const std::string past = std::to_string(std::time(nullptr) - 1);
    const std::string cmd = "cd " + dir + " && env VOLT_GPU_DRY_RUN=1 VOLT_GPU_DEPS=" + dir +
                            "/deps VOLT_GPU_END=" + past + " VOLT_CATCH_FILTER='[cuda]' bash " + VOLT_SOURCE_DIR +
                            "/scripts/gpu.sh " + dir + "/out-past test bench llm > " + dir + "/log 2>&1";
    CHECK(std::system(cmd.c_str()) != 0);
    log = read_text(dir + "/log");
    CHECK_THAT(log, Catch::Contains("gpu.sh: tests skipped: VOLT_GPU_END reached"));
    CHECK_THAT(log, Catch::Contains("gpu.sh: bench_gpu fsdp skipped: VOLT_GPU_END reached"));
    CHECK_THAT(log, Catch::Contains("gpu.sh: lightning_llm skipped: VOLT_GPU_END reached"));
    CHECK_THAT(log, !Catch::Contains("volt_tests"));
    CHECK_THAT(log, !Catch::Contains("bench_gpu " + dir));
  }
  SECTION("VOLT_GPU_END that is not epoch seconds is refused before anything is made") {
    for (const std::string bad : {"soon", "-5", "1e9", "12:30"}) {
      const std::string cmd = "cd " + dir + " && env VOLT_GPU_DRY_RUN=1 VOLT_GPU_DEPS=" + dir + "/deps VOLT_GPU_END='" +
                              bad + "' bash " + VOLT_SOURCE_DIR + "/scripts/gpu.sh " + dir + "/out-bad bench > " + dir +
                              "/log 2>&1";
      const int rc = std::system(cmd.c_str());
      CHECK(WIFEXITED(rc));
      CHECK(WEXITSTATUS(rc) == 2);
      CHECK_THAT(read_text(dir + "/log"), Catch::Contains("VOLT_GPU_END must be a time in epoch seconds") &&
                                              Catch::Contains("got '" + bad + "'"));
      CHECK_FALSE(std::filesystem::exists(dir + "/out-bad"));
    }
  }
  // Every run rewrites the carried .pc files into deps/pkgconfig, pointing into the deps folder.
  dry_run(dir, "", "bench");
  const std::string rewritten = read_text(dir + "/deps/pkgconfig/sentencepiece.pc");
  CHECK_THAT(rewritten, Catch::Contains("prefix=" + dir + "/deps/usr\n"));
  CHECK_THAT(rewritten, Catch::Contains("includedir=" + dir + "/deps/usr/include\n"));
  CHECK_THAT(rewritten, Catch::Contains("libdir=${prefix}/lib/x86_64-linux-gnu\n"));
  CHECK_THAT(rewritten, Catch::Contains("-I" + dir + "/deps/usr/include/sp"));
}
