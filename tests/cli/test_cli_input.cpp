// The `volt` command refuses bad input clearly and before any work: help, missing or unreadable
// configs, keys given twice, sections of the wrong type, several configs merged in order, and
// `consolidate` never destroying a file it was not asked to replace.
#include <torch/torch.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "boring_model.h"
#include "cli/cli_support.h"
#include "volt/checkpoint/checkpoint.h"
#include "volt/checkpoint/state_io.h"
#include "volt/checkpoint/weights.h"
#include "volt/core/compat.h"
#include "volt/strategies/strategy.h"

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

const std::string kTiny = std::string(VOLT_SOURCE_DIR) + "/configs/tiny.yaml";

struct Run {
  int code = -1;
  std::string output;
};

Run volt_cli(const std::vector<std::string>& args, const std::string& dir) {
  static int n = 0;
  std::vector<std::string> argv{VOLT_CLI};
  argv.insert(argv.end(), args.begin(), args.end());
  const std::string prefix = dir + "/input." + std::to_string(n++);
  Run r;
  r.code = run_processes({argv}, {{}}, 120, prefix)[0];
  r.output = read_text(prefix + ".0.log");
  return r;
}

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

}  // namespace

TEST_CASE("volt --help and volt SUBCOMMAND --help print the usage and exit 0", "[cli]") {
  const std::string dir = temp_dir("cli-help");
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--help"}, {"-h"}, {"help"}, {"fit", "--help"}, {"consolidate", "--help"}}) {
    INFO(args[0]);
    const Run r = volt_cli(args, dir);
    CHECK(r.code == 0);
    CHECK_THAT(r.output, Contains("usage: volt"));
  }
}

TEST_CASE("volt refuses a run without a config, a folder, a key given twice or a section of the wrong type", "[cli]") {
  const std::string dir = temp_dir("cli-input");
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  write(dir + "/twice.yaml", "trainer:\n  max_steps: 3\n  max_steps: 5\n");
  write(dir + "/trainer-list.yaml", "trainer: [1, 2]\n");
  fs::create_directories(dir + "/folder.yaml");
  fs::create_directories(dir + "/data/valid.txt");
  fs::create_symlink(dir + "/loop-b.yaml", dir + "/loop-a.yaml");
  fs::create_symlink(dir + "/loop-a.yaml", dir + "/loop-b.yaml");
  std::vector<Case> cases = {
      {{"fit"}, "no --config"},
      {{"fit", "--config", dir + "/folder.yaml"}, "is a folder"},
      {{"fit", "--config", dir + "/loop-a.yaml"}, "symbolic links"},
      {{"fit", "--config", dir + "/twice.yaml"}, "'trainer.max_steps' is given twice"},
      {{"fit", "--config", dir + "/trainer-list.yaml"}, "config key 'trainer': expected a map, got a list"},
      {{"fit", "--config", kTiny, "--trainer=5"}, "config key 'trainer': expected a map, got '5'"},
      {{"fit", "--config", kTiny, "--data.data_dir=" + dir + "/data"}, "valid.txt' is a folder"},
      {{"fit", "--config", kTiny, "--data.data_dir=" + dir + "/nowhere"}, "does not exist"},
      {{"validate", "--config", kTiny, "--trainer.default_root_dir=" + dir + "/runs",
        "--ckpt_path=" + dir + "/nowhere.ckpt"},
       "config key 'ckpt_path': '" + dir + "/nowhere.ckpt' does not exist"},
      {{"fit", "--config", kTiny, "--trainer.devices=1000"}, "trainer.devices"},
      {{"fit", "--config", kTiny, "--model.lr=inf"}, "model.lr"},
      {{"fit", "--config", kTiny, "--data.block_size=100000"}, "data.block_size"},
      {{"fit", "--config", kTiny, "--trainer.strategy.name=fsdp", "--trainer.strategy.timeout=1000000000000000"},
       "trainer.strategy.timeout"},
      {{"fit", "--config", kTiny, "--trainer.strategy.name=fsdp", "--trainer.strategy.device_mesh=[1, 1]"},
       "device_mesh"},
      {{"fit", "--config", kTiny, "--trainer.strategy.name=fsdp", "--trainer.strategy.param_dtype=int8"},
       "config key 'trainer.strategy.param_dtype': unknown dtype 'int8'"},
      {{"fit", "--config", kTiny, "--trainer.devices=2", "--trainer.strategy=single_device", "--print_config"},
       "single_device"},
      {{"fit", "--config", kTiny, "--trainer.strategy.auto_wrap_policy=7", "--trainer.strategy.name=fsdp"},
       "trainer.strategy.auto_wrap_policy"},
  };
  if (!compat::kCpuHalfMatmul)  // LibTorch 1.13 has no float16 CPU matmuls; 2.x trains with them
    cases.push_back(
        {{"fit", "--config", kTiny, "--trainer.strategy.name=fsdp", "--trainer.strategy.param_dtype=float16"},
         "float16 has no CPU matmul kernels"});
  for (const auto& c : cases) {
    INFO(c.args.back());
    const Run r = volt_cli(c.args, dir);
    INFO(r.output);
    CHECK(r.code == 2);
    CHECK_THAT(r.output, Contains(c.says));
    CHECK_FALSE(fs::exists(dir + "/lightning_logs"));
    CHECK_FALSE(fs::exists(dir + "/runs"));  // the ckpt_path case's root: no version folder made
  }
  if (::geteuid() != 0) {  // root reads any file
    write(dir + "/secret.yaml", "trainer: {}\n");
    fs::permissions(dir + "/secret.yaml", fs::perms::none);
    const Run r = volt_cli({"fit", "--config", dir + "/secret.yaml"}, dir);
    CHECK(r.code == 2);
    CHECK_THAT(r.output, Contains("cannot be read") && Contains("ermission denied"));
  }
}

