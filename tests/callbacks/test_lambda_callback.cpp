// LambdaCallback: each function runs at its hook, with the hook's arguments.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "boring_model.h"
#include "volt/callbacks/lambda_callback.h"
#include "volt/core/errors.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;

TEST_CASE("LambdaCallback calls the functions it was given at their hooks", "[callbacks][lambda_callback]") {
  torch::manual_seed(0);
  BoringModel model;
  DataLoader train(std::make_shared<RandomDataset>(12), DataLoaderOptions{4, false, false, 0});  // 3 batches
  DataLoader val(std::make_shared<RandomDataset>(8), DataLoaderOptions{4, false, false, 0});
  auto o = quiet_options(temp_dir("lambda-callback"));
  o.max_epochs = 2;
  std::vector<std::string> calls;
  std::vector<int64_t> epoch_ends, batch_ends;
  double last_loss = -1;
  int val_batches = 0, optimizer_steps = 0;
  LambdaCallback::Hooks h;
  h.setup = [&](Trainer&, LightningModule&, const std::string& stage) { calls.push_back("setup:" + stage); };
  h.on_fit_start = [&](Trainer&, LightningModule& m) {
    CHECK(&m == &model);
    calls.push_back("on_fit_start");
  };
  h.on_train_epoch_end = [&](Trainer& t, LightningModule&) { epoch_ends.push_back(t.current_epoch()); };
  h.on_train_batch_end = [&](Trainer&, LightningModule&, const torch::Tensor& loss, const Batch& b, int64_t i) {
    CHECK(b[0].size(0) == 4);
    batch_ends.push_back(i);
    last_loss = loss.item<double>();
  };
  h.on_validation_batch_end = [&](Trainer&, LightningModule&, const Batch&, int64_t) { ++val_batches; };
  h.on_before_optimizer_step = [&](Trainer&, LightningModule&, torch::optim::Optimizer&) { ++optimizer_steps; };
  h.teardown = [&](Trainer&, LightningModule&, const std::string& stage) { calls.push_back("teardown:" + stage); };
  Trainer trainer(o, {std::make_shared<LambdaCallback>(h)});
  trainer.fit(model, train, &val);
  CHECK(calls == std::vector<std::string>{"setup:fit", "on_fit_start", "teardown:fit"});
  CHECK(epoch_ends == std::vector<int64_t>{0, 1});
  CHECK(batch_ends == std::vector<int64_t>{0, 1, 2, 0, 1, 2});
  CHECK(last_loss == model.losses.back());
  CHECK(val_batches == 4);
  CHECK(optimizer_steps == 6);
}

TEST_CASE("LambdaCallback: on_exception gets the error, empty hooks do nothing", "[callbacks][lambda_callback]") {
  BoringModel model;
  DataLoader train(std::make_shared<RandomDataset>(8), DataLoaderOptions{4, false, false, 0});
  std::string seen;
  LambdaCallback::Hooks h;
  h.on_train_batch_start = [](Trainer& t, LightningModule&, const Batch&, int64_t) {
    if (t.global_step() == 1) throw DataError("bad batch");
  };
  h.on_exception = [&](Trainer&, LightningModule&, const std::exception& e) { seen = e.what(); };
  auto cb = std::make_shared<LambdaCallback>(h, "mine");
  CHECK(cb->state_key() == "mine");
  Trainer trainer(quiet_options(temp_dir("lambda-callback-exception")), {cb});
  CHECK_THROWS_AS(trainer.fit(model, train), DataError);
  CHECK(seen == "bad batch");
}
