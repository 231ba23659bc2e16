/// Checkpoint save and load on the CPU: "full" (rank 0 writes one file, gathering one FSDP unit at a
/// time) vs "sharded" (every rank writes its own file, no gathering) at world 1, 2, 4, on a stack of
/// Linear blocks of about --params_mb MB of fp32 weights (Ψ parameters), FSDP FULL_SHARD with one
/// unit per block, Adam after one step: the checkpoint holds weights + exp_avg + exp_avg_sq, ~12Ψ
/// bytes. For every (format, world) it measures:
///   - save time: Trainer::save_checkpoint (including its fsyncs), rank 0's wall time, all ranks
///     released by a barrier; MB/s = bytes on disk / time, and that as a share of the disk ceiling,
///   - load time: CheckpointReader + Strategy::load_checkpoint (model and optimizer, every rank reads
///     its own ranges), in the same processes; MB/s and the share of the read ceiling,
///   - extra peak memory of each operation: VmHWM after it minus VmRSS before it, with the peak reset
///     (/proc/self/clear_refs) right before; max over ranks,
///   - how much of the checkpoint was in the page cache when the load started.
/// The ceiling, measured in the same run (at the start and again at the end; the better counts):
/// a file of the full checkpoint's size written in 8 MiB blocks with write(2) then fsync, in the
/// same folder; and read back sequentially, warm (page cache) and after POSIX_FADV_DONTNEED.
///
/// Usage: bench_checkpoint [--params_mb=200] [--width=1024] [--batch=4] [--worlds=1,2,4]
///                         [--formats=full,sharded] [--repeats=2] [--dir=DIR] [--cold] [--results=FILE]
///   --dir      where checkpoints go (default: a fresh folder under /tmp, removed at the end)
///   --repeats  saves and loads per configuration (median time, max peak)
///   --cold     evict the checkpoint from the page cache before each load (the default loads right
///              after the save, mostly from the page cache, as a resume in the same job would)
///   --results  keep the raw results in FILE and skip configurations it already has (resumable)
/// Options take "--k=v" or "--k v". Expect a few minutes on 2 cores at the defaults.
///
/// How it runs (as bench_fsdp): the process you start measures the ceiling and, for each
/// configuration, starts this binary again with "--run FORMAT WORLD --out FILE"; that child's
/// Trainer (devices = WORLD) self-launches the other ranks, trains one step, and a callback saves and
/// loads in on_train_end, while the model is still sharded. Rank 0 appends one line to FILE.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_util.h"
#include "volt/checkpoint/checkpoint_reader.h"
#include "volt/core/files.h"
#include "volt/core/hooked_module.h"
#include "volt/distributed/launcher.h"
#include "volt/strategies/fsdp/fsdp_strategy.h"
#include "volt/trainer/trainer.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace volt {
namespace {

const std::vector<std::string> kFormats = {"full", "sharded"};
constexpr size_t kBlockBytes = size_t{8} << 20;

struct Args {
  double params_mb = 200;
  int64_t width = 1024, batch = 4, repeats = 2;
  double lr = 1e-3;
  std::vector<int64_t> worlds = {1, 2, 4};
  std::vector<std::string> formats = kFormats;
  std::string dir;  // "" = a temp folder
  bool cold = false;
  std::string results;
  // Internal: one configuration (the child's side).
  std::string run_format;
  int64_t run_world = 0;
  std::string out;

