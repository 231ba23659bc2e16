#pragma once
/// volt's learning-rate schedulers: torch.optim.lr_scheduler's, with PyTorch's (1.13) arguments,
/// defaults and values. Include this header for all of them.
///
/// | scheduler                    | arguments (defaults)                                                   |
/// | ---------------------------- | ---------------------------------------------------------------------- |
/// | StepLR                       | step_size, gamma (0.1)                                                 |
/// | MultiStepLR                  | milestones, gamma (0.1)                                                |
/// | ExponentialLR                | gamma                                                                  |
/// | LinearLR                     | start_factor (1/3), end_factor (1.0), total_iters (5)                  |
/// | LambdaLR                     | lr_lambda (one, or one per param group)                                |
/// | CosineAnnealingLR            | T_max, eta_min (0)                                                     |
/// | CosineAnnealingWarmRestarts  | T_0, T_mult (1), eta_min (0)                                           |
/// | OneCycleLR                   | OneCycleLROptions (max_lr, total_steps or epochs * steps_per_epoch, ...) |
/// | SequentialLR                 | schedulers, milestones                                                 |
/// | ReduceLROnPlateau            | ReduceLROnPlateauOptions (mode, factor, patience, ...); step(metric)   |
///
/// Every scheduler is an LRScheduler (lr_schedulers/lr_scheduler_base.h): step(), step(metric),
/// needs_metric(), state_dict() / load_state_dict(), current_lrs(), last_epoch().
#include "volt/optim/lr_schedulers/basic_lr.h"
#include "volt/optim/lr_schedulers/cosine_lr.h"
#include "volt/optim/lr_schedulers/lr_scheduler_base.h"
#include "volt/optim/lr_schedulers/one_cycle_lr.h"
#include "volt/optim/lr_schedulers/reduce_lr_on_plateau.h"
#include "volt/optim/lr_schedulers/sequential_lr.h"
