#pragma once
/// Precision plugin: Lightning's precision names mapped to dtypes and autocast. Owned by the
/// Strategy. "32-true" fp32; "bf16-mixed" fp32 weights, bf16 autocast in forward; "bf16-true" the
/// whole model in bf16; "16-mixed" fp16 autocast with a gradient scaler (CUDA only).
#include <torch/types.h>

#include <string>

namespace torch::nn {
class Module;
}

namespace volt {

class Precision {
 public:
  /// Throws ConfigError for an unknown name, or one the accelerator cannot run.
  Precision(std::string name, const std::string& accelerator);
  const std::string& name() const { return name_; }
  bool mixed() const { return mixed_; }
  /// The dtype parameters are stored in (fp32, or bf16 for "bf16-true").
  at::ScalarType param_dtype() const { return param_dtype_; }
  /// The dtype forward math runs in (bf16 for both bf16 modes).
  at::ScalarType compute_dtype() const { return compute_dtype_; }
  /// Casts the module for "-true" precisions; no-op otherwise.
  void convert_module(torch::nn::Module& module) const;

  /// RAII: autocast on for the lifetime of the guard when the precision is mixed.
  class ForwardGuard {
   public:
    ForwardGuard(const Precision& p, bool cuda);
    ~ForwardGuard();
    ForwardGuard(const ForwardGuard&) = delete;
    ForwardGuard& operator=(const ForwardGuard&) = delete;

   private:
    bool active_;
    bool cuda_;
    bool prev_;
  };
  ForwardGuard forward_guard(bool cuda) const { return ForwardGuard(*this, cuda); }

  static at::ScalarType dtype_from_name(const std::string& name, const std::string& key);

 private:
  std::string name_;
  bool mixed_ = false;
  at::ScalarType param_dtype_ = at::kFloat;
  at::ScalarType compute_dtype_ = at::kFloat;
};

}  // namespace volt
