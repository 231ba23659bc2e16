// The LR schedulers live in optim/ (volt/optim/lr_scheduler.h); their former paths under module/
// forward there, so users' includes keep compiling. This file stops building if one of them goes.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <type_traits>

#include "volt/module/lr_scheduler.h"
#include "volt/module/lr_schedulers/basic_lr.h"
#include "volt/module/lr_schedulers/cosine_lr.h"
#include "volt/module/lr_schedulers/lr_scheduler_base.h"
#include "volt/module/lr_schedulers/one_cycle_lr.h"
#include "volt/module/lr_schedulers/reduce_lr_on_plateau.h"
#include "volt/module/lr_schedulers/sequential_lr.h"
#include "volt/optim/lr_scheduler.h"

TEST_CASE("the LR schedulers' former module/ include paths still work", "[module][lr]") {
  static_assert(std::is_base_of_v<volt::LRScheduler, volt::CosineAnnealingLR>);
  torch::nn::Linear layer(2, 2);
  torch::optim::SGD opt(layer->parameters(), torch::optim::SGDOptions(0.1));
  volt::StepLR s(opt, /*step_size=*/1, /*gamma=*/0.5);
  s.step();
  CHECK(s.last_epoch() == 1);
  CHECK(s.current_lrs().at(0) == Approx(0.05));
}
