// LearningRateFinder: the search is deterministic, rewinds the fit exactly (the fit after it equals
// a fit started with the suggested lr), follows Lightning's schedule and suggestion, stops early
// on divergence, and writes a valid PNG.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "boring_model.h"
#include "volt/callbacks/lambda_callback.h"
#include "volt/callbacks/lr_finder.h"
#include "volt/callbacks/plot_image.h"
#include "volt/core/errors.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;

namespace {
struct Run {
  std::map<std::string, torch::Tensor> at_train_start, final_state;
  std::shared_ptr<LearningRateFinder> finder;
  int64_t global_step = 0;
  double lr_at_train_start = 0;
  std::string dir;
};

/// One epoch of BoringModel (Adam at `lr`) on shuffled data, with a finder when `finder_options`.
Run fit(const std::string& dir, double lr, std::optional<LearningRateFinderOptions> finder_options) {
  torch::manual_seed(11);
  BoringOptions bo;
  bo.adam = true;
  bo.lr = lr;
  BoringModel model(bo);
  DataLoader loader(std::make_shared<RandomDataset>(32), DataLoaderOptions{4, true, false, 0});
  auto o = quiet_options(dir);
  o.max_epochs = 2;
  Run r;
  r.dir = dir;
  LambdaCallback::Hooks h;
  h.on_train_start = [&](Trainer& t, LightningModule& m) {
    for (const auto& kv : m.named_parameters()) r.at_train_start[kv.key()] = kv.value().detach().clone();
    r.lr_at_train_start = t.optimizer()->param_groups()[0].options().get_lr();
  };
  std::vector<std::shared_ptr<Callback>> cbs;
  if (finder_options) cbs.push_back(r.finder = std::make_shared<LearningRateFinder>(*finder_options));
  cbs.push_back(std::make_shared<LambdaCallback>(h));
  Trainer trainer(o, cbs);
  trainer.fit(model, loader);
  for (const auto& kv : model.named_parameters()) r.final_state[kv.key()] = kv.value().detach().clone();
  r.global_step = trainer.global_step();
  return r;
}

bool same(const std::map<std::string, torch::Tensor>& a, const std::map<std::string, torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [k, v] : a)
    if (!b.count(k) || !torch::equal(v, b.at(k))) return false;
  return true;
}

uint32_t be32(const std::string& s, size_t at) {
  return (uint32_t(uint8_t(s[at])) << 24) | (uint32_t(uint8_t(s[at + 1])) << 16) | (uint32_t(uint8_t(s[at + 2])) << 8) |
         uint32_t(uint8_t(s[at + 3]));
}

/// Decodes a PNG with python3's zlib (no image library needed): checks every chunk's CRC and the
/// inflated size; returns its exit code, or -1 without python3.
int python_decode(const std::string& path) {
  if (std::system("python3 -c 'import zlib' >/dev/null 2>&1") != 0) return -1;
  const std::string script = path + ".py";
  std::ofstream(script) << R"(import struct, sys, zlib
d = open(sys.argv[1], 'rb').read()
assert d[:8] == b'\x89PNG\r\n\x1a\n'
pos, idat, ihdr = 8, b'', None
while pos < len(d):
    n, = struct.unpack('>I', d[pos:pos + 4]); t = d[pos + 4:pos + 8]; body = d[pos + 8:pos + 8 + n]
    crc, = struct.unpack('>I', d[pos + 8 + n:pos + 12 + n])
    assert zlib.crc32(t + body) & 0xffffffff == crc, t
    if t == b'IHDR': ihdr = struct.unpack('>IIBBBBB', body)
    if t == b'IDAT': idat += body
    pos += 12 + n
w, h = ihdr[0], ihdr[1]
raw = zlib.decompress(idat)
assert len(raw) == h * (1 + 3 * w), len(raw)
red = sum(1 for y in range(h) for x in range(w) if raw[y * (1 + 3 * w) + 1 + 3 * x:y * (1 + 3 * w) + 4 + 3 * x] == bytes([214, 39, 40]))
assert red > 20, red
)";
  return std::system(("python3 " + script + " " + path).c_str()) == 0 ? 0 : 1;
}
}  // namespace

TEST_CASE("LearningRateFinder: deterministic, rewinds exactly, and the fit after it equals one at the suggested lr",
          "[callbacks][lr_finder]") {
  LearningRateFinderOptions fo;
  fo.min_lr = 1e-5;
  fo.max_lr = 1.0;
  fo.num_training_steps = 30;
  fo.early_stop_threshold = std::nullopt;
  const Run a = fit(temp_dir("lr-finder-a"), 1e-3, fo);
  const Run b = fit(temp_dir("lr-finder-b"), 1e-3, fo);
  REQUIRE(a.finder->lrs().size() == 30);
  CHECK(a.finder->lrs() == b.finder->lrs());
  CHECK(a.finder->losses() == b.finder->losses());
  const auto suggestion = a.finder->suggestion();
  REQUIRE(suggestion);
  CHECK(a.finder->optimal_lr() == suggestion);
  CHECK(a.lr_at_train_start == *suggestion);
  // The weights at on_train_start are the initial ones: a fresh model from the same seed.
  torch::manual_seed(11);
  BoringOptions bo;
  bo.adam = true;
  BoringModel fresh(bo);
  std::map<std::string, torch::Tensor> init;
  for (const auto& kv : fresh.named_parameters()) init[kv.key()] = kv.value().detach().clone();
  CHECK(same(a.at_train_start, init));
  // The fit after the search: as a fit started at the suggested lr (optimizer state, loop progress
  // and RNG, hence the shuffle order, rewound).
  const Run c = fit(temp_dir("lr-finder-c"), *suggestion, std::nullopt);
  CHECK(same(a.final_state, c.final_state));
  CHECK(a.global_step == 16);
  CHECK(c.global_step == 16);
  // No temporary checkpoint is left behind.
  CHECK(fs::exists(a.finder->plot_path()));
  for (const auto& e : fs::directory_iterator(a.dir))
    CHECK(e.path().filename().string().rfind(".lr_find_", 0) == std::string::npos);
}

