#include "volt/module/lightning_module.h"

#include "volt/core/errors.h"

namespace volt {

void LightningModule::validation_step(const Batch&, int64_t) { throw detail::HookNotImplemented("validation_step"); }
void LightningModule::test_step(const Batch&, int64_t) { throw detail::HookNotImplemented("test_step"); }

void LightningModule::log(const std::string& name, const torch::Tensor& value, LogOptions options) {
  VOLT_CHECK(log_sink_ != nullptr, ConfigError, "log('", name, "') called outside fit/validate/test");
  log_sink_->log_metric(name, value, options);
}

void LightningModule::log(const std::string& name, double value, LogOptions options) {
  log(name, torch::tensor(value, torch::kDouble), options);
}

}  // namespace volt
