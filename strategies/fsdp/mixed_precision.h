#pragma once
/// The dtypes FSDP gathers parameters in, reduces gradients in and keeps buffers in, resolved once
/// from FSDPOptions and the Trainer's precision (PyTorch FSDP2's MixedPrecisionPolicy).
///
/// [Note: why bf16-mixed gathers in bf16] Unless param_dtype is given, a mixed precision's compute
/// dtype is the param dtype: parameters are gathered and used in bf16 (fp16 under 16-mixed), while
/// the fp32 shards stay the optimizer's master weights. Lightning's FSDP gathers fp32 and lets
/// autocast cast op by op, which costs twice the gather traffic and gathered memory for the same
/// arithmetic; param_dtype: float32 gives that behaviour back (docs/fsdp.md, "Mixed precision").
#include <torch/types.h>

#include <optional>
#include <string>

#include "volt/strategies/precision.h"
#include "volt/strategies/strategy_options.h"

namespace volt::detail {

struct FSDPDtypes {
  at::ScalarType param = at::kFloat;     // the gathered parameters
  at::ScalarType reduce = at::kFloat;    // gradients while they are reduced
  std::optional<at::ScalarType> buffer;  // the module's buffers are cast to it at set-up
};

/// param_dtype, reduce_dtype and buffer_dtype as `options` give them, else: the compute dtype of a
/// 16-bit mixed `precision` (fp32 otherwise) for parameters, the param dtype for reductions, and
/// buffers left alone. Throws ConfigError naming the key for an unknown dtype, and for float16
/// parameters on the CPU where this LibTorch has no float16 matmul.
FSDPDtypes resolve_dtypes(const FSDPOptions& options, const Precision& precision, const std::string& accelerator);

}  // namespace volt::detail
