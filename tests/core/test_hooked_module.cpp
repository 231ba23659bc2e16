#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "boring_model.h"
#include "volt/core/hooked_module.h"

using namespace volt;

namespace {

/// y = 2 * x + b: a body that depends on `this` (b) and on its input only through `in`.
class Doubler : public HookedModule {
 public:
  Doubler() : HookedModule("Doubler") { b = register_parameter("b", torch::ones({3})); }
  torch::Tensor forward(const torch::Tensor& x) {
    return intercepted({x}, [this](const TensorVec& in) {
      ++body_calls;
      return in[0] * 2 + b;
    });
  }
  torch::Tensor b;
  int body_calls = 0;
};

/// Records "<name>:before" / "<name>:after" around `next` into a shared log.
class Recorder : public ForwardInterceptor {
 public:
  Recorder(std::string n, std::shared_ptr<std::vector<std::string>> log) : name_(std::move(n)), log_(std::move(log)) {}
  torch::Tensor around(torch::nn::Module&, const TensorVec& inputs, const ForwardFn& next) override {
    log_->push_back(name_ + ":before");
    auto y = next(inputs);
    log_->push_back(name_ + ":after");
    return y;
  }
  const char* name() const override { return name_.c_str(); }

 private:
  std::string name_;
  std::shared_ptr<std::vector<std::string>> log_;
};

/// Replaces the input by input + delta.
class AddToInput : public ForwardInterceptor {
 public:
  explicit AddToInput(double d) : delta(d) {}
  torch::Tensor around(torch::nn::Module&, const TensorVec& inputs, const ForwardFn& next) override {
    return next({inputs[0] + delta});
  }
  const char* name() const override { return "add"; }
  double delta;
};

/// Keeps a copy of `next` and of its inputs for a call after the forward returned (as activation
/// checkpointing does in backward).
class Deferrer : public ForwardInterceptor {
 public:
  explicit Deferrer(std::string n = "defer") : name_(std::move(n)) {}
  torch::Tensor around(torch::nn::Module& m, const TensorVec& inputs, const ForwardFn& next) override {
    saved_next = next;  // a copy
    saved_inputs = inputs;
    module = &m;
    return next(inputs);
  }
  const char* name() const override { return name_.c_str(); }
  ForwardFn saved_next;
  TensorVec saved_inputs;
  torch::nn::Module* module = nullptr;

 private:
  std::string name_;
};

}  // namespace

TEST_CASE("HookedModule without interceptors calls the body directly", "[hooked_module]") {
  Doubler m;
  auto x = torch::arange(3, torch::kFloat);
  auto y = m.forward(x);
  CHECK(torch::equal(y, x * 2 + 1));
  CHECK(m.body_calls == 1);
  CHECK(m.num_interceptors() == 0);
  CHECK(is_hooked(m));
  torch::nn::Linear lin(2, 2);
  CHECK_FALSE(is_hooked(*lin));
  CHECK(is_hooked(volt::testing::Block(2, 2)));
}

TEST_CASE("interceptors run outermost-first by priority", "[hooked_module]") {
  auto log = std::make_shared<std::vector<std::string>>();
  Doubler m;
  // Added out of order: lower priority is outer.
  m.add_interceptor(std::make_shared<Recorder>("ckpt", log), 10);
  m.add_interceptor(std::make_shared<Recorder>("fsdp", log), 0);
  m.add_interceptor(std::make_shared<Recorder>("mid", log), 5);
  // Equal priority: the one added first stays outer.
  m.add_interceptor(std::make_shared<Recorder>("mid2", log), 5);
  CHECK(m.num_interceptors() == 4);

  auto x = torch::ones({3});
  auto y = m.forward(x);
  CHECK(torch::equal(y, x * 2 + 1));
  CHECK(m.body_calls == 1);
  const std::vector<std::string> expected = {"fsdp:before", "mid:before", "mid2:before", "ckpt:before",
                                             "ckpt:after",  "mid2:after", "mid:after",   "fsdp:after"};
  CHECK(*log == expected);
}

