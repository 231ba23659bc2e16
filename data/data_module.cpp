#include "volt/data/data_module.h"

#include "volt/core/errors.h"

namespace volt {

std::shared_ptr<DataLoader> LightningDataModule::train_dataloader() {
  throw ConfigError("fit needs training data: the data module does not implement train_dataloader()");
}

DataLoaders LightningDataModule::test_dataloader() {
  throw ConfigError("test needs test data: the data module does not implement test_dataloader()");
}

DataLoaders LightningDataModule::predict_dataloader() {
  throw ConfigError("predict needs data: the data module does not implement predict_dataloader()");
}

}  // namespace volt
