#pragma once
/// Umbrella header: everything a user of volt needs (LibTorch included).
#include <torch/torch.h>

#include "volt/callbacks/early_stopping.h"
#include "volt/callbacks/lr_monitor.h"
#include "volt/callbacks/model_checkpoint.h"
#include "volt/callbacks/model_summary.h"
#include "volt/callbacks/prediction_writer.h"
#include "volt/callbacks/progress_bar.h"
#include "volt/checkpoint/safetensors.h"
#include "volt/checkpoint/weights.h"
#include "volt/cli/cli.h"
#include "volt/core/errors.h"
#include "volt/core/hooked_module.h"
#include "volt/data/data_module.h"
#include "volt/strategies/ddp.h"
#include "volt/strategies/fsdp/fsdp_strategy.h"
#include "volt/trainer/trainer.h"
