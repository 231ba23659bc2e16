#pragma once
/// Moved to volt/optim/lr_schedulers/lr_scheduler_base.h (the schedulers need only core/); kept so that existing
/// includes of this path go on compiling.
#include "volt/optim/lr_schedulers/lr_scheduler_base.h"
