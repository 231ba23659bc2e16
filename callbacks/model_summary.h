#pragma once
/// Model summary at the start of fit (rank 0): a table of the model's submodules to `max_depth`
/// with their types and parameter counts, totals, and the model's size in MB. Strategies that
/// shard add their own columns via `Strategy::describe_module` (FSDP: unit and bytes per rank).
#include "volt/callbacks/callback.h"
#include "volt/core/errors.h"

namespace torch::nn {
class Module;
}

namespace volt {

/// The constructor's argument as an options struct (for configs: `class_path: ModelSummary`).
struct ModelSummaryOptions {
  int64_t max_depth = 1;

  template <class V>
  void visit(V& v) {
    v("max_depth", max_depth);
  }
  void validate(const std::string& prefix = "ModelSummary") const {
    VOLT_CHECK(max_depth >= 0, ConfigError, "config key '", prefix, ".max_depth': must be >= 0, got ", max_depth);
  }
};

class ModelSummary : public Callback {
 public:
  explicit ModelSummary(int64_t max_depth = 1) : max_depth_(max_depth) {}
  std::string state_key() const override { return "ModelSummary"; }
  void on_fit_start(Trainer&, LightningModule&) override;
  /// The table as text (also used by `volt fit --print_summary`).
  static std::string summarize(const torch::nn::Module& module, int64_t max_depth);

 private:
  int64_t max_depth_;
};

}  // namespace volt
