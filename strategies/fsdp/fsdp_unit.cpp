#include "volt/strategies/fsdp/fsdp_unit.h"

namespace volt::detail {

FSDPUnit::FSDPUnit(std::string name_, torch::nn::Module* module_, std::unique_ptr<FlatParam> flat_)
    : name(std::move(name_)), module(module_), flat(std::move(flat_)) {
  for (auto& e : flat->entries()) {
    if (e.param.requires_grad())
      ++grads_expected;
    else
      has_frozen = true;
  }
}

void FSDPUnit::begin_backward() {
  grads_pending = grads_expected;
  if (state == TrainingState::PostBackward) state = TrainingState::Idle;
}

bool FSDPUnit::grad_ready() { return --grads_pending == 0; }

}  // namespace volt::detail
