// CheckpointConnector: checkpoint header, save, "last" resolution and restore over the Statefuls.
#include "volt/trainer/checkpoint_connector.h"

#include <c10/util/Type.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <typeinfo>

#include "volt/callbacks/model_checkpoint.h"
#include "volt/checkpoint/async_checkpoint_io.h"
#include "volt/checkpoint/checkpoint_reader.h"
#include "volt/checkpoint/optimizer_hparams.h"
#include "volt/checkpoint/rng_state.h"
#include "volt/checkpoint/tensor_archive.h"
#include "volt/core/errors.h"
#include "volt/core/files.h"

#ifndef VOLT_VERSION
#define VOLT_VERSION "0.0.0"
#endif

namespace volt {

namespace {
constexpr const char* kLoopsKey = "loops";

/// meta[section], or meta[section][name]; undefined when absent. Node copies only: looking up a
/// const node never inserts, and yaml-cpp throws when an undefined node is assigned.
YAML::Node lookup(const YAML::Node& meta, const std::string& section, const std::string& name) {
  const YAML::Node s = meta[section];
  if (!s || name.empty()) return s;
  return s[name];
}

/// The state `c` saved in `meta` (under its state key, else under a key an earlier version used,
/// as "ModelCheckpoint"), and that key; a null node when there is none.
std::pair<YAML::Node, std::string> callback_state(const YAML::Node& meta, const Callback& c) {
  const YAML::Node all = meta["callbacks"];
  if (!all || !all.IsMap()) return {YAML::Node(), ""};
  if (const YAML::Node s = all[c.state_key()]) return {s, c.state_key()};
  for (const std::string& old : c.legacy_state_keys())
    if (const YAML::Node s = all[old]) return {s, old};
  return {YAML::Node(), ""};
}

/// This rank's on_save_checkpoint tensors ("rank<r>.<name>" -> "<name>"); none, with a warning on
/// rank 0, from a checkpoint written by another number of ranks (whose ranks' tensors would not be
/// this rank's).
std::map<std::string, torch::Tensor> rank_extra_tensors(const CheckpointReader& ck, int64_t rank, int64_t world,
                                                        bool global_zero) {
  std::map<std::string, torch::Tensor> out;
  const std::vector<std::string> names = ck.names(kExtraTensorSection);
  if (names.empty()) return out;
  if (ck.world_size() != world) {
    if (global_zero)
      spdlog::warn(
          "Checkpoint {} was written by {} rank(s), this run has {}: the tensors its on_save_checkpoint hooks added "
          "are not restored (on_load_checkpoint gets none)",
          ck.path(), ck.world_size(), world);
    return out;
  }
  const std::string prefix = "rank" + std::to_string(rank) + ".";
  for (const auto& n : names)
    if (n.rfind(prefix, 0) == 0) out[n.substr(prefix.size())] = ck.read(kExtraTensorSection, n);
  return out;
}

/// The loops' state to restore: meta["loops"] with the header's epoch and global_step (Lightning's
/// top-level keys), which are authoritative: every checkpoint has them, with or without the map.
YAML::Node loops_state(const CheckpointReader& ck) {
  const YAML::Node saved = ck.meta()[kLoopsKey];
  YAML::Node state = saved ? YAML::Clone(saved) : YAML::Node(YAML::NodeType::Map);
  state["epoch"] = ck.epoch();
  state["global_step"] = ck.global_step();
  return state;
}
}  // namespace

YAML::Node CheckpointConnector::SchedulerState::state_dict() const {
  // One entry per optimizer in configure_optimizers' order (null: no scheduler), so that several
  // schedulers restore into the right optimizers. One scheduler alone keeps the single-map form.
  const Optimizers& o = optimization_.optimizers();
  auto one = [](const LRScheduler& s) {
    YAML::Node n = s.state_dict();
    n["name"] = s.name();
    return n;
  };
  if (o.size() == 1) return one(*o[0].lr_scheduler);
  YAML::Node list(YAML::NodeType::Sequence);
  for (const auto& c : o.configs) list.push_back(c.lr_scheduler ? one(*c.lr_scheduler) : YAML::Node());
  return list;
}

void CheckpointConnector::SchedulerState::load_state_dict(const YAML::Node& state) {
  const Optimizers& o = optimization_.optimizers();
  const size_t saved = state.IsSequence() ? state.size() : 1;
  VOLT_CHECK(saved == o.size(), CheckpointError, "the checkpoint holds the LR schedulers of ", saved,
             " optimizer(s), configure_optimizers returned ", o.size(),
             ": resume with the same optimizers, or load the weights alone");
  for (size_t i = 0; i < o.size(); ++i) {
    const YAML::Node s = state.IsSequence() ? state[i] : state;
    LRScheduler* sched = o[i].lr_scheduler.get();
    VOLT_CHECK((s && !s.IsNull()) == (sched != nullptr), CheckpointError, "optimizer ", i,
               sched ? " has an LR scheduler the checkpoint did not save"
                     : " has no LR scheduler, but the checkpoint saved one",
               ": resume with the same configure_optimizers, or load the weights alone");
    if (!sched) continue;
    const std::string name = s["name"] ? s["name"].as<std::string>() : sched->name();
    VOLT_CHECK(name == sched->name(), CheckpointError, "optimizer ", i, ": the checkpoint's LR scheduler is ", name,
               ", this run's is ", sched->name(), ": resume with the same scheduler, or load the weights alone");
    sched->load_state_dict(s);
  }
}

YAML::Node CheckpointConnector::OptimizerHparamsState::state_dict() const {
  YAML::Node list(YAML::NodeType::Sequence);
  for (const auto& c : optimization_.optimizers().configs) list.push_back(optimizer_hparams(*c.optimizer));
  return list;
}

void CheckpointConnector::OptimizerHparamsState::load_state_dict(const YAML::Node& state) {
  const Optimizers& o = optimization_.optimizers();
  VOLT_CHECK(state.IsSequence() && state.size() == o.size(), CheckpointError, "the checkpoint holds ",
             state.IsSequence() ? state.size() : 0, " optimizer(s), configure_optimizers returned ", o.size(),
             ": resume with the same optimizers, or load the weights alone");
  for (size_t i = 0; i < o.size(); ++i)
    load_optimizer_hparams(*o[i].optimizer, state[i], detail::str_cat("optimizer ", i));
}

CheckpointConnector::CheckpointConnector(Trainer& trainer, const TrainerOptions& options, Strategy& strategy,
                                         std::vector<std::shared_ptr<Callback>>& callbacks, HookDispatcher& hooks,
                                         FitLoop& fit_loop, Optimization& optimization, const YAML::Node& config)
    : trainer_(trainer),
      options_(options),
      strategy_(strategy),
      callbacks_(callbacks),
      hooks_(hooks),
      fit_loop_(fit_loop),
      optimization_(optimization),
      config_(config),
      scheduler_state_(optimization),
      optimizer_hparams_(optimization) {}

CheckpointConnector::~CheckpointConnector() = default;  // AsyncCheckpointIO's destructor joins its thread

std::vector<CheckpointConnector::Entry> CheckpointConnector::entries() {
  std::vector<Entry> out;
  out.push_back({kLoopsKey, "", &fit_loop_, true});
  bool any_scheduler = false;
  for (const auto& c : optimization_.optimizers().configs) any_scheduler = any_scheduler || c.lr_scheduler;
  if (any_scheduler) out.push_back({"lr_schedulers", "", &scheduler_state_, true});
  // Param-group hyper-parameters (lr, betas, ...) travel with the optimizer state, as PyTorch's.
  if (!optimization_.empty()) out.push_back({"optimizers", "", &optimizer_hparams_, false});
  for (auto& c : callbacks_) out.push_back({"callbacks", c->state_key(), c.get(), false});
  // Without a loss scaler there is nothing to save (and loading is a no-op).
  if (strategy_.precision().grad_scaler()) out.push_back({"grad_scaler", "", &strategy_.precision(), false});
  if (datamodule_)
    out.push_back({"datamodule", "", datamodule_, false});
  else if (kept_datamodule_ && kept_datamodule_->state && !kept_datamodule_->state.IsNull())
    out.push_back({"datamodule", "", &*kept_datamodule_, false});
  return out;
}

void CheckpointConnector::set_datamodule(LightningDataModule* datamodule) {
  datamodule_ = datamodule;
  kept_datamodule_.reset();
}

void CheckpointConnector::release_datamodule() {
  kept_datamodule_.reset();
  if (datamodule_) {
    kept_datamodule_.emplace();
    kept_datamodule_->hparams = YAML::Clone(datamodule_->hparams());
    kept_datamodule_->state = YAML::Clone(datamodule_->state_dict());
  }
  datamodule_ = nullptr;
}

std::string CheckpointConnector::find_last() const {
  for (auto& c : callbacks_)
    if (auto* mc = dynamic_cast<ModelCheckpoint*>(c.get())) {
      const std::string p = mc->last_model_path_on_disk(trainer_);
      if (!p.empty()) return p;
    }
  // validate / test have no checkpoint callback: look where fit's default one writes, as
  // Lightning finds "last" on disk.
  return ModelCheckpoint().last_model_path_on_disk(trainer_);
}

std::string CheckpointConnector::find_best() const {
  // As Lightning: the first ModelCheckpoint (trainer.checkpoint_callback) decides.
  const ModelCheckpoint* first = nullptr;
  int64_t count = 0;
  for (auto& c : callbacks_)
    if (auto* mc = dynamic_cast<ModelCheckpoint*>(c.get())) {
      if (!first) first = mc;
      ++count;
    }
  VOLT_CHECK(first != nullptr, CheckpointError,
             "ckpt_path='best' is set but this Trainer has no ModelCheckpoint (fit adds one unless "
             "trainer.enable_checkpointing is false; validate, test and predict add none): 'best' is the best "
             "checkpoint of a fit this Trainer ran. Give the checkpoint's path instead (e.g. ckpt_path=last or a file "
             "under '",
             options_.default_root_dir, "/checkpoints')");
  VOLT_CHECK(
      !first->best_model_path().empty(), CheckpointError,
      "ckpt_path='best' is set but the ModelCheckpoint has no best checkpoint (best_model_path is empty): "
      "'best' is the best checkpoint of a fit this Trainer ran (as in Lightning), and none was saved yet. "
      "Run fit first with the same Trainer, or give the checkpoint's path (e.g. ckpt_path=last or a file under '",
      options_.default_root_dir, "/checkpoints')");
  if (count > 1 && strategy_.is_global_zero())
    spdlog::warn(
        "ckpt_path='best' with {} ModelCheckpoint callbacks: the first one's best_model_path is used ({}), as "
        "Lightning "
        "does",
        count, first->best_model_path());
  return first->best_model_path();
}

std::string CheckpointConnector::resolve_ckpt_path(const std::string& ckpt_path) const {
  if (ckpt_path == "best") return find_best();
  if (ckpt_path != "last") return ckpt_path;
  const std::string p = find_last();
  if (!p.empty()) return p;
  const std::string partial = options_.default_root_dir + "/checkpoints/last.ckpt.partial";
  VOLT_CHECK(!detail::path_exists(partial), CheckpointError, "ckpt_path='last': only '", partial,
             "' exists, a save that was interrupted before it completed; no complete last.ckpt survives. Resume from "
             "another checkpoint in that folder");
  throw CheckpointError("ckpt_path='last': no last.ckpt found under '" + options_.default_root_dir +
                        "/checkpoints' (is enable_checkpointing on with save_last?)");
}

void CheckpointConnector::restore_callback_states(const YAML::Node& meta, const std::string& path) {
  std::set<std::string> used;
  for (auto& c : callbacks_) {
    const auto [state, key] = callback_state(meta, *c);
    if (!state) continue;
    // A legacy key is taken by one callback only (two ModelCheckpoints of this run cannot both be
    // the old run's one).
    if (key != c->state_key() && used.count(key)) continue;
    used.insert(key);
    c->load_state_dict(state);
  }
  const YAML::Node all = meta["callbacks"];
  if (!all || !all.IsMap() || !strategy_.is_global_zero()) return;
  std::string missing;
  for (const auto& kv : all) {
    const std::string key = kv.first.Scalar();
    const bool empty = !kv.second || kv.second.IsNull() || (kv.second.IsMap() && kv.second.size() == 0);
    if (!empty && !used.count(key)) missing += (missing.empty() ? "" : ", ") + key;
  }
  if (!missing.empty())
    spdlog::warn(
        "Checkpoint {} holds the state of callbacks this fit does not have: {}. Their state is not restored; add "
        "them to trainer.callbacks with the same options (as Lightning asks; a Timer: or set trainer.max_time) for "
        "the fit to go on as the checkpointed one",
        path, missing);
}

void CheckpointConnector::restore(LightningModule& module, const std::string& ckpt_path, bool fitting) {
  auto scope = profile(strategy_.profiler(), "load_checkpoint");
  if (async_) async_->wait();  // a checkpoint still being written (one this fit saved) is whole first
  const std::string path = resolve_ckpt_path(ckpt_path);
  spdlog::info("Restoring states from the checkpoint path at {}", path);
  // Every rank reads for itself (FSDP: only its own ranges); all agree before going on, so a rank
  // that cannot read fails the job instead of leaving the others in a collective.
  std::unique_ptr<CheckpointReader> reader;
  std::string error;
  try {
    reader = std::make_unique<CheckpointReader>(path);
    // Lightning's order: the callbacks' states before the optimizer state, so that a callback that
    // reshapes the optimizers (BaseFinetuning's param groups) has done so when that state loads.
    if (fitting) restore_callback_states(reader->meta(), path);
    strategy_.load_checkpoint(module, optimization_.optimizer_list(), *reader);
  } catch (const std::exception& e) {
    error = e.what();
  }
  detail::agree_or_throw(strategy_, error, "restoring checkpoint '" + path + "'");
  const CheckpointReader& ck = *reader;
  const YAML::Node& meta = ck.meta();
  if (meta["optimizers"]) warn_changed_optimizer_hparams(meta["optimizers"], path);
  // Before the first optimizer step there is no state to save (LearningRateFinder's rewind point).
  if (!optimization_.empty() && ck.names(kOptimizerSection).empty() && ck.global_step() > 0)
    spdlog::warn("Checkpoint {} has no optimizer state (saved with weights_only?): the optimizer starts fresh", path);
  for (const Entry& e : entries()) {
    if (e.section == "callbacks") continue;  // restored first (fitting only)
    YAML::Node state = e.section == kLoopsKey ? loops_state(ck) : lookup(meta, e.section, e.name);
    if (state && e.section == kLoopsKey && !fitting) {
      // validate / test: what fit had left to run is not theirs (a later fit resumes on its own).
      state = YAML::Clone(state);
      state.remove("validation_pending");
      state.remove("scheduler_step_pending");
    }
    if (state) e.state->load_state_dict(state);
  }
  restore_rng(ck);
  CheckpointMeta cm;
  cm.extra = meta["extra"] ? YAML::Clone(meta["extra"]) : YAML::Node(YAML::NodeType::Map);
  cm.tensors = rank_extra_tensors(ck, strategy_.global_rank(), strategy_.world_size(), strategy_.is_global_zero());
  hooks_.on_load_checkpoint(module, cm);
}

void CheckpointConnector::warn_changed_optimizer_hparams(const YAML::Node& saved, const std::string& path) const {
  if (!strategy_.is_global_zero() || !saved.IsSequence()) return;
  const Optimizers& o = optimization_.optimizers();
  std::string changes;
  for (size_t i = 0; i < o.size() && i < saved.size(); ++i) {
    const YAML::Node now = optimizer_hparams(*o[i].optimizer)["param_groups"];
    const YAML::Node then = saved[i]["param_groups"];
    if (!then || !then.IsSequence() || then.size() != now.size()) continue;  // refused when loaded
    for (size_t g = 0; g < now.size(); ++g)
      for (const auto& kv : now[g]) {
        const std::string name = kv.first.as<std::string>();
        // A scheduler moves the lr: the saved one is expected to differ from configure_optimizers'.
        if (name == "lr" && o[i].lr_scheduler) continue;
        const YAML::Node before = then[g][name];
        // Numbers only (lr, weight_decay, momentum, eps...): betas are a list, amsgrad a flag.
        if (!before || !before.IsScalar() || !kv.second.IsScalar()) continue;
        double a = 0, b = 0;
        if (!YAML::convert<double>::decode(before, a) || !YAML::convert<double>::decode(kv.second, b) || a == b)
          continue;
        changes += detail::str_cat(changes.empty() ? "" : "; ", "optimizer ", i, " param group ", g, " ", name, ": ", a,
                                   " (the checkpoint's, used) instead of ", b, " (this run's)");
      }
  }
  if (changes.empty()) return;
  spdlog::warn(
      "Resuming from {}: the checkpoint's optimizer hyper-parameters win over this run's configure_optimizers, as in "
      "Lightning (the optimizer state is restored, lr included): {}. config.yaml and hparams.yaml record this run's "
      "values. To train on with the new ones, set them on trainer.optimizers() in on_train_start, or start from the "
      "weights alone (volt::load_weights)",
      path, changes);
}

void CheckpointConnector::restore_rng(const CheckpointReader& ck) {
  const std::string prefix = "rank" + std::to_string(strategy_.global_rank()) + ".";
  std::map<std::string, torch::Tensor> rng;
  for (const auto& n : ck.names(kRngSection))
    if (n.rfind(prefix, 0) == 0) rng[n.substr(prefix.size())] = ck.read(kRngSection, n);
  if (rng.empty() && !ck.names(kRngSection).empty())
    spdlog::warn("Checkpoint {} has no RNG state for rank {} (saved with {} ranks): its generators are not restored",
                 ck.path(), strategy_.global_rank(), ck.world_size());
  restore_rng_states(rng, strategy_.root_device());
}

void CheckpointConnector::save(LightningModule& module, const std::string& path, bool weights_only) {
  auto scope = profile(strategy_.profiler(), "save_checkpoint");
  CheckpointHeader header;
  header.epoch = fit_loop_.progress().epoch;
  header.global_step = fit_loop_.progress().global_step;
  header.meta["volt_version"] = VOLT_VERSION;
  header.meta["torch_version"] = TORCH_VERSION;
  header.meta["format_version"] = kCheckpointFormatVersion;
  header.meta["state_dict_type"] = strategy_.checkpoint_format();
  header.meta["weights_only"] = weights_only;
  header.meta["precision"] = strategy_.precision().name();
  header.meta["strategy"] = strategy_.name();
  header.meta["world_size"] = strategy_.world_size();
  header.meta["hyper_parameters"] = module.hparams();
  // The C++ class, so that load_from_checkpoint<Model> can refuse another class's checkpoint.
  header.meta["model_class"] = c10::demangle(typeid(module).name());
  if (datamodule_)
    header.meta["datamodule_hyper_parameters"] = datamodule_->hparams();
  else if (kept_datamodule_)
    header.meta["datamodule_hyper_parameters"] = kept_datamodule_->hparams;
  if (config_ && !config_.IsNull()) header.meta["config"] = config_;
  for (const Entry& e : entries()) {
    if (weights_only && !e.with_weights_only) continue;
    if (e.name.empty())
      header.meta[e.section] = e.state->state_dict();
    else
      header.meta[e.section][e.name] = e.state->state_dict();
  }
  if (!weights_only) header.rng_states = capture_rng_states(strategy_.root_device());
  CheckpointMeta cm;
  cm.extra = YAML::Node(YAML::NodeType::Map);
  hooks_.on_save_checkpoint(module, cm);
  header.meta["extra"] = cm.extra;
  // Kept by weights_only saves too, as `extra`: the hooks run for every checkpoint.
  header.extra_tensors = std::move(cm.tensors);
  const OptimizerList optimizers = weights_only ? OptimizerList{} : optimization_.optimizer_list();
  if (!async_) return strategy_.save_checkpoint(module, optimizers, header, path);
  const CheckpointFormat format =
      strategy_.checkpoint_format() == "sharded" ? CheckpointFormat::Sharded : CheckpointFormat::Full;
  async_->save(strategy_.state_layout(module, optimizers), header, path, format, strategy_.state_comm());
}

void CheckpointConnector::begin_async_saves() {
  const auto& p = options_.plugins;
  if (std::find(p.begin(), p.end(), "AsyncCheckpointIO") != p.end() && !async_)
    async_ = std::make_unique<AsyncCheckpointIO>();
}

void CheckpointConnector::wait_for_saves() {
  if (!async_) return;
  const std::unique_ptr<AsyncCheckpointIO> io = std::move(async_);  // synchronous again, even if this throws
  io->wait();
}

void CheckpointConnector::abandon_saves() noexcept {
  if (async_) async_->abandon();
  async_.reset();
}

void CheckpointConnector::remove_checkpoint(const std::string& path) {
  auto remove = [path] {
    // A sharded checkpoint is a folder, deleted file by file: it is first renamed to a name the
    // next run's start removes (".partial"), so that a kill midway never leaves a folder under a
    // checkpoint's name that holds some of its files and not others.
    std::error_code ec;
    if (std::filesystem::is_directory(std::filesystem::symlink_status(path, ec))) {
      const std::string doomed = path + ".removed.partial";
      detail::remove_tree(doomed);
      if (::rename(path.c_str(), doomed.c_str()) == 0) {
        const std::filesystem::path parent = std::filesystem::path(path).parent_path();
        detail::fsync_dir(parent.empty() ? std::string(".") : parent.string());
        detail::remove_tree(doomed);
        return;
      }
    }
    detail::remove_tree(path);
  };
  if (async_)
    async_->after_save(remove);
  else
    remove();
}

}  // namespace volt
