#pragma once
/// Moved to volt/optim/lr_schedulers/reduce_lr_on_plateau.h (the schedulers need only core/); kept so that existing
/// includes of this path go on compiling.
#include "volt/optim/lr_schedulers/reduce_lr_on_plateau.h"