  int64_t layers() const {
    const double per_layer = static_cast<double>(width * width + width) * 4;
    return std::max<int64_t>(1, static_cast<int64_t>(params_mb * 1e6 / per_layer + 0.5));
  }
  int64_t params() const { return layers() * (width * width + width) + width + 1; }
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    std::string inline_value;
    bool has_inline = false;
    if (const auto eq = k.find('='); k.rfind("--", 0) == 0 && eq != std::string::npos) {
      inline_value = k.substr(eq + 1);
      k = k.substr(0, eq);
      has_inline = true;
    }
    auto value = [&]() -> std::string {
      if (has_inline) {
        has_inline = false;
        return inline_value;
      }
      if (i + 1 >= argc) throw std::invalid_argument("missing value after " + k);
      return argv[++i];
    };
    if (k == "--params_mb")
      a.params_mb = std::stod(value());
    else if (k == "--width")
      a.width = std::stoll(value());
    else if (k == "--batch")
      a.batch = std::stoll(value());
    else if (k == "--repeats")
      a.repeats = std::stoll(value());
    else if (k == "--lr")
      a.lr = std::stod(value());
    else if (k == "--dir")
      a.dir = value();
    else if (k == "--cold")
      a.cold = true;
    else if (k == "--results")
      a.results = value();
    else if (k == "--worlds") {
      a.worlds.clear();
      for (const auto& w : bench::split_list(value())) a.worlds.push_back(std::stoll(w));
    } else if (k == "--formats") {
      a.formats = bench::split_list(value());
      for (const auto& f : a.formats)
        if (std::find(kFormats.begin(), kFormats.end(), f) == kFormats.end())
          throw std::invalid_argument("unknown format '" + f + "' (full, sharded)");
    } else if (k == "--run") {
      a.run_format = value();
      if (i + 1 >= argc) throw std::invalid_argument("--run needs FORMAT WORLD");
      a.run_world = std::stoll(argv[++i]);
    } else if (k == "--out")
      a.out = value();
    else
      throw std::invalid_argument("unknown argument " + k);
  }
  if (a.params_mb <= 0 || a.width < 1 || a.batch < 1 || a.repeats < 1) throw std::invalid_argument("bad sizes");
  for (int64_t w : a.worlds)
    if (w < 1) throw std::invalid_argument("bad world size " + std::to_string(w));
  return a;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// ---- files and the page cache ------------------------------------------------------------------

/// Regular files at `path` (itself, or everything under it).
std::vector<fs::path> files_of(const std::string& path) {
  std::vector<fs::path> out;
  if (fs::is_regular_file(path))
    out.emplace_back(path);
  else if (fs::is_directory(path))
    for (const auto& e : fs::directory_iterator(path))  // a sharded checkpoint is one level
      if (e.is_regular_file()) out.push_back(e.path());
  return out;
}

double bytes_on_disk(const std::string& path) {
  double n = 0;
  for (const auto& f : files_of(path)) n += static_cast<double>(fs::file_size(f));
  return n;
}

/// Bytes of `path`'s files resident in the page cache (mincore; does not fault pages in).
double cached_bytes(const std::string& path) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  double n = 0;
  for (const auto& f : files_of(path)) {
    const int fd = ::open(f.c_str(), O_RDONLY);
    if (fd < 0) continue;
    const size_t size = fs::file_size(f);
    if (size > 0) {
      void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
      if (p != MAP_FAILED) {
        std::vector<unsigned char> vec((size + page - 1) / page);
        if (::mincore(p, size, vec.data()) == 0)
          for (unsigned char v : vec) n += (v & 1) ? static_cast<double>(page) : 0.0;
        ::munmap(p, size);
      }
    }
    ::close(fd);
  }
  return n;
}

