// HookDispatcher: one place that decides in which order the module and the callbacks hear of an
// event (see hook_dispatcher.h for the order and why).
#include "volt/trainer/hook_dispatcher.h"

#include <c10/util/Type.h>

#include <typeinfo>

#include "volt/callbacks/early_stopping.h"
#include "volt/callbacks/model_checkpoint.h"

namespace volt {

namespace {
/// Callbacks that act on monitored metrics, as Lightning's (EarlyStopping, Checkpoint subclasses).
bool monitors_metrics(const Callback& c) {
  return dynamic_cast<const ModelCheckpoint*>(&c) != nullptr || dynamic_cast<const EarlyStopping*>(&c) != nullptr;
}
bool does_not_monitor(const Callback& c) { return !monitors_metrics(c); }
}  // namespace

HookDispatcher::HookDispatcher(Trainer& trainer, std::vector<std::shared_ptr<Callback>>& callbacks)
    : trainer_(trainer), callbacks_(callbacks) {}

namespace {
/// The class name of `x` without its namespaces ("volt::ModelCheckpoint" -> "ModelCheckpoint").
template <class T>
std::string class_name(const T& x) {
  std::string n = c10::demangle(typeid(x).name());
  const auto colon = n.rfind("::", n.find('<'));
  return colon == std::string::npos ? n : n.substr(colon + 2);
}
}  // namespace

template <class F>
void HookDispatcher::callbacks(const char* hook, F&& f, bool (*only)(const Callback&)) {
  for (auto& cb : callbacks_) {
    if (only && !only(*cb)) continue;
    if (!profiler_) {
      f(*cb);
      continue;
    }
    // Lightning's names: "[Callback]ModelCheckpoint.on_train_epoch_end".
    Profiler::Scope scope(profiler_, "[Callback]" + class_name(*cb) + "." + hook);
    f(*cb);
  }
}

template <class F>
void HookDispatcher::module_hook(LightningModule& m, const char* hook, F&& f) {
  if (!profiler_) return f();
  Profiler::Scope scope(profiler_, "[LightningModule]" + class_name(m) + "." + hook);
  f();
}

void HookDispatcher::setup(LightningModule& m, const std::string& stage) {
  callbacks("setup", [&](Callback& c) { c.setup(trainer_, m, stage); });
  module_hook(m, "setup", [&] { m.setup(stage); });
}

void HookDispatcher::teardown(LightningModule& m, const std::string& stage) {
  callbacks("teardown", [&](Callback& c) { c.teardown(trainer_, m, stage); });
  module_hook(m, "teardown", [&] { m.teardown(stage); });
}

void HookDispatcher::on_fit_start(LightningModule& m) {
  callbacks("on_fit_start", [&](Callback& c) { c.on_fit_start(trainer_, m); });
  module_hook(m, "on_fit_start", [&] { m.on_fit_start(); });
}

void HookDispatcher::on_fit_end(LightningModule& m) {
  callbacks("on_fit_end", [&](Callback& c) { c.on_fit_end(trainer_, m); });
  module_hook(m, "on_fit_end", [&] { m.on_fit_end(); });
}

void HookDispatcher::on_train_start(LightningModule& m) {
  callbacks("on_train_start", [&](Callback& c) { c.on_train_start(trainer_, m); });
  module_hook(m, "on_train_start", [&] { m.on_train_start(); });
}

void HookDispatcher::on_train_end(LightningModule& m) {
  callbacks("on_train_end", [&](Callback& c) { c.on_train_end(trainer_, m); });
  module_hook(m, "on_train_end", [&] { m.on_train_end(); });
}

void HookDispatcher::on_train_epoch_start(LightningModule& m) {
  callbacks("on_train_epoch_start", [&](Callback& c) { c.on_train_epoch_start(trainer_, m); });
  module_hook(m, "on_train_epoch_start", [&] { m.on_train_epoch_start(); });
}

void HookDispatcher::on_train_epoch_end(LightningModule& m) {
  // Monitoring callbacks last, so a metric the module logs in on_train_epoch_end can be monitored.
  callbacks(
      "on_train_epoch_end", [&](Callback& c) { c.on_train_epoch_end(trainer_, m); }, &does_not_monitor);
  module_hook(m, "on_train_epoch_end", [&] { m.on_train_epoch_end(); });
  callbacks(
      "on_train_epoch_end", [&](Callback& c) { c.on_train_epoch_end(trainer_, m); }, &monitors_metrics);
}

int HookDispatcher::on_train_batch_start(LightningModule& m, const Batch& batch, int64_t batch_idx) {
  callbacks("on_train_batch_start", [&](Callback& c) { c.on_train_batch_start(trainer_, m, batch, batch_idx); });
  int answer = 0;
  module_hook(m, "on_train_batch_start", [&] { answer = m.on_train_batch_start(batch, batch_idx); });
  return answer;
}

void HookDispatcher::on_train_batch_end(LightningModule& m, const torch::Tensor& loss, const Batch& batch,
                                        int64_t batch_idx) {
  callbacks("on_train_batch_end", [&](Callback& c) { c.on_train_batch_end(trainer_, m, loss, batch, batch_idx); });
  module_hook(m, "on_train_batch_end", [&] { m.on_train_batch_end(loss, batch, batch_idx); });
}

void HookDispatcher::on_before_backward(LightningModule& m, const torch::Tensor& loss) {
  callbacks("on_before_backward", [&](Callback& c) { c.on_before_backward(trainer_, m, loss); });
  module_hook(m, "on_before_backward", [&] { m.on_before_backward(loss); });
}

void HookDispatcher::on_after_backward(LightningModule& m) {
  callbacks("on_after_backward", [&](Callback& c) { c.on_after_backward(trainer_, m); });
  module_hook(m, "on_after_backward", [&] { m.on_after_backward(); });
}

void HookDispatcher::on_before_optimizer_step(LightningModule& m, torch::optim::Optimizer& optimizer) {
  callbacks("on_before_optimizer_step", [&](Callback& c) { c.on_before_optimizer_step(trainer_, m, optimizer); });
  module_hook(m, "on_before_optimizer_step", [&] { m.on_before_optimizer_step(optimizer); });
}

void HookDispatcher::on_before_zero_grad(LightningModule& m, torch::optim::Optimizer& optimizer) {
  callbacks("on_before_zero_grad", [&](Callback& c) { c.on_before_zero_grad(trainer_, m, optimizer); });
  module_hook(m, "on_before_zero_grad", [&] { m.on_before_zero_grad(optimizer); });
}

void HookDispatcher::on_sanity_check_start(LightningModule& m) {
  callbacks("on_sanity_check_start", [&](Callback& c) { c.on_sanity_check_start(trainer_, m); });
}

void HookDispatcher::on_sanity_check_end(LightningModule& m) {
  callbacks("on_sanity_check_end", [&](Callback& c) { c.on_sanity_check_end(trainer_, m); });
}

void HookDispatcher::on_validation_start(LightningModule& m) {
  callbacks("on_validation_start", [&](Callback& c) { c.on_validation_start(trainer_, m); });
  module_hook(m, "on_validation_start", [&] { m.on_validation_start(); });
}

void HookDispatcher::on_validation_epoch_start(LightningModule& m) {
  callbacks("on_validation_epoch_start", [&](Callback& c) { c.on_validation_epoch_start(trainer_, m); });
  module_hook(m, "on_validation_epoch_start", [&] { m.on_validation_epoch_start(); });
}

void HookDispatcher::on_validation_batch_start(LightningModule& m, const Batch& batch, int64_t batch_idx,
                                               int64_t dataloader_idx) {
  callbacks("on_validation_batch_start",
            [&](Callback& c) { c.on_validation_batch_start(trainer_, m, batch, batch_idx); });
  module_hook(m, "on_validation_batch_start", [&] { m.on_validation_batch_start(batch, batch_idx, dataloader_idx); });
}

void HookDispatcher::on_validation_batch_end(LightningModule& m, const Batch& batch, int64_t batch_idx,
                                             int64_t dataloader_idx) {
  callbacks("on_validation_batch_end", [&](Callback& c) { c.on_validation_batch_end(trainer_, m, batch, batch_idx); });
  module_hook(m, "on_validation_batch_end", [&] { m.on_validation_batch_end(batch, batch_idx, dataloader_idx); });
}

void HookDispatcher::on_validation_epoch_end(LightningModule& m) {
  callbacks("on_validation_epoch_end", [&](Callback& c) { c.on_validation_epoch_end(trainer_, m); });
  module_hook(m, "on_validation_epoch_end", [&] { m.on_validation_epoch_end(); });
}

void HookDispatcher::on_validation_end(LightningModule& m) {
  callbacks("on_validation_end", [&](Callback& c) { c.on_validation_end(trainer_, m); });
  module_hook(m, "on_validation_end", [&] { m.on_validation_end(); });
}

void HookDispatcher::on_test_start(LightningModule& m) {
  callbacks("on_test_start", [&](Callback& c) { c.on_test_start(trainer_, m); });
  module_hook(m, "on_test_start", [&] { m.on_test_start(); });
}

void HookDispatcher::on_test_epoch_start(LightningModule& m) {
  callbacks("on_test_epoch_start", [&](Callback& c) { c.on_test_epoch_start(trainer_, m); });
  module_hook(m, "on_test_epoch_start", [&] { m.on_test_epoch_start(); });
}

void HookDispatcher::on_test_batch_start(LightningModule& m, const Batch& batch, int64_t batch_idx,
                                         int64_t dataloader_idx) {
  callbacks("on_test_batch_start", [&](Callback& c) { c.on_test_batch_start(trainer_, m, batch, batch_idx); });
  module_hook(m, "on_test_batch_start", [&] { m.on_test_batch_start(batch, batch_idx, dataloader_idx); });
}

void HookDispatcher::on_test_batch_end(LightningModule& m, const Batch& batch, int64_t batch_idx,
                                       int64_t dataloader_idx) {
  callbacks("on_test_batch_end", [&](Callback& c) { c.on_test_batch_end(trainer_, m, batch, batch_idx); });
  module_hook(m, "on_test_batch_end", [&] { m.on_test_batch_end(batch, batch_idx, dataloader_idx); });
}

void HookDispatcher::on_test_epoch_end(LightningModule& m) {
  callbacks("on_test_epoch_end", [&](Callback& c) { c.on_test_epoch_end(trainer_, m); });
  module_hook(m, "on_test_epoch_end", [&] { m.on_test_epoch_end(); });
}

void HookDispatcher::on_test_end(LightningModule& m) {
  callbacks("on_test_end", [&](Callback& c) { c.on_test_end(trainer_, m); });
  module_hook(m, "on_test_end", [&] { m.on_test_end(); });
}

void HookDispatcher::on_predict_start(LightningModule& m) {
  callbacks("on_predict_start", [&](Callback& c) { c.on_predict_start(trainer_, m); });
  module_hook(m, "on_predict_start", [&] { m.on_predict_start(); });
}

void HookDispatcher::on_predict_epoch_start(LightningModule& m) {
  callbacks("on_predict_epoch_start", [&](Callback& c) { c.on_predict_epoch_start(trainer_, m); });
  module_hook(m, "on_predict_epoch_start", [&] { m.on_predict_epoch_start(); });
}

void HookDispatcher::on_predict_batch_start(LightningModule& m, const Batch& batch, int64_t batch_idx,
                                            int64_t dataloader_idx) {
  callbacks("on_predict_batch_start", [&](Callback& c) { c.on_predict_batch_start(trainer_, m, batch, batch_idx); });
  module_hook(m, "on_predict_batch_start", [&] { m.on_predict_batch_start(batch, batch_idx, dataloader_idx); });
}

void HookDispatcher::on_predict_batch_end(LightningModule& m, const Batch& outputs, const Batch& batch,
                                          const std::vector<int64_t>& sample_indices, int64_t batch_idx,
                                          int64_t dataloader_idx) {
  callbacks("on_predict_batch_end", [&](Callback& c) {
    c.on_predict_batch_end(trainer_, m, outputs, batch, sample_indices, batch_idx, dataloader_idx);
  });
  module_hook(m, "on_predict_batch_end", [&] { m.on_predict_batch_end(outputs, batch, batch_idx, dataloader_idx); });
}

void HookDispatcher::on_predict_epoch_end(LightningModule& m) {
  callbacks("on_predict_epoch_end", [&](Callback& c) { c.on_predict_epoch_end(trainer_, m); });
  module_hook(m, "on_predict_epoch_end", [&] { m.on_predict_epoch_end(); });
}

void HookDispatcher::on_predict_end(LightningModule& m) {
  callbacks("on_predict_end", [&](Callback& c) { c.on_predict_end(trainer_, m); });
  module_hook(m, "on_predict_end", [&] { m.on_predict_end(); });
}

void HookDispatcher::on_save_checkpoint(LightningModule& m, CheckpointMeta& checkpoint) {
  callbacks("on_save_checkpoint", [&](Callback& c) { c.on_save_checkpoint(trainer_, m, checkpoint); });
  module_hook(m, "on_save_checkpoint", [&] { m.on_save_checkpoint(checkpoint); });
}

void HookDispatcher::on_load_checkpoint(LightningModule& m, const CheckpointMeta& checkpoint) {
  // Lightning restores the module before the callbacks.
  module_hook(m, "on_load_checkpoint", [&] { m.on_load_checkpoint(checkpoint); });
  callbacks("on_load_checkpoint", [&](Callback& c) { c.on_load_checkpoint(trainer_, m, checkpoint); });
}

void HookDispatcher::on_exception(LightningModule& m, const std::exception& e) {
  callbacks("on_exception", [&](Callback& c) { c.on_exception(trainer_, m, e); });
}

}  // namespace volt
