#pragma once
/// volt::Hooked<M>: makes any module (a stock torch::nn layer, or one of the user's) a HookedModule
/// without touching its code, so a strategy can act around its forward: an FSDP unit, an
/// activation-checkpointed block.
///
///   layers->push_back(volt::hooked(torch::nn::TransformerEncoderLayer(opts)));
///   ...
///   x = layers[i]->as<volt::HookedImpl<torch::nn::TransformerEncoderLayer>>()->forward(x, mask);
///
/// [Note: the wrapper is transparent]
/// The wrapper adopts the inner module's children, parameters and buffers under their own names
/// instead of registering the inner module as a child, so parameter names are exactly those of the
/// unwrapped module ("layers.0.linear1.weight", not "layers.0.module.linear1.weight"): checkpoints
/// and weights files are the same with or without the wrapper, under any strategy. name() is the
/// inner module's, so auto_wrap_policy / activation_checkpointing_policy select it by the inner
/// type ("TransformerEncoderLayer").
///
/// forward(args...) takes tensors (undefined ones stand for "not given") and forwards them to the
/// inner module's forward, which must return one tensor. Not usable inside torch::nn::Sequential
/// (its AnyModule needs a non-template forward); keep wrapped layers in a ModuleList, as
/// torch::nn::TransformerEncoder does.
///
/// Ownership: shares the inner module (a ModuleHolder) with the caller. Thread-safety: as the inner
/// module's forward, plus HookedModule's rules.
#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/pimpl.h>

#include <type_traits>
#include <utility>

#include "volt/core/hooked_module.h"

namespace volt {

template <class Holder>
class HookedImpl : public HookedModule {
 public:
  explicit HookedImpl(Holder inner) : HookedModule(inner->name()), inner_(std::move(inner)) {
    for (const auto& kv : inner_->named_children()) register_module(kv.key(), kv.value());
    for (const auto& kv : inner_->named_parameters(/*recurse=*/false))
      register_parameter(kv.key(), kv.value(), kv.value().requires_grad());
    for (const auto& kv : inner_->named_buffers(/*recurse=*/false)) register_buffer(kv.key(), kv.value());
  }

  template <class... Tensors>
  torch::Tensor forward(const Tensors&... args) {
    static_assert((std::is_convertible_v<const Tensors&, const torch::Tensor&> && ...),
                  "volt::Hooked forwards tensor arguments only; capture other arguments in a module of yours");
    return intercepted(
        {args...}, [this](const TensorVec& in) { return call(in, std::make_index_sequence<sizeof...(Tensors)>{}); });
  }

  /// The wrapped module.
  Holder& inner() { return inner_; }
  /// An embedding's backward needs the indices and the weight's row count, not its values.
  bool backward_reads_parameters() const override { return !std::is_same_v<Holder, torch::nn::Embedding>; }

  /// The inner module's own training flag follows the wrapper's (its children are shared already).
  void train(bool on = true) override {
    HookedModule::train(on);
    inner_->train(on);
  }

 private:
  template <size_t... I>
  torch::Tensor call(const TensorVec& in, std::index_sequence<I...>) {
    return inner_->forward(in[I]...);
  }
  Holder inner_;
};

/// A ModuleHolder of HookedImpl<Holder>, as TORCH_MODULE makes for a module.
template <class Holder>
using Hooked = torch::nn::ModuleHolder<HookedImpl<Holder>>;

/// Wraps `inner` (any ModuleHolder, e.g. torch::nn::Linear(...)) so strategies can act around it.
template <class Holder>
Hooked<Holder> hooked(Holder inner) {
  return Hooked<Holder>(std::move(inner));
}

}  // namespace volt