TEST_CASE("LearningRateFinder: Lightning's schedule and suggestion, early stop, the plot", "[callbacks][lr_finder]") {
  LearningRateFinderOptions fo;
  fo.min_lr = 1e-6;
  fo.max_lr = 1e-1;
  fo.num_training_steps = 40;
  fo.update_attr = false;
  const Run r = fit(temp_dir("lr-finder-schedule"), 0.01, fo);
  const auto& lrs = r.finder->lrs();
  const auto& losses = r.finder->losses();
  REQUIRE(lrs.size() == losses.size());
  REQUIRE(lrs.size() >= 12);
  CHECK(lrs[0] == 1e-6);
  for (size_t k = 1; k < lrs.size(); ++k) CHECK(lrs[k] == Approx(1e-6 * std::pow(1e5, (k + 1) / 40.0)));
  CHECK(r.lr_at_train_start == 0.01);  // update_attr off
  // The suggestion: steepest descent of the smoothed loss over [10, n - 1), as torch.gradient.
  const int64_t n = static_cast<int64_t>(losses.size());
  int64_t best = -1;
  double steepest = INFINITY;
  for (int64_t i = 10; i < n - 1; ++i) {
    const int64_t lo = std::max<int64_t>(10, i - 1), hi = std::min<int64_t>(n - 2, i + 1);
    double g;
    if (i == 10 || i == n - 2) {
      g = (losses[hi] - losses[lo]) / (lrs[hi] - lrs[lo]);
    } else {
      const double h1 = lrs[i] - lrs[i - 1], h2 = lrs[i + 1] - lrs[i];
      g = (h1 * h1 * losses[i + 1] - h2 * h2 * losses[i - 1] + (h2 * h2 - h1 * h1) * losses[i]) / (h1 * h2 * (h1 + h2));
    }
    if (g < steepest) steepest = g, best = i;
  }
  REQUIRE(r.finder->optimal_index());
  CHECK(*r.finder->optimal_index() == best);
  // The plot: a PNG of 640 x 480, the suggestion in red.
  const std::string png = r.finder->plot_path();
  REQUIRE(fs::exists(png));
  std::ifstream f(png, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  REQUIRE(bytes.size() > 33);
  CHECK(bytes.substr(0, 8) == std::string("\x89PNG\r\n\x1a\n", 8));
  CHECK(bytes.substr(12, 4) == "IHDR");
  CHECK(be32(bytes, 16) == 640);
  CHECK(be32(bytes, 20) == 480);
  const int decoded = python_decode(png);
  if (decoded < 0) WARN("python3 not found: the PNG was not decoded");
  CHECK(decoded <= 0);

  SECTION("a diverging loss stops the search early") {
    LearningRateFinderOptions wild;
    wild.min_lr = 1e-3;
    wild.max_lr = 1e4;
    wild.num_training_steps = 60;
    const Run d = fit(temp_dir("lr-finder-diverge"), 0.01, wild);
    CHECK(d.finder->lrs().size() < 60);
    CHECK(d.global_step == 16);
  }
}

TEST_CASE("LearningRateFinder: refusals", "[callbacks][lr_finder]") {
  using Catch::Matchers::Contains;
  LearningRateFinderOptions bad;
  bad.mode = "cosine";
  CHECK_THROWS_WITH(LearningRateFinder(bad), Contains("'exponential' or 'linear'"));
  bad.mode = "Linear";  // as Lightning, case-insensitive
  CHECK_NOTHROW(LearningRateFinder(bad));
  bad.max_lr = bad.min_lr;
  CHECK_THROWS_WITH(LearningRateFinder(bad), Contains("max_lr"));
  BoringModel model;
  model.automatic_optimization = false;
  DataLoader loader(std::make_shared<RandomDataset>(8), DataLoaderOptions{4, false, false, 0});
  Trainer trainer(quiet_options(temp_dir("lr-finder-manual")), {std::make_shared<LearningRateFinder>()});
  CHECK_THROWS_WITH(trainer.fit(model, loader), Contains("manual optimization"));
}

TEST_CASE("PlotImage writes the pixels it was given", "[callbacks][lr_finder]") {
  PlotImage img(3, 2);
  img.set(1, 1, {10, 20, 30});
  const std::string png = img.png();
  // Stored deflate: the raw rows follow the zlib header and the block header (5 bytes) in IDAT.
  const size_t idat = png.find("IDAT");
  REQUIRE(idat != std::string::npos);
  const std::string raw = png.substr(idat + 4 + 2 + 5, 2 * (1 + 9));
  CHECK(raw[0] == '\0');
  CHECK(static_cast<uint8_t>(raw[10 + 1 + 3]) == 10);
  CHECK(static_cast<uint8_t>(raw[10 + 1 + 5]) == 30);
  CHECK(static_cast<uint8_t>(raw[1]) == 255);
}