TEST_CASE("interceptors can replace inputs, in chain order", "[hooked_module]") {
  Doubler m;
  auto x = torch::zeros({3});
  m.add_interceptor(std::make_shared<AddToInput>(1.0), 0);
  CHECK(torch::allclose(m.forward(x), torch::full({3}, 2.0 * 1 + 1)));
  m.add_interceptor(std::make_shared<AddToInput>(10.0), 1);
  // (0 + 1 + 10) * 2 + 1
  CHECK(torch::allclose(m.forward(x), torch::full({3}, 23.0)));
}

TEST_CASE("interceptors keep gradients flowing", "[hooked_module]") {
  Doubler plain, hooked;
  hooked.add_interceptor(std::make_shared<Recorder>("r", std::make_shared<std::vector<std::string>>()), 0);
  auto x1 = torch::arange(3, torch::kFloat).requires_grad_(true);
  auto x2 = torch::arange(3, torch::kFloat).requires_grad_(true);
  plain.forward(x1).pow(2).sum().backward();
  hooked.forward(x2).pow(2).sum().backward();
  REQUIRE(x2.grad().defined());
  CHECK(torch::equal(x1.grad(), x2.grad()));
  CHECK(torch::equal(plain.b.grad(), hooked.b.grad()));
}

TEST_CASE("`next` stays callable after the forward returned", "[hooked_module]") {
  Doubler m;
  auto outer = std::make_shared<Deferrer>("outer");
  auto inner = std::make_shared<Deferrer>("inner");
  auto log = std::make_shared<std::vector<std::string>>();
  m.add_interceptor(outer, 0);
  m.add_interceptor(std::make_shared<Recorder>("rec", log), 5);
  m.add_interceptor(inner, 10);

  auto x = torch::randn({3});
  torch::Tensor y;
  {
    // Run the forward in a scope so every temporary of the call is gone.
    auto tmp = x.clone();
    y = m.forward(tmp);
  }
  REQUIRE(outer->saved_next);
  REQUIRE(inner->saved_next);
  CHECK(outer->module == &m);
  CHECK(m.body_calls == 1);
  log->clear();

  // Deferred calls give the same result and run the rest of the chain again.
  auto y_outer = outer->saved_next(outer->saved_inputs);
  CHECK(torch::equal(y_outer, y));
  CHECK(m.body_calls == 2);
  CHECK(*log == std::vector<std::string>{"rec:before", "rec:after"});

  auto y_inner = inner->saved_next(inner->saved_inputs);
  CHECK(torch::equal(y_inner, y));
  CHECK(m.body_calls == 3);
  CHECK(log->size() == 2);  // the inner `next` is only the body

  // With other inputs, the deferred chain computes on them.
  auto z = outer->saved_next({torch::zeros({3})});
  CHECK(torch::equal(z, torch::ones({3})));

  // A deferred call can build a graph (activation checkpointing recomputes in backward).
  auto xi = torch::randn({3}).requires_grad_(true);
  inner->saved_next({xi}).sum().backward();
  REQUIRE(xi.grad().defined());
  CHECK(torch::allclose(xi.grad(), torch::full({3}, 2.0)));
}

TEST_CASE("remove_interceptors removes by name", "[hooked_module]") {
  auto log = std::make_shared<std::vector<std::string>>();
  Doubler m;
  m.add_interceptor(std::make_shared<Recorder>("fsdp", log), 0);
  m.add_interceptor(std::make_shared<Recorder>("activation_checkpoint", log), 10);
  m.add_interceptor(std::make_shared<Recorder>("fsdp", log), 1);
  CHECK(m.has_interceptor("fsdp"));
  CHECK(m.has_interceptor("activation_checkpoint"));
  CHECK_FALSE(m.has_interceptor("other"));

  CHECK(m.remove_interceptors("other") == 0);
  CHECK(m.num_interceptors() == 3);
  CHECK(m.remove_interceptors("fsdp") == 2);
  CHECK(m.num_interceptors() == 1);
  CHECK_FALSE(m.has_interceptor("fsdp"));

  m.forward(torch::ones({3}));
  CHECK(*log == std::vector<std::string>{"activation_checkpoint:before", "activation_checkpoint:after"});

  CHECK(m.remove_interceptors("activation_checkpoint") == 1);
  CHECK(m.num_interceptors() == 0);
  log->clear();
  auto y = m.forward(torch::ones({3}));
  CHECK(log->empty());
  CHECK(torch::equal(y, torch::full({3}, 3.0)));
}