TEST_CASE("volt under torchrun or srun with a one-process strategy refuses to train alone in each process",
          "[cli][launch]") {
  // devices: 1 (configs/tiny.yaml's) with strategy auto under a launcher that started 2 processes:
  // each trained as a job of one, and the second's fit found the first's checkpoint lock.
  const std::string dir = temp_dir("cli-one-of-many");
  const std::vector<std::pair<std::map<std::string, std::string>, std::string>> launchers = {
      {{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29613"}},
       "torchrun environment says WORLD_SIZE=2"},
      {{{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_JOB_ID", "77"}},
       "slurm environment says SLURM_STEP_NUM_TASKS=2"}};
  auto run = [&](const std::map<std::string, std::string>& env, const std::string& name) {
    const std::string prefix = dir + "/" + name;
    const int code = run_processes(
        {{VOLT_CLI, "fit", "--config", kTiny, "--trainer.default_root_dir=" + dir + "/runs",
          "--data.data_dir=" + demo_data_dir(), "--trainer.max_steps=1", "--trainer.limit_val_batches=0"}},
        {env}, 120, prefix)[0];
    return std::make_pair(code, read_text(prefix + ".0.log"));
  };
  for (size_t i = 0; i < launchers.size(); ++i) {
    const auto [code, out] = run(launchers[i].first, "launched" + std::to_string(i));
    INFO(out);
    CHECK(code == 2);
    CHECK_THAT(out, Contains(launchers[i].second) && Contains("would train alone"));
    CHECK_FALSE(fs::exists(dir + "/runs"));
  }
  // One process, as Lightning sees it: an interactive allocation's shell (salloc), and a batch
  // script's own shell (srun not used: no SLURM_STEP_NUM_TASKS). Both train, on the demo's data.
  if (!have_demo_data()) {
    WARN("WikiText-2 not found beside the repository: the one-process runs are skipped");
    return;
  }
  const std::vector<std::map<std::string, std::string>> one_process = {
      {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_JOB_NAME", "bash"}},
      {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NAME", "train"}}};
  for (size_t i = 0; i < one_process.size(); ++i) {
    const auto [code, out] = run(one_process[i], "one" + std::to_string(i));
    INFO(out);
    CHECK(code == 0);
  }
}

TEST_CASE("Several --config files merge in order, key by key, as LightningCLI's", "[cli]") {
  const std::string dir = temp_dir("cli-merge");
  write(dir + "/more.yaml", "trainer:\n  max_steps: 7\n  strategy: {name: ddp}\nmodel:\n  ninp: 32\n");
  const Run r = volt_cli({"fit", "--config", kTiny, "--config", dir + "/more.yaml", "--print_config"}, dir);
  INFO(r.output);
  REQUIRE(r.code == 0);
  const YAML::Node tiny = YAML::LoadFile(kTiny);
  const YAML::Node cfg = YAML::Load(r.output.substr(0, r.output.rfind('\n')));
  CHECK(cfg["trainer"]["max_steps"].as<int64_t>() == 7);  // the later file wins
  CHECK(cfg["trainer"]["strategy"]["name"].as<std::string>() == "ddp");
  CHECK(cfg["model"]["init_args"]["ninp"].as<int64_t>() == 32);
  CHECK(cfg["model"]["init_args"]["nhead"].as<int64_t>() == tiny["model"]["nhead"].as<int64_t>());  // from the first
  CHECK(cfg["data"]["init_args"]["batch_size"].as<int64_t>() == tiny["data"]["batch_size"].as<int64_t>());
}

TEST_CASE("volt consolidate never overwrites a file unasked, nor writes into its own input", "[cli][consolidate]") {
  const std::string dir = temp_dir("cli-consolidate");
  const std::string src = dir + "/sharded";
  {
    SingleDeviceStrategy s(Precision("32-true", "cpu"), "cpu");
    BoringModel m;
    save_state(s.state_layout(m, {}), CheckpointHeader{}, src, CheckpointFormat::Sharded, s.state_comm());
  }
  const std::string out = dir + "/full.ckpt";
  write(out, "precious");
  Run r = volt_cli({"consolidate", src, "-o", out}, dir);
  CHECK(r.code == 2);
  CHECK_THAT(r.output, Contains("--overwrite"));
  CHECK(read_text(out) == "precious");
  r = volt_cli({"consolidate", src, "-o", src + "/rank_00000.ckpt", "--overwrite"}, dir);
  CHECK(r.code == 2);
  CHECK_THAT(r.output, Contains("inside the input"));
  CHECK(load_checkpoint_file(src).state_dict.size() == 6);  // the source is intact
  r = volt_cli({"consolidate", src, "-o", out, "--overwrite"}, dir);
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(load_checkpoint_file(out).state_dict.size() == 6);
}

TEST_CASE("volt consolidate --format safetensors writes the model's weights, loadable by load_weights",
          "[cli][consolidate]") {
  const std::string dir = temp_dir("cli-consolidate-st");
  const std::string src = dir + "/sharded";
  BoringModel m;
  {
    SingleDeviceStrategy s(Precision("32-true", "cpu"), "cpu");
    save_state(s.state_layout(m, {}), CheckpointHeader{}, src, CheckpointFormat::Sharded, s.state_comm());
  }
  Run r = volt_cli({"consolidate", src, "--format", "parquet"}, dir);
  CHECK(r.code == 2);
  CHECK_THAT(r.output, Contains("'parquet'") && Contains("safetensors"));
  r = volt_cli({"consolidate", src, "--format=safetensors"}, dir);
  INFO(r.output);
  REQUIRE(r.code == 0);
  BoringModel fresh;
  torch::manual_seed(99);
  for (auto& p : fresh.parameters()) p.detach().uniform_();
  const auto report = load_weights(fresh, src + ".safetensors");
  CHECK(report.format == "safetensors");
  for (size_t i = 0; i < m.parameters().size(); ++i) CHECK(torch::equal(m.parameters()[i], fresh.parameters()[i]));
}
