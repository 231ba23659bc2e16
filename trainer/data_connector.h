#pragma once
/// DataConnector: where a call's loaders come from and how they are read (Lightning's data
/// connector). It runs a LightningDataModule's prepare_data (global rank 0, the others waiting at a
/// barrier) and setup(stage), takes the stage's loaders from it, and hands every loader to the
/// strategy (distributed sampling) before the loops read them.
///
/// [Note: uneven iterable shards] A map-style loader gives every rank the same number of batches
/// (DistributedSampler's padding). An iterable dataset's shards may differ in length, and a rank
/// that ran out while another stepped would leave that one in a collective: under several ranks,
/// next_batch() agrees on every batch (one all-reduce of a flag) and the epoch ends on every rank
/// when the first shard runs out (the longer shards' tails are dropped, as drop_last drops a
/// partial batch).
///
/// Ownership: borrows the Strategy. Thread-safety: the training thread only.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "volt/data/data_module.h"
#include "volt/module/data.h"
#include "volt/strategies/strategy.h"

namespace volt {

class DataConnector {
 public:
  explicit DataConnector(Strategy& strategy) : strategy_(strategy) {}

  /// prepare_data on global rank 0 (the others wait), then setup(stage) on every rank. Collective.
  void prepare(LightningDataModule& data, const std::string& stage);
  /// Hands `loader` to the strategy (rank's share of every epoch); `pad` false for predict (every
  /// sample once, the ranks' counts differing by at most one batch).
  void attach(DataLoader& loader, bool pad = true);
  /// The next batch of `stream`, or nullopt at the end of the epoch; see [Note: uneven iterable shards].
  std::optional<Batch> next_batch(BatchStream& stream, const DataLoader& loader);

 private:
  Strategy& strategy_;
};

/// The batches `limit` (config key `key`, e.g. "trainer.limit_val_batches") allows of `loader`.
/// A loader of unknown length (an iterable dataset without one) takes a count, or the fraction 1.0
/// (all of it); another fraction is a ConfigError, as in Lightning.
int64_t count_batches(const BatchLimit& limit, const DataLoader& loader, const std::string& key);

/// Raw pointers to the loaders (non-null ones), as the loops take them.
std::vector<DataLoader*> loader_ptrs(const DataLoaders& loaders);

}  // namespace volt
