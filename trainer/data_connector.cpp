#include "volt/trainer/data_connector.h"

#include <torch/torch.h>

#include "volt/core/errors.h"
#include "volt/trainer/rank_zero.h"

namespace volt {

void DataConnector::prepare(LightningDataModule& data, const std::string& stage) {
  detail::run_on_global_zero(
      strategy_, [&] { data.prepare_data(); }, "the data module's prepare_data()");
  data.setup(stage);
}

void DataConnector::attach(DataLoader& loader, bool pad) { strategy_.setup_dataloader(loader, pad); }

std::optional<Batch> DataConnector::next_batch(BatchStream& stream, const DataLoader& loader) {
  auto scope = profile(strategy_.profiler(), "dataloader_next");
  std::optional<Batch> b = stream.next();
  if (!loader.is_iterable() || strategy_.world_size() < 2) return b;
  const auto all = strategy_.all_reduce(torch::tensor({b ? 1.0 : 0.0}, torch::kDouble), ReduceOp::Min);
  if (all.item<double>() < 1.0) return std::nullopt;
  return b;
}

int64_t count_batches(const BatchLimit& limit, const DataLoader& loader, const std::string& key) {
  const int64_t n = loader.num_batches();
  if (n != DataLoader::kUnknownLength) return limit.apply(n);
  if (!limit.is_fraction) return static_cast<int64_t>(limit.value);
  VOLT_CHECK(limit.value == 1.0, ConfigError, "config key '", key, "': a fraction (", limit.value,
             ") of a loader of unknown length (an iterable dataset without a length) is undefined; give a count of "
             "batches instead");
  return n;
}

std::vector<DataLoader*> loader_ptrs(const DataLoaders& loaders) {
  std::vector<DataLoader*> out;
  for (const auto& l : loaders) {
    VOLT_CHECK(l != nullptr, ConfigError, "a data module returned a null DataLoader");
    out.push_back(l.get());
  }
  return out;
}

}  // namespace volt
