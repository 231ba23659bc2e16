#include "volt/callbacks/lambda_callback.h"

namespace volt {

void LambdaCallback::setup(Trainer& trainer, LightningModule& module, const std::string& stage) {
  if (hooks_.setup) hooks_.setup(trainer, module, stage);
}

void LambdaCallback::teardown(Trainer& trainer, LightningModule& module, const std::string& stage) {
  if (hooks_.teardown) hooks_.teardown(trainer, module, stage);
}

void LambdaCallback::on_fit_start(Trainer& trainer, LightningModule& module) {
  if (hooks_.on_fit_start) hooks_.on_fit_start(trainer, module);
}

void LambdaCallback::on_fit_end(Trainer& trainer, LightningModule& module) {
  if (hooks_.on_fit_end) hooks_.on_fit_end(trainer, module);
}

void LambdaCallback::on_train_start(Trainer& trainer, LightningModule& module) {
  if (hooks_.on_train_start) hooks_.on_train_start(trainer, module);
}

void LambdaCallback::on_train_end(Trainer& trainer, LightningModule& module) {
  if (hooks_.on_train_end) hooks_.on_train_end(trainer, module);
}

void LambdaCallback::on_train_epoch_start(Trainer& trainer, LightningModule& module) {
  if (hooks_.on_train_epoch_start) hooks_.on_train_epoch_start(trainer, module);
}

void LambdaCallback::on_train_epoch_end(Trainer& trainer, LightningModule& module) {
  if (hooks_.on_train_epoch_end) hooks_.on_train_epoch_end(trainer, module);
}

void LambdaCallback::on_train_batch_start(Trainer& trainer, LightningModule& module, const Batch& batch,
                                          int64_t batch_idx) {
  if (hooks_.on_train_batch_start) hooks_.on_train_batch_start(trainer, module, batch, batch_idx);
}

void LambdaCallback::on_train_batch_end(Trainer& trainer, LightningModule& module, const torch::Tensor& loss,
                                        const Batch& batch, int64_t batch_idx) {
  if (hooks_.on_train_batch_end) hooks_.on_train_batch_end(trainer, module, loss, batch, batch_idx);
}

void LambdaCallback::on_sanity_check_start(Trainer& trainer, LightningModule& module) {
  if (hooks_.on_sanity_check_start) hooks_.on_sanity_check_start(trainer, module);
}

void LambdaCallback::on_sanity_check_end(Trainer& trainer, LightningModule& module) {
  if (hooks_.on_sanity_check_end) hooks_.on_sanity_check_end(trainer, module);
}

void LambdaCallback::on_validation_start(Trainer& trainer, LightningModule& module) {
  if (hooks_.on_validation_start) hooks_.on_validation_start(trainer, module);
}

void LambdaCallback::on_validation_end(Trainer& trainer, LightningModule& module) {
  if (hooks_.on_validation_end) hooks_.on_validation_end(trainer, module);
}

void LambdaCallback::on_validation_epoch_start(Trainer& trainer, LightningModule& module) {
  if (hooks_.on_validation_epoch_start) hooks_.on_validation_epoch_start(trainer, module);
}

void LambdaCallback::on_validation_epoch_end(Trainer& trainer, LightningModule& module) {
  if (hooks_.on_validation_epoch_end) hooks_.on_validation_epoch_end(trainer, module);
}

void LambdaCallback::on_validation_batch_start(Trainer& trainer, LightningModule& module, const Batch& batch,
                                               int64_t batch_idx) {
  if (hooks_.on_validation_batch_start) hooks_.on_validation_batch_start(trainer, module, batch, batch_idx);
}

void LambdaCallback::on_validation_batch_end(Trainer& trainer, LightningModule& module, const Batch& batch,
                                             int64_t batch_idx) {
  if (hooks_.on_validation_batch_end) hooks_.on_validation_batch_end(trainer, module, batch, batch_idx);
}

void LambdaCallback::on_test_start(Trainer& trainer, LightningModule& module) {
  if (hooks_.on_test_start) hooks_.on_test_start(trainer, module);
}

void LambdaCallback::on_test_end(Trainer& trainer, LightningModule& module) {
  if (hooks_.on_test_end) hooks_.on_test_end(trainer, module);
}

void LambdaCallback::on_test_epoch_start(Trainer& trainer, LightningModule& module) {
  if (hooks_.on_test_epoch_start) hooks_.on_test_epoch_start(trainer, module);
}

void LambdaCallback::on_test_batch_start(Trainer& trainer, LightningModule& module, const Batch& batch,
                                         int64_t batch_idx) {
  if (hooks_.on_test_batch_start) hooks_.on_test_batch_start(trainer, module, batch, batch_idx);
}

void LambdaCallback::on_test_batch_end(Trainer& trainer, LightningModule& module, const Batch& batch,
                                       int64_t batch_idx) {
  if (hooks_.on_test_batch_end) hooks_.on_test_batch_end(trainer, module, batch, batch_idx);
}

void LambdaCallback::on_test_epoch_end(Trainer& trainer, LightningModule& module) {
  if (hooks_.on_test_epoch_end) hooks_.on_test_epoch_end(trainer, module);
}

void LambdaCallback::on_predict_start(Trainer& trainer, LightningModule& module) {
  if (hooks_.on_predict_start) hooks_.on_predict_start(trainer, module);
}

void LambdaCallback::on_predict_epoch_start(Trainer& trainer, LightningModule& module) {
  if (hooks_.on_predict_epoch_start) hooks_.on_predict_epoch_start(trainer, module);
}

void LambdaCallback::on_predict_batch_start(Trainer& trainer, LightningModule& module, const Batch& batch,
                                            int64_t batch_idx) {
  if (hooks_.on_predict_batch_start) hooks_.on_predict_batch_start(trainer, module, batch, batch_idx);
}

void LambdaCallback::on_predict_batch_end(Trainer& trainer, LightningModule& module, const Batch& outputs,
                                          const Batch& batch, const std::vector<int64_t>& sample_indices,
                                          int64_t batch_idx, int64_t dataloader_idx) {
  if (hooks_.on_predict_batch_end)
    hooks_.on_predict_batch_end(trainer, module, outputs, batch, sample_indices, batch_idx, dataloader_idx);
}

void LambdaCallback::on_predict_epoch_end(Trainer& trainer, LightningModule& module) {
  if (hooks_.on_predict_epoch_end) hooks_.on_predict_epoch_end(trainer, module);
}

void LambdaCallback::on_predict_end(Trainer& trainer, LightningModule& module) {
  if (hooks_.on_predict_end) hooks_.on_predict_end(trainer, module);
}

void LambdaCallback::on_before_backward(Trainer& trainer, LightningModule& module, const torch::Tensor& loss) {
  if (hooks_.on_before_backward) hooks_.on_before_backward(trainer, module, loss);
}

void LambdaCallback::on_after_backward(Trainer& trainer, LightningModule& module) {
  if (hooks_.on_after_backward) hooks_.on_after_backward(trainer, module);
}

void LambdaCallback::on_before_optimizer_step(Trainer& trainer, LightningModule& module,
                                              torch::optim::Optimizer& optimizer) {
  if (hooks_.on_before_optimizer_step) hooks_.on_before_optimizer_step(trainer, module, optimizer);
}

void LambdaCallback::on_before_zero_grad(Trainer& trainer, LightningModule& module,
                                         torch::optim::Optimizer& optimizer) {
  if (hooks_.on_before_zero_grad) hooks_.on_before_zero_grad(trainer, module, optimizer);
}

void LambdaCallback::on_save_checkpoint(Trainer& trainer, LightningModule& module, CheckpointMeta& checkpoint) {
  if (hooks_.on_save_checkpoint) hooks_.on_save_checkpoint(trainer, module, checkpoint);
}

void LambdaCallback::on_load_checkpoint(Trainer& trainer, LightningModule& module, const CheckpointMeta& checkpoint) {
  if (hooks_.on_load_checkpoint) hooks_.on_load_checkpoint(trainer, module, checkpoint);
}

void LambdaCallback::on_exception(Trainer& trainer, LightningModule& module, const std::exception& error) {
  if (hooks_.on_exception) hooks_.on_exception(trainer, module, error);
}

}  // namespace volt
