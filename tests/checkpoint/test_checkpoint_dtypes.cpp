// Every dtype and precision, saved and loaded through each checkpoint format: the model and the
// optimizer state of whole parameters and of flat groups (FSDP units), in fp32, fp64, bf16 and fp16.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "boring_model.h"
#include "checkpoint/checkpoint_support.h"
#include "volt/callbacks/model_checkpoint.h"
#include "volt/checkpoint/checkpoint.h"
#include "volt/checkpoint/checkpoint_reader.h"
#include "volt/checkpoint/manifest.h"
#include "volt/checkpoint/state_io.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;

namespace {

/// A world of one.
class LocalComm : public StateComm {
 public:
  int64_t rank() const override { return 0; }
  int64_t world_size() const override { return 1; }
  torch::Tensor all_reduce(const torch::Tensor& t, ReduceOp) override { return t; }
  torch::Tensor broadcast(const torch::Tensor& t, int64_t) override { return t; }
};

/// Two parameters ("a" 3x4, "b" 5) of `dtype`, held either whole or as one flat group (padded to
/// 20 elements, as an FSDP unit), stepped by `optimizer` ("adam" or "sgd" with momentum).
struct Rig {
  bool flat;
  torch::Tensor shard;                 // flat: the group's values
  std::vector<torch::Tensor> tensors;  // what the optimizer steps
  std::unique_ptr<torch::optim::Optimizer> opt;