/// Drops `path`'s (clean, fsynced) pages from the page cache; no root needed.
void evict(const std::string& path) {
  for (const auto& f : files_of(path)) {
    const int fd = ::open(f.c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

void write_all(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw std::runtime_error("write " + path + ": " + std::strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

/// Seconds to write `bytes` to a new file `path` in 8 MiB write(2) calls, fsync and close.
double timed_write(const std::string& path, double bytes) {
  std::vector<char> block(kBlockBytes);
  uint64_t x = 0x9E3779B97F4A7C15ull;  // random bytes: nothing below can compress or dedupe them
  for (size_t i = 0; i + 8 <= block.size(); i += 8) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    std::memcpy(block.data() + i, &x, 8);
  }
  const auto t0 = Clock::now();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw std::runtime_error("open " + path + ": " + std::strerror(errno));
  for (double left = bytes; left > 0; left -= static_cast<double>(kBlockBytes))
    write_all(fd, block.data(), static_cast<size_t>(std::min(left, static_cast<double>(kBlockBytes))), path);
  if (::fsync(fd) != 0) throw std::runtime_error("fsync " + path + ": " + std::strerror(errno));
  ::close(fd);
  return seconds_since(t0);
}

/// Seconds to read `path` start to end in 8 MiB read(2) calls.
double timed_read(const std::string& path) {
  std::vector<char> block(kBlockBytes);
  const auto t0 = Clock::now();
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw std::runtime_error("open " + path + ": " + std::strerror(errno));
  for (;;) {
    const ssize_t r = ::read(fd, block.data(), block.size());
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw std::runtime_error("read " + path + ": " + std::strerror(errno));
    if (r == 0) break;
  }
  ::close(fd);
  return seconds_since(t0);
}

struct Ceiling {
  double bytes = 0, write_s = 0, warm_read_s = 0, cold_read_s = 0, cold_resident = 0;
};

Ceiling measure_ceiling(const std::string& dir, double bytes) {
  const std::string path = dir + "/ceiling.bin";
  Ceiling c;
  c.bytes = bytes;
  c.write_s = timed_write(path, bytes);
  c.warm_read_s = timed_read(path);
  evict(path);
  c.cold_resident = cached_bytes(path) / bytes;
  c.cold_read_s = timed_read(path);
  fs::remove(path);
  return c;
}

// ---- the model -----------------------------------------------------------------------------------

/// Linear + tanh, routed through HookedModule so FSDP makes each one a unit ("Block").
class Block : public HookedModule {
 public:
  explicit Block(int64_t width) : HookedModule("Block") {
    linear = register_module("linear", torch::nn::Linear(width, width));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return intercepted({x}, [this](const TensorVec& in) { return torch::tanh(linear->forward(in[0])); });
  }
  torch::nn::Linear linear{nullptr};
};

class BlockStack : public LightningModule {
 public:
  BlockStack(int64_t width, int64_t layers, double lr) : LightningModule("BlockStack"), lr_(lr) {
    for (int64_t i = 0; i < layers; ++i)
      blocks_.push_back(register_module("block" + std::to_string(i), std::make_shared<Block>(width)));
    head_ = register_module("head", torch::nn::Linear(width, 1));
  }
  torch::Tensor training_step(const Batch& batch, int64_t) override {
    torch::Tensor x = batch[0];
    for (auto& b : blocks_) x = b->forward(x);
    x = head_->forward(x);
    return torch::mse_loss(x, torch::zeros_like(x));
  }
  Optimizers configure_optimizers() override {
    OptimizerConfig c;
    c.optimizer = std::make_shared<torch::optim::Adam>(parameters(), torch::optim::AdamOptions(lr_));
    return c;
  }

 private:
  double lr_;
  std::vector<std::shared_ptr<Block>> blocks_;
  torch::nn::Linear head_{nullptr};
};

class RandomInputs : public Dataset {
 public:
  RandomInputs(int64_t n, int64_t width) : data_(torch::randn({n, width})) {}
  int64_t size() const override { return data_.size(0); }
  Batch get(int64_t i) const override { return {data_[i]}; }

 private:
  torch::Tensor data_;
};

// ---- one configuration (every rank) ------------------------------------------------------------

/// Saves and loads `repeats` times at the end of training, while the model is still sharded.
class SaveLoad : public Callback {
 public:
  SaveLoad(std::string path, int64_t repeats, bool cold) : path_(std::move(path)), repeats_(repeats), cold_(cold) {}
  std::string state_key() const override { return "BenchCheckpointSaveLoad"; }

  void on_train_end(Trainer& t, LightningModule& m) override {
    Strategy& s = t.strategy();
    const bool zero = t.is_global_zero();
    if (auto* fsdp = dynamic_cast<FSDPStrategy*>(&s)) units = static_cast<int64_t>(fsdp->units().size());
    auto remove = [&] {
      s.barrier("bench_ckpt_rm");
      if (zero) detail::remove_tree(path_);
      s.barrier("bench_ckpt_rm_done");
    };
    for (int64_t r = 0; r < repeats_; ++r) {
      remove();  // each save writes a new checkpoint, not over an old one

      s.barrier("bench_ckpt_save");
      double rss0 = bench::rss_bytes();
      reset_ok = bench::reset_peak() && reset_ok;
      auto t0 = Clock::now();
      t.save_checkpoint(path_);
      save_s.push_back(seconds_since(t0));
      save_peak = std::max(save_peak, bench::hwm_bytes() - rss0);

      s.barrier("bench_ckpt_saved");
      if (zero) {
        size = bytes_on_disk(path_);
        if (cold_) evict(path_);
        cached = std::min(cached, size > 0 ? cached_bytes(path_) / size : 0.0);
      }

      s.barrier("bench_ckpt_load");
      rss0 = bench::rss_bytes();
      reset_ok = bench::reset_peak() && reset_ok;
      t0 = Clock::now();
      {
        CheckpointReader reader(path_);
        s.load_checkpoint(m, {t.optimizer()}, reader);
      }
      load_s.push_back(seconds_since(t0));
      load_peak = std::max(load_peak, bench::hwm_bytes() - rss0);
    }
    remove();
  }

  std::vector<double> save_s, load_s;
  double save_peak = 0, load_peak = 0, size = 0, cached = 1;
  int64_t units = 0;
  bool reset_ok = true;

 private:
  std::string path_;
  int64_t repeats_;
  bool cold_;
};

int run_one(const Args& a) {
  spdlog::set_level(spdlog::level::warn);
  const int64_t world = a.run_world;
  if (world == 1) torch::set_num_threads(static_cast<int>(detail::available_cores()));
  if (a.dir.empty()) throw std::invalid_argument("--run needs --dir");

  TrainerOptions t = bench::quiet_trainer_options(1);
  t.accelerator = "cpu";
  t.devices = world;
  t.strategy = "fsdp";
  t.strategy.fsdp.sharding_strategy = "FULL_SHARD";
  t.strategy.fsdp.auto_wrap_policy.module_types = {"Block"};
  t.strategy.fsdp.state_dict_type = a.run_format;

  const std::string path =
      a.dir + "/" + a.run_format + "_w" + std::to_string(world) + (a.run_format == "full" ? ".ckpt" : "");
  torch::manual_seed(1);
  BlockStack model(a.width, a.layers(), a.lr);
  DataLoader loader(std::make_shared<RandomInputs>(a.batch * world, a.width),
                    DataLoaderOptions{a.batch, false, false, 0});
  auto probe = std::make_shared<SaveLoad>(path, a.repeats, a.cold);
  Trainer trainer(t, {probe});
  trainer.fit(model, loader);

  auto mx = trainer.strategy()
                .all_reduce(torch::tensor({probe->save_peak, probe->load_peak}, torch::kDouble), ReduceOp::Max)
                .contiguous();
  auto mn = trainer.strategy().all_reduce(torch::tensor({probe->reset_ok ? 1.0 : 0.0}, torch::kDouble), ReduceOp::Min);
  const int64_t threads = torch::get_num_threads();
  if (trainer.global_rank() != 0) return 0;

  const double* v = mx.data_ptr<double>();
  std::ofstream out(a.out, std::ios::app);
  out.precision(17);
  out << a.run_format << ' ' << world << ' ' << threads << ' ' << a.params() << ' ' << probe->units << ' '
      << probe->size << ' ' << bench::median(probe->save_s) << ' ' << bench::median(probe->load_s) << ' ' << v[0] << ' '
      << v[1] << ' ' << probe->cached << ' ' << mn.item<double>() << ' ' << probe->save_s.size() << '\n';
  return out ? 0 : 1;
}

// ---- the whole run (the process you start) -----------------------------------------------------

struct Row {
  std::string format;
  int64_t world = 0, threads = 0, params = 0, units = 0, repeats = 0;
  double size = 0, save_s = 0, load_s = 0, save_peak = 0, load_peak = 0, cached = 0, reset_ok = 0;
  bool ok = false;
  std::string error;
};

int run_all(int argc, char** argv, const Args& a) {
  std::string dir = a.dir;
  const bool own_dir = dir.empty();
  if (own_dir) {
    char tmpl[] = "/tmp/bench_checkpoint_XXXXXX";
    if (!::mkdtemp(tmpl)) throw std::runtime_error(std::string("cannot create a temp folder: ") + std::strerror(errno));
    dir = tmpl;
  } else {
    fs::create_directories(dir);
  }
  struct RemoveDir {  // also on an exception
    std::string dir;
    ~RemoveDir() {
      if (!dir.empty()) detail::remove_tree(dir);
    }
  } cleanup{own_dir ? dir : std::string()};
  std::string out = a.results;
  if (out.empty()) out = dir + "/results.txt";

  auto have_result = [&](const std::string& f, int64_t world) {
    std::ifstream in(out);
    for (std::string line; std::getline(in, line);) {
      std::istringstream s(line);
      std::string ff;
      int64_t w = 0;
      if (s >> ff >> w && ff == f && w == world) return true;
    }
    return false;
  };

  const double psi = static_cast<double>(a.params());
  const double ckpt_bytes = 12 * psi;  // weights + exp_avg + exp_avg_sq, fp32
  struct statfs sf {};
  const bool tmpfs = ::statfs(dir.c_str(), &sf) == 0 && sf.f_type == 0x01021994;  // TMPFS_MAGIC

  const auto t_all = Clock::now();
  std::fprintf(stderr, "bench_checkpoint: ceiling (%.0f MB in %s) ...\n", ckpt_bytes / 1e6, dir.c_str());
  const Ceiling c0 = measure_ceiling(dir, ckpt_bytes);

  std::vector<Row> rows;
  for (const auto& f : a.formats)
    for (int64_t world : a.worlds) {
      Row r;
      r.format = f;
      r.world = world;
      if (!have_result(f, world)) {
        std::fprintf(stderr, "bench_checkpoint: %s, world %lld ...\n", f.c_str(), static_cast<long long>(world));
        const auto t0 = Clock::now();
        const int rc = bench::spawn_self(argv, argc, {"--run", f, std::to_string(world), "--out", out, "--dir", dir});
        std::fprintf(stderr, "bench_checkpoint: %s, world %lld: exit %d after %.0f s\n", f.c_str(),
                     static_cast<long long>(world), rc, seconds_since(t0));
        if (rc != 0) r.error = "failed (exit " + std::to_string(rc) + ")";
      }
      rows.push_back(r);
    }

  std::fprintf(stderr, "bench_checkpoint: ceiling again ...\n");
  const Ceiling c1 = measure_ceiling(dir, ckpt_bytes);

  std::ifstream in(out);
  for (std::string line; std::getline(in, line);) {
    std::istringstream s(line);
    Row r;
    s >> r.format >> r.world >> r.threads >> r.params >> r.units >> r.size >> r.save_s >> r.load_s >> r.save_peak >>
        r.load_peak >> r.cached >> r.reset_ok >> r.repeats;
    if (!s) continue;
    r.ok = true;
    for (auto& row : rows)
      if (row.format == r.format && row.world == r.world && row.error.empty()) row = r;
  }
  in.close();
  if (a.results.empty()) fs::remove(out);

  auto mb = [](double b) { return b / 1e6; };
  const double write_bw = std::max(c0.bytes / c0.write_s, c1.bytes / c1.write_s);
  const double warm_bw = std::max(c0.bytes / c0.warm_read_s, c1.bytes / c1.warm_read_s);
  const double cold_bw = std::max(c0.bytes / c0.cold_read_s, c1.bytes / c1.cold_read_s);
  const double read_bw = a.cold ? cold_bw : warm_bw;
  bool reset_everywhere = true, any = false;
  for (const auto& r : rows) {
    if (r.ok && r.reset_ok < 0.5) reset_everywhere = false;
    any = any || r.ok;
  }

  std::printf(
      "\nCheckpoint save / load on the CPU: %lld Linear(%lld, %lld) blocks + head, Ψ = %lld parameters "
      "(%.0f MB fp32), Adam after 1 step (checkpoint ≈ 12Ψ = %.0f MB), FSDP FULL_SHARD, one unit per "
      "block; %lld cores split among the ranks; median of %lld save(s) and load(s) per row; loads %s.\n\n",
      static_cast<long long>(a.layers()), static_cast<long long>(a.width), static_cast<long long>(a.width),
      static_cast<long long>(a.params()), mb(4 * psi), mb(ckpt_bytes),
      static_cast<long long>(detail::available_cores()), static_cast<long long>(a.repeats),
      a.cold ? "after evicting the checkpoint from the page cache (--cold)" : "right after the save (page cache warm)");
  std::printf(
      "| format | world | size MB | save s | save MB/s | %% of disk | load s | load MB/s | %% of read | "
      "cached at load | save peak extra MB (max rank) | load peak extra MB (max rank) |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (const auto& r : rows) {
    if (!r.ok) {
      std::printf("| %s | %lld | %s | | | | | | | | | |\n", r.format.c_str(), static_cast<long long>(r.world),
                  r.error.empty() ? "no result" : r.error.c_str());
      continue;
    }
    const double save_bw = r.size / r.save_s, load_bw = r.size / r.load_s;
    std::printf("| %s | %lld | %.0f | %.2f | %.0f | %.0f%% | %.2f | %.0f | %.0f%% | %.0f%% | %.0f | %.0f |\n",
                r.format.c_str(), static_cast<long long>(r.world), mb(r.size), r.save_s, mb(save_bw),
                100 * save_bw / write_bw, r.load_s, mb(load_bw), 100 * load_bw / read_bw, 100 * r.cached,
                mb(r.save_peak), mb(r.load_peak));
  }
  std::printf(
      "\nCeiling (%s%s, %.0f MB file): sequential write (write(2) in 8 MiB blocks + fsync) %.0f MB/s at the "
      "start, %.0f MB/s at the end, %.0f MB/s counts as 100%% of disk. Sequential read: warm (page cache) "
      "%.0f MB/s; after POSIX_FADV_DONTNEED %.0f MB/s (%.0f%% of the file still cached), %.0f MB/s counts as "
      "100%% of read.\n",
      dir.c_str(), tmpfs ? ", tmpfs: the \"disk\" is memory" : "", mb(ckpt_bytes), mb(c0.bytes / c0.write_s),
      mb(c1.bytes / c1.write_s), mb(write_bw), mb(warm_bw), mb(cold_bw),
      100 * std::max(c0.cold_resident, c1.cold_resident), mb(read_bw));
  std::printf(
      "Save includes the checkpoint's own fsyncs, renames and checksums (xxh64); load includes opening and "
      "verifying the checkpoint and every byte read, and setting the optimizer state. Peak extra = VmHWM "
      "after the operation - VmRSS before it (page cache not included)%s.\n",
      reset_everywhere ? ""
                       : "; the kernel refused to reset the peak on some rank, so those figures are "
                         "the process's whole-life peak minus RSS");
  std::printf("Total wall time %.0f s.\n", seconds_since(t_all));
  if (!any) {
    std::fprintf(stderr, "bench_checkpoint: no configuration produced results\n");
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace volt

int main(int argc, char** argv) {
  try {
    volt::bench::track_live_memory();  // freed large tensors go back to the OS: RSS follows live memory
    const volt::Args a = volt::parse(argc, argv);
    if (!a.run_format.empty()) {
      if (a.out.empty()) throw std::invalid_argument("--run needs --out FILE");
      return volt::run_one(a);
    }
    return volt::run_all(argc, argv, a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_checkpoint: error: %s\n", e.what());
    return 1;
  }
}
