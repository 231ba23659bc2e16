#include "volt/checkpoint/checkpoint_reader.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "volt/checkpoint/manifest.h"
#include "volt/core/errors.h"

namespace volt {

namespace fs = std::filesystem;

namespace {
std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}
}  // namespace

CheckpointReader::CheckpointReader(std::string path) : path_(std::move(path)) {
  std::error_code ec;
  const bool exists = fs::exists(path_, ec);
  VOLT_CHECK(!ec, CheckpointError, "checkpoint '", path_, "': ", ec.message());  // a link loop, a name too long
  VOLT_CHECK(exists, CheckpointError, "checkpoint '", path_, "' does not exist");
  try {
    open();
  } catch (const YAML::Exception& e) {
    throw CheckpointError(detail::str_cat("checkpoint '", path_,
                                          "': its manifest or index lacks a field or is malformed (", e.what(),
                                          "); it is damaged or not a volt checkpoint"));
  } catch (const std::filesystem::filesystem_error& e) {
    throw CheckpointError(detail::str_cat("checkpoint '", path_, "': ", e.what()));
  }
}

void CheckpointReader::open() {
  YAML::Node meta;
  if (fs::is_directory(path_)) {
    format_ = "sharded";
    const fs::path dir(path_);
    VOLT_CHECK(fs::exists(dir / kManifestFile), CheckpointError, "'", path_,
               "' is a folder without manifest.yaml: not a sharded volt checkpoint");
    VOLT_CHECK(fs::exists(dir / kCompleteMarker), CheckpointError, "sharded checkpoint '", path_,
               "' is incomplete: no COMPLETE marker (its save did not finish); resume from an earlier one");
    const detail::Manifest m =
        detail::decode_manifest(read_text(dir / kManifestFile), read_text(dir / kCompleteMarker), path_);
    world_size_ = m.world_size;
    for (int64_t r = 0; r < world_size_; ++r) {
      const fs::path f = dir / m.files[static_cast<size_t>(r)];
      VOLT_CHECK(fs::exists(f), CheckpointError, "sharded checkpoint '", path_, "' is missing the shard file '",
                 f.string(), "' of rank ", r, " (of ", world_size_, ")");
      files_.push_back(std::make_unique<ArchiveReader>(f.string()));
      const YAML::Node& fm = files_.back()->meta();
      VOLT_CHECK(fm["save_id"] && fm["save_id"].as<std::string>() == m.save_id, CheckpointError, "sharded checkpoint '",
                 path_, "': the file of rank ", r, " ('", f.string(), "') belongs to another save (step ",
                 fm["global_step"] ? fm["global_step"].as<std::string>() : "?", ", this folder's is ", m.global_step,
                 "); the folder mixes two saves: resume from another checkpoint");
      VOLT_CHECK(fm["rank"] && fm["rank"].as<int64_t>() == r, CheckpointError, "sharded checkpoint '", path_,
                 "': the file of rank ", r, " ('", f.string(), "') holds rank ",
                 fm["rank"] ? fm["rank"].as<std::string>() : "?",
                 "'s shard of the same save: the rank files were renamed or swapped; give each its own name back");
    }
    epoch_ = m.epoch;
    global_step_ = m.global_step;
    meta_ = m.meta;
    manifest_ = m.tensors;
    // Every listed piece must be in its rank's file, with the listed size and dtype.
    int64_t relabeled = 0;
    std::string first;
    for (auto& [section, by_name] : manifest_)
      for (auto& [name, t] : by_name) {
        std::optional<at::ScalarType> stored;  // the dtype every piece's file holds, if they agree
        for (const auto& piece : t.pieces) {
          const ArchiveTensor* a = files_[static_cast<size_t>(piece.rank)]->find(section, name);
          VOLT_CHECK(a != nullptr && a->numel == piece.length, CheckpointError, "sharded checkpoint '", path_,
                     "': shard file '", files_[static_cast<size_t>(piece.rank)]->path(), "' lacks the piece of '",
                     section, "/", name, "' the manifest lists (or it has another size)");
          VOLT_CHECK(!stored || *stored == a->dtype, CheckpointError, "sharded checkpoint '", path_,
                     "': the rank files hold pieces of '", section, "/", name, "' in two dtypes (", dtype_name(*stored),
                     " and ", dtype_name(a->dtype), "); it is damaged");
          stored = a->dtype;
        }
        // volt before the fix of #29 declared every flat group's tensors as float32 while the rank
        // files held bf16 or fp16 pieces: the files' (checksummed) dtype is the truth.
        if (stored && *stored != t.dtype) {
          if (relabeled++ == 0)
            first = detail::str_cat("'", section, "/", name, "' declared ", dtype_name(t.dtype), ", held as ",
                                    dtype_name(*stored));
          t.dtype = *stored;
        }
      }
    if (relabeled > 0)
      spdlog::warn(
          "sharded checkpoint '{}': manifest.yaml declares another dtype than its rank files hold for {} tensors "
          "({}, ...); reading them as the files hold them (a manifest written by an older volt)",
          path_, relabeled, first);
  } else {
    format_ = "full";
    files_.push_back(std::make_unique<ArchiveReader>(path_));
    const YAML::Node& im = files_[0]->meta();
    VOLT_CHECK(im["epoch"] && im["global_step"], CheckpointError, "checkpoint '", path_,
               "' lacks epoch/global_step: not a volt training checkpoint");
    VOLT_CHECK(!im["rank"], CheckpointError, "'", path_,
               "' is one rank's file of a sharded checkpoint; load its folder '",
               fs::path(path_).parent_path().string(), "' instead");
    epoch_ = im["epoch"].as<int64_t>();
    global_step_ = im["global_step"].as<int64_t>();
    meta_ = im["checkpoint"] ? im["checkpoint"] : YAML::Node(YAML::NodeType::Map);
    if (meta_["world_size"]) world_size_ = meta_["world_size"].as<int64_t>();
    for (const auto& [section, tensors] : files_[0]->index())
      for (const auto& [name, a] : tensors) {
        ShardedTensor t;
        t.dtype = a.dtype;
        t.shape = a.shape;
        t.numel = a.numel;
        t.pieces.push_back({0, 0, a.numel});
        manifest_[section][name] = std::move(t);
      }
  }
}

