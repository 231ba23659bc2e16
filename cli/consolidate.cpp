#include "volt/cli/consolidate.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>

#include "volt/checkpoint/checkpoint.h"
#include "volt/cli/args.h"
#include "volt/core/errors.h"

namespace volt::detail {

namespace {

/// The output may not be the input or inside it (that would destroy the source), and replaces an
/// existing file only with --overwrite.
void check_consolidate_output(const std::string& src, const std::string& dst, bool overwrite) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path s = fs::weakly_canonical(src, ec);
  VOLT_CHECK(!ec, CheckpointError, "consolidate: the input '", src, "': ", ec.message());
  const fs::path d = fs::weakly_canonical(dst, ec);
  VOLT_CHECK(!ec, ConfigError, "consolidate: the output '", dst, "': ", ec.message());
  auto rel = d.lexically_relative(s);
  const bool inside = !rel.empty() && *rel.begin() != "..";
  VOLT_CHECK(!inside, ConfigError, "consolidate: the output '", dst, "' is ",
             d == s ? "the input itself" : "inside the input '" + src + "'", "; write it elsewhere (-o FILE)");
  VOLT_CHECK(overwrite || !fs::exists(fs::symlink_status(dst, ec)), ConfigError, "consolidate: '", dst,
             "' exists; pass --overwrite to replace it, or choose another -o FILE");
}

}  // namespace

std::string consolidate_usage(const std::string& program) {
  return "usage: " + program +
         " consolidate SHARDED_CHECKPOINT [-o FILE] [--format volt|safetensors] [--overwrite]\n"
         "  turns a sharded checkpoint folder into one file, tensor by tensor\n"
         "  -o FILE, --output=FILE   the file to write (default: SHARDED_CHECKPOINT.consolidated, or\n"
         "                           SHARDED_CHECKPOINT.safetensors with --format safetensors)\n"
         "  --format volt            a full volt checkpoint (resumable: weights, optimizer, loops) [default]\n"
         "  --format safetensors     the model's weights only, in Hugging Face's safetensors format\n"
         "  --overwrite              replace FILE if it exists\n";
}

int run_consolidate(int argc, char** argv, const std::string& program) {
  const std::string usage = consolidate_usage(program);
  const cli::ArgSpec spec{
      "consolidate",
      {{"output", true, false, 'o', "FILE"}, {"format", true, false, 0, "volt|safetensors"}, {"overwrite", false}},
      1,
      false,
      usage};
  const cli::Args args = cli::parse_args(spec, argc, argv, 2);
  std::string src = args.positional.empty() ? "" : args.positional.front();
  std::string dst = args.get("output");
  const std::string format = args.get("format", "volt");
  const bool overwrite = args.has("overwrite");
  VOLT_CHECK(!src.empty(), ConfigError, "consolidate: missing the sharded checkpoint folder\n", usage);
  while (src.size() > 1 && src.back() == '/') src.pop_back();
  VOLT_CHECK(format == "volt" || format == "safetensors", ConfigError, "consolidate: --format '", format,
             "' is not one of: volt, safetensors\n", usage);
  const WeightsFormat f = format == "safetensors" ? WeightsFormat::Safetensors : WeightsFormat::Volt;
  if (dst.empty()) dst = src + (f == WeightsFormat::Safetensors ? ".safetensors" : ".consolidated");
  check_consolidate_output(src, dst, overwrite);
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t bytes = consolidate_checkpoint(src, dst, f);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spdlog::info("consolidated {} into {}: {:.1f} MB in {:.2f} s", src, dst, static_cast<double>(bytes) / 1e6, s);
  return 0;
}

}  // namespace volt::detail
