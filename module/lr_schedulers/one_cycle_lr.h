#pragma once
/// Moved to volt/optim/lr_schedulers/one_cycle_lr.h (the schedulers need only core/); kept so that existing
/// includes of this path go on compiling.
#include "volt/optim/lr_schedulers/one_cycle_lr.h"
