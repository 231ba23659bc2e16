#include "volt/module/lightning_module.h"

#include "volt/core/errors.h"

namespace volt {

void LightningModule::validation_step(const Batch&, int64_t) { throw detail::HookNotImplemented("validation_step"); }
void LightningModule::test_step(const Batch&, int64_t) { throw detail::HookNotImplemented("test_step"); }
Batch LightningModule::predict_step(const Batch&, int64_t) { throw detail::HookNotImplemented("predict_step"); }

void LightningModule::validation_step(const Batch& batch, int64_t batch_idx, int64_t) {
  validation_step(batch, batch_idx);
}
void LightningModule::test_step(const Batch& batch, int64_t batch_idx, int64_t) { test_step(batch, batch_idx); }
Batch LightningModule::predict_step(const Batch& batch, int64_t batch_idx, int64_t) {
  return predict_step(batch, batch_idx);
}

void LightningModule::log(const std::string& name, const torch::Tensor& value, LogOptions options) {
  VOLT_CHECK(log_sink_ != nullptr, ConfigError, "log('", name, "') called outside fit/validate/test");
  log_sink_->log_metric(name, value, options);
}

void LightningModule::log(const std::string& name, double value, LogOptions options) {
  log(name, torch::tensor(value, torch::kDouble), options);
}

}  // namespace volt