std::vector<std::string> CheckpointReader::names(const std::string& section) const {
  std::vector<std::string> out;
  auto s = manifest_.find(section);
  if (s != manifest_.end())
    for (const auto& kv : s->second) out.push_back(kv.first);
  return out;
}

bool CheckpointReader::has(const std::string& section, const std::string& name) const {
  auto s = manifest_.find(section);
  return s != manifest_.end() && s->second.count(name) > 0;
}

const ShardedTensor& CheckpointReader::tensor(const std::string& section, const std::string& name) const {
  VOLT_CHECK(has(section, name), CheckpointError, "checkpoint '", path_, "' has no tensor '", section, "/", name,
             "' (a checkpoint of another model?)");
  return manifest_.at(section).at(name);
}

torch::Tensor CheckpointReader::read(const std::string& section, const std::string& name) const {
  const ShardedTensor& t = tensor(section, name);
  return read_flat(section, name, 0, t.numel).view(t.shape);
}

torch::Tensor CheckpointReader::read_flat(const std::string& section, const std::string& name, int64_t start,
                                          int64_t length) const {
  const ShardedTensor& t = tensor(section, name);
  detail::check_flat_range(path_, section, name, start, length, t.numel);
  if (t.pieces.size() == 1 && t.pieces[0].start == 0 && t.pieces[0].length == t.numel)
    return files_[static_cast<size_t>(t.pieces[0].rank)]->read_flat(section, name, start, length);
  torch::Tensor out = torch::empty({length}, torch::TensorOptions().dtype(t.dtype));
  // Pieces in order of their start; a replicated piece (the same range on several ranks) is read once.
  std::vector<const ShardedTensor::Piece*> order;
  for (const auto& p : t.pieces) order.push_back(&p);
  std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->start < b->start; });
  int64_t pos = start;
  const int64_t end = start + length;
  for (const auto* p : order) {
    if (pos >= end) break;
    const int64_t hi = std::min(end, p->start + p->length);
    if (p->start > pos || hi <= pos) continue;
    out.narrow(0, pos - start, hi - pos)
        .copy_(files_[static_cast<size_t>(p->rank)]->read_flat(section, name, pos - p->start, hi - pos));
    pos = hi;
  }
  VOLT_CHECK(pos == end, CheckpointError, "sharded checkpoint '", path_, "': the pieces of '", section, "/", name,
             "' do not cover elements [", pos, ", ", end, ")");
  return out;
}

}  // namespace volt
