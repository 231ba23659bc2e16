#include "volt/callbacks/prediction_writer.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>

#include "volt/checkpoint/tensor_dict_file.h"
#include "volt/core/errors.h"
#include "volt/trainer/trainer.h"

namespace volt {

namespace {

/// The batch's tensors as (key, tensor) pairs: "<i>" positional, "<name>" named, "<child>.<name>" nested.
void flatten(const Batch& b, const std::string& prefix, std::vector<std::pair<std::string, torch::Tensor>>& out) {
  for (size_t i = 0; i < b.size(); ++i) out.emplace_back(prefix + std::to_string(i), b[i]);
  for (const auto& name : b.names()) {
    if (b.is_child(name))
      flatten(b.child(name), prefix + name + ".", out);
    else
      out.emplace_back(prefix + name, b.at(name));
  }
}

/// Writes the entries as a dict of CPU tensors (torch.load reads it, weights_only too) atomically.
void write_dict(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& entries) {
  std::vector<std::pair<std::string, torch::Tensor>> host;
  for (const auto& [k, t] : entries)
    if (t.defined()) host.emplace_back(k, t.detach().to(torch::kCPU).contiguous());
  save_tensor_dict(path, host);
}

torch::Tensor index_tensor(const std::vector<int64_t>& v) {
  return torch::tensor(v.empty() ? std::vector<int64_t>{} : v, torch::kLong);
}

}  // namespace

void PredictionWriterOptions::validate() { write_interval.validate("PredictionWriter.write_interval"); }

PredictionWriter::PredictionWriter(PredictionWriterOptions options) : options_(std::move(options)) {
  options_.validate();
}

void PredictionWriter::on_predict_start(Trainer& trainer, LightningModule&) {
  dir_ = options_.output_dir.empty() ? trainer.options().default_root_dir + "/predictions" : options_.output_dir;
  epoch_.clear();
  namespace fs = std::filesystem;
  const std::string mine = dir_ + "/rank_" + std::to_string(trainer.global_rank());
  // Before any batch runs: a folder that cannot be written fails now, not after predicting them all.
  std::error_code ec;
  fs::create_directories(dir_, ec);
  VOLT_CHECK(!ec, ConfigError, "PredictionWriter: cannot create the output folder '", dir_, "': ", ec.message(),
             "; set output_dir to a writable folder");
  {
    const std::string probe = mine + ".probe." + std::to_string(::getpid());
    std::ofstream out(probe);
    const bool ok = out.good();
    const int err = errno;
    out.close();
    fs::remove(probe, ec);
    VOLT_CHECK(ok, ConfigError, "PredictionWriter: cannot write into the output folder '", dir_,
               "': ", std::strerror(err), "; set output_dir to a writable folder");
  }
  // This rank's files of an earlier predict would mix with the new ones (a batch file the new
  // run does not overwrite): they go, with a warning.
  std::vector<std::string> earlier;
  for (const std::string& p : {mine + ".pt", mine})
    if (fs::exists(p, ec)) earlier.push_back(p);
  // Rank 0 also takes the files of ranks this run does not have (an earlier predict on more ranks):
  // no rank of this run writes there, and they would hold samples twice.
  if (trainer.is_global_zero()) {
    static const std::regex rank_entry(R"(^rank_([0-9]{1,9})(\.pt)?$)");
    for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
      std::smatch m;
      const std::string name = it->path().filename().string();
      if (std::regex_match(name, m, rank_entry) && std::stoll(m[1].str()) >= trainer.world_size())
        earlier.push_back(it->path().string());
    }
  }
  if (!earlier.empty()) {
    std::string names;
    for (const auto& p : earlier) names += (names.empty() ? "" : ", ") + fs::path(p).filename().string();
    spdlog::warn(
        "PredictionWriter: removing an earlier predict's outputs ({}) in '{}' so they do not mix with this run's",
        names, dir_);
    for (const auto& p : earlier) fs::remove_all(p, ec);
  }
}

void PredictionWriter::on_predict_batch_end(Trainer& trainer, LightningModule&, const Batch& outputs, const Batch&,
                                            const std::vector<int64_t>& sample_indices, int64_t batch_idx,
                                            int64_t dataloader_idx) {
  const WriteInterval w = options_.write_interval.value();
  const std::string where = "dataloader_" + std::to_string(dataloader_idx) + "/batch_" + std::to_string(batch_idx);
  std::vector<std::pair<std::string, torch::Tensor>> entries;
  flatten(outputs, "", entries);
  if (!sample_indices.empty()) entries.emplace_back("sample_indices", index_tensor(sample_indices));
  if (w != WriteInterval::Epoch)
    write_dict(dir_ + "/rank_" + std::to_string(trainer.global_rank()) + "/" + where + ".pt", entries);
  if (w != WriteInterval::Batch)
    for (auto& [k, t] : entries) epoch_.emplace_back(where + "/" + k, t.detach().to(torch::kCPU));
}

void PredictionWriter::on_predict_epoch_end(Trainer& trainer, LightningModule&) {
  if (options_.write_interval.value() == WriteInterval::Batch) return;
  write_dict(dir_ + "/rank_" + std::to_string(trainer.global_rank()) + ".pt", epoch_);
  epoch_.clear();
}

}  // namespace volt