  Rig(at::ScalarType dtype, bool flat_group, const std::string& optimizer, uint64_t seed) : flat(flat_group) {
    auto gen = at::detail::createCPUGenerator(seed);
    const torch::Tensor values = torch::randn({17}, gen).to(dtype);
    if (flat) {
      shard = torch::zeros({20}, torch::TensorOptions().dtype(dtype));
      shard.narrow(0, 0, 17).copy_(values);
      tensors = {shard.narrow(0, 0, 12).detach(), shard.narrow(0, 12, 5).detach()};
    } else {
      tensors = {values.narrow(0, 0, 12).reshape({3, 4}).clone(), values.narrow(0, 12, 5).clone()};
    }
    for (auto& t : tensors) t.requires_grad_(true);
    if (optimizer == "adam")
      opt = std::make_unique<torch::optim::Adam>(tensors, torch::optim::AdamOptions(0.01));
    else
      opt = std::make_unique<torch::optim::SGD>(tensors, torch::optim::SGDOptions(0.01).momentum(0.9));
  }
  void step(uint64_t seed) {
    auto gen = at::detail::createCPUGenerator(seed);
    for (auto& t : tensors) t.mutable_grad() = torch::randn(t.sizes(), gen).to(t.scalar_type());
    opt->step();
  }
  StateLayout layout() {
    StateLayout l;
    l.optimizers = {opt.get()};
    if (!flat) {
      l.params = {{"a", tensors[0]}, {"b", tensors[1]}};
      return l;
    }
    FlatGroup g;
    g.entries = {{"a", {3, 4}, 0, 12}, {"b", {5}, 12, 5}};
    g.slices = {{0, 0, 0, 12, tensors[0]}, {1, 12, 0, 5, tensors[1]}};
    g.shard = shard;
    g.shard_numel = 20;
    g.gather = [](const torch::Tensor& local) { return local; };
    g.all_reduce = [](const torch::Tensor& t, ReduceOp) { return t; };
    l.groups.push_back(std::move(g));
    return l;
  }
  /// Values and optimizer state by name (copies).
  std::map<std::string, torch::Tensor> state() {
    std::map<std::string, torch::Tensor> out = {{"a", tensors[0].detach().reshape({-1}).clone()},
                                                {"b", tensors[1].detach().clone()}};
    for_each_optimizer_state(
        *opt, {{"a", tensors[0]}, {"b", tensors[1]}},
        [&](const std::string& n, const std::string& f, const torch::Tensor& t) {
          out[n + "." + f] =
              t.detach().reshape(f == "step" ? std::vector<int64_t>{} : std::vector<int64_t>{-1}).clone();
        });
    return out;
  }
};

/// BoringModel with its loss in fp32 (this LibTorch's CPU mse_loss has no bf16 kernel).
struct Fp32LossModel : BoringModel {
  using BoringModel::BoringModel;
  torch::Tensor training_step(const Batch& batch, int64_t) override {
    auto out = forward(batch[0]).to(torch::kFloat);
    return torch::mse_loss(out, torch::ones_like(out));
  }
};

void rewrite(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

}  // namespace

TEST_CASE("every dtype, whole or flat, with Adam or SGD state, saves and loads through both formats",
          "[checkpoint][dtypes]") {
  const std::string dir = temp_dir("ckpt-dtypes");
  LocalComm comm;
  for (at::ScalarType dtype : {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf})
    for (bool flat : {false, true})
      for (const std::string optimizer : {"adam", "sgd"})
        for (CheckpointFormat format : {CheckpointFormat::Full, CheckpointFormat::Sharded}) {
          if (dtype == at::kHalf && optimizer == "adam") continue;  // LibTorch's CPU Adam has no fp16 kernel
          const bool sharded = format == CheckpointFormat::Sharded;
          DYNAMIC_SECTION(c10::toString(dtype) << (flat ? " flat group" : " whole") << " " << optimizer
                                               << (sharded ? " sharded" : " full")) {
            const std::string path = dir + "/" + c10::toString(dtype) + (flat ? "-flat-" : "-whole-") + optimizer +
                                     (sharded ? "-sharded" : "-full") + ".ckpt";
            Rig saved(dtype, flat, optimizer, 1);
            saved.step(2);
            CheckpointHeader header;
            header.global_step = 1;
            save_state(saved.layout(), header, path, format, comm);

            {
              CheckpointReader r(path);
              for (const std::string& n : r.names(kModelSection)) CHECK(r.tensor(kModelSection, n).dtype == dtype);
              for (const std::string& n : r.names(kOptimizerSection))
                CHECK(r.tensor(kOptimizerSection, n).dtype ==
                      (n.size() > 5 && n.compare(n.size() - 5, 5, ".step") == 0 ? at::kLong : dtype));
            }
            Rig loaded(dtype, flat, optimizer, 7);  // other values, no optimizer state yet
            load_state(loaded.layout(), CheckpointReader(path));
            check_same_tensors(saved.state(), loaded.state());
            // And the loaded state trains on exactly as the saved one does.
            saved.step(3);
            loaded.step(3);
            check_same_tensors(saved.state(), loaded.state());
            // The whole file or folder reads back through load_checkpoint_file and consolidates.
            const Checkpoint whole = load_checkpoint_file(path);
            for (const auto& [n, t] : whole.state_dict) CHECK(t.scalar_type() == dtype);
            consolidate_checkpoint(path, path + ".consolidated");
            const Checkpoint consolidated = load_checkpoint_file(path + ".consolidated");
            check_same_tensors(whole.state_dict, consolidated.state_dict);
            check_same_tensors(whole.optimizer_state, consolidated.optimizer_state);
          }
        }
}

TEST_CASE("a checkpoint saved in one precision loads into parameters of another, cast to theirs",
          "[checkpoint][dtypes]") {
  const std::string dir = temp_dir("ckpt-dtype-cast");
  LocalComm comm;
  for (CheckpointFormat format : {CheckpointFormat::Full, CheckpointFormat::Sharded}) {
    const std::string path = dir + (format == CheckpointFormat::Sharded ? "/sharded" : "/full");
    Rig saved(at::kBFloat16, true, "adam", 1);
    saved.step(2);
    save_state(saved.layout(), CheckpointHeader(), path, format, comm);
    Rig loaded(at::kFloat, true, "adam", 7);
    load_state(loaded.layout(), CheckpointReader(path));
    for (const auto& [n, t] : saved.state()) {
      INFO(n);
      const torch::Tensor back = loaded.state().at(n);
      CHECK(back.scalar_type() == (t.scalar_type() == at::kLong ? at::kLong : at::kFloat));
      CHECK(torch::equal(back, t.to(back.scalar_type())));
    }
  }
}

TEST_CASE("a sharded checkpoint whose manifest declares float32 for bf16 pieces (volt before #29) still loads",
          "[checkpoint][dtypes][sharded]") {
  const std::string dir = temp_dir("ckpt-old-manifest");
  LocalComm comm;
  Rig saved(at::kBFloat16, true, "adam", 1);
  saved.step(2);
  const std::string path = dir + "/last.ckpt";
  save_state(saved.layout(), CheckpointHeader(), path, CheckpointFormat::Sharded, comm);
  // What the older writer wrote: every flat tensor declared Float, the checksum matching.
  std::string manifest = read_text(path + "/" + kManifestFile);
  size_t replaced = 0;
  for (size_t at = manifest.find("dtype: BFloat16"); at != std::string::npos;
       at = manifest.find("dtype: BFloat16", at), ++replaced)
    manifest.replace(at, 15, "dtype: Float");
  REQUIRE(replaced == 6);  // a, b and their exp_avg, exp_avg_sq
  rewrite(path + "/" + kManifestFile, manifest);
  rewrite(path + "/" + kCompleteMarker, volt::detail::encode_marker(1, manifest));

  CheckpointReader r(path);
  CHECK(r.tensor(kModelSection, "a").dtype == at::kBFloat16);
  Rig loaded(at::kBFloat16, true, "adam", 7);
  load_state(loaded.layout(), r);
  check_same_tensors(saved.state(), loaded.state());
}

TEST_CASE(
    "FSDP under bf16-true: sharded and full checkpoints of FULL_SHARD and SHARD_GRAD_OP resume, with SGD and Adam",
    "[checkpoint][dtypes][fsdp]") {
  for (const std::string sharding : {"FULL_SHARD", "SHARD_GRAD_OP"})
    for (const std::string type : {"sharded", "full"})
      for (bool adam : {false, true}) {
        DYNAMIC_SECTION(sharding << " " << type << (adam ? " adam" : " sgd")) {
          const std::string root = temp_dir("fsdp-bf16-ckpt");
          BoringOptions bo;
          bo.adam = adam;
          bo.lr = 0.01;
          auto o = quiet_options(root);
          o.precision = "bf16-true";
          o.strategy = "fsdp";
          o.strategy.fsdp.sharding_strategy =
              sharding == "FULL_SHARD" ? ShardingStrategy::FullShard : ShardingStrategy::ShardGradOp;
          o.strategy.fsdp.state_dict_type = type == "sharded" ? StateDictType::Sharded : StateDictType::Full;
          o.strategy.fsdp.auto_wrap_policy.module_types = {"Block"};
          o.max_steps = 3;
          torch::manual_seed(4);
          Fp32LossModel first(bo);
          DataLoader la(std::make_shared<RandomDataset>(32), DataLoaderOptions{4, false, false, 0});
          o.enable_checkpointing = true;
          ModelCheckpointOptions mo;  // saved during fit: with the optimizer's state
          mo.dirpath = root + "/ckpt";
          mo.filename = "step3";
          mo.every_n_train_steps = 3;
          Trainer ta(o, {std::make_shared<ModelCheckpoint>(mo)});
          ta.fit(first, la);
          const std::string ckpt = root + "/ckpt/step3.ckpt";
          REQUIRE(fs::exists(ckpt));
          if (adam) CHECK(!CheckpointReader(ckpt).names(kOptimizerSection).empty());
          CHECK(fs::is_directory(ckpt) == (type == "sharded"));
          const auto saved = ta.strategy().model_state_dict(first);

          o.max_steps = 3;  // restore only: the restored weights are the saved ones
          torch::manual_seed(5);
          Fp32LossModel second(bo);
          DataLoader lb(std::make_shared<RandomDataset>(32), DataLoaderOptions{4, false, false, 0});
          Trainer tb(o);
          tb.fit(second, lb, nullptr, ckpt);
          CHECK(tb.global_step() == 3);
          const auto restored = tb.strategy().model_state_dict(second);
          check_same_tensors(saved, restored);
          for (const auto& [n, t] : restored) CHECK(t.scalar_type() == at::kBFloat16);
          consolidate_checkpoint(ckpt, root + "/whole.ckpt");
          CHECK(load_checkpoint_file(root + "/whole.ckpt").state_dict.at("head.weight").scalar_type() == at::kBFloat16);
        }
      }
}
