#include "volt/strategies/fsdp/optimizer_in_backward.h"

#include <torch/torch.h>

#include "volt/optim/fused_adam.h"

namespace volt::detail {

BackwardStepper::BackwardStepper(std::shared_ptr<torch::optim::Optimizer> optimizer, BackwardStepperOptions options)
    : optimizer_(std::move(optimizer)), options_(options) {}

BackwardStepper::~BackwardStepper() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void BackwardStepper::run(FlatParam& unit) {
  torch::NoGradGuard ng;
  std::vector<torch::Tensor> params;
  for (auto& s : unit.slices())
    if (s.view.grad().defined()) params.push_back(s.view);
  if (params.empty()) return;
  if (options_.clip_value)
    for (auto& p : params) p.mutable_grad().clamp_(-*options_.clip_value, *options_.clip_value);
  step_parameters(*optimizer_, params);
  // The gradient has done its work: freed now, as PyTorch's optimizer-in-backward frees it, so that
  // a step holds only the gradients of the units not yet stepped (the memory this mode is for).
  unit.release_grads();
}

void BackwardStepper::step(FlatParam& unit, const compat::DeviceMark& ready) {
  if (!options_.host_thread) {
    run(unit);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back({&unit, ready});
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  }
  cv_.notify_all();
}

void BackwardStepper::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopped with nothing left to do
    Job job = queue_.front();
    queue_.pop_front();
    busy_ = true;
    const bool failed = error_ != nullptr;
    lock.unlock();
    std::exception_ptr error;
    if (!failed) {  // after an error the remaining steps are dropped: finish() reports it
      try {
        job.ready.wait();
        run(*job.unit);
      } catch (...) {
        error = std::current_exception();
      }
    }
    lock.lock();
    busy_ = false;
    if (error && !error_) error_ = error;
    cv_.notify_all();
  }
}

void BackwardStepper::finish() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

}  // namespace volt::detail
