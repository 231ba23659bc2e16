#pragma once
/// Moved to volt/optim/lr_scheduler.h (the schedulers need only core/); kept so that existing
/// `#include "volt/module/lr_scheduler.h"` lines go on compiling.
#include "volt/optim/lr_scheduler.h"
