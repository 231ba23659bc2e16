#pragma once
namespace volt {
/// Reductions for collectives. Mean is done as Sum then divide where the backend lacks AVG.
enum class ReduceOp { Sum, Mean, Max, Min };
}  // namespace volt
