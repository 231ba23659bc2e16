#include "volt/checkpoint/state_io.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <set>

#include "volt/checkpoint/comm_text.h"
#include "volt/checkpoint/sharded_checkpoint.h"
#include "volt/checkpoint/tensor_archive.h"
#include "volt/core/errors.h"

namespace volt {

namespace {

/// The bytes of `t` as int64 words (zero padded). Summing one rank's words with the other ranks'
/// zeros is exact for every dtype: a path through double would round int64 values beyond 2^53.
torch::Tensor to_words(const torch::Tensor& t) {
  const torch::Tensor c = t.detach().to(torch::kCPU).contiguous();
  const auto nbytes = static_cast<size_t>(c.numel()) * c.element_size();
  torch::Tensor words = torch::zeros({static_cast<int64_t>((nbytes + 7) / 8)}, torch::kLong);
  if (nbytes > 0) std::memcpy(words.data_ptr(), c.data_ptr(), nbytes);
  return words;
}

/// A tensor shaped and typed as `like` (on the CPU) holding the bytes of `words`.
torch::Tensor from_words(const torch::Tensor& words, const torch::Tensor& like) {
  torch::Tensor out = torch::empty(like.sizes(), torch::TensorOptions().dtype(like.scalar_type()));
  const auto nbytes = static_cast<size_t>(out.numel()) * out.element_size();
  if (nbytes > 0) std::memcpy(out.data_ptr(), words.contiguous().data_ptr(), nbytes);
  return out;
}

/// Every rank's tensors of `local` (same keys, shapes and dtypes on every rank) as
/// "rank<r>.<key>"; collective. Bit-exact for every dtype: one all-reduce of the tensors' bytes,
/// no variable-size collective.
std::map<std::string, torch::Tensor> gather_rank_tensors(StateComm& comm,
                                                         const std::map<std::string, torch::Tensor>& local) {
  std::map<std::string, torch::Tensor> out;
  const int64_t w = comm.world_size(), r = comm.rank();
  if (w == 1) {
    for (const auto& [k, t] : local) out["rank0." + k] = t;
    return out;
  }
  std::vector<torch::Tensor> words;
  int64_t total = 0;
  for (const auto& [k, t] : local) {
    words.push_back(to_words(t));
    total += words.back().numel();
  }
  if (total == 0 && local.empty()) return out;  // the same on every rank: no collective
  torch::Tensor rows = torch::zeros({w, total}, torch::kLong);
  if (total > 0) rows[r].copy_(torch::cat(words));
  rows = comm.all_reduce(rows, ReduceOp::Sum);
  for (int64_t q = 0; q < w; ++q) {
    int64_t offset = 0;
    size_t i = 0;
    for (const auto& [k, t] : local) {
      const int64_t n = words[i++].numel();
      out["rank" + std::to_string(q) + "." + k] = from_words(rows[q].narrow(0, offset, n), t);
      offset += n;
    }
  }
  return out;
}

/// One line per tensor, "<name>\x1f<dtype> <shape>": what every rank's hook tensors must agree on.
std::string describe_tensors(const std::map<std::string, torch::Tensor>& tensors) {
  std::string s;
  for (const auto& [k, t] : tensors) s += detail::str_cat(k, "\x1f", dtype_name(t.scalar_type()), " ", t.sizes(), "\n");
  return s;
}

/// The first way this rank's tensors (described by `mine`) differ from rank 0's (`ref`).
std::string first_difference(const std::string& ref, const std::string& mine, int64_t rank) {
  auto parse = [](const std::string& text) {
    std::map<std::string, std::string> m;  // name -> "dtype shape"
    size_t pos = 0;
    while (pos < text.size()) {
      const size_t end = text.find('\n', pos), cut = text.find('\x1f', pos);
      m[text.substr(pos, cut - pos)] = text.substr(cut + 1, end - cut - 1);
      pos = end + 1;
    }
    return m;
  };
  const auto theirs = parse(ref), ours = parse(mine);
  const std::string r = std::to_string(rank);
  for (const auto& [name, spec] : ours) {
    auto it = theirs.find(name);
    if (it == theirs.end()) return "'" + name + "' is added on rank " + r + " but not on rank 0";
    if (it->second != spec) return "'" + name + "' is " + spec + " on rank " + r + " but " + it->second + " on rank 0";
  }
  for (const auto& [name, spec] : theirs)
    if (!ours.count(name)) return "'" + name + "' is added on rank 0 but not on rank " + r;
  return {};
}

/// Fails every rank (CheckpointError naming the tensor and the rank) unless every rank's hook
/// tensors have the same names, shapes and dtypes: they are gathered and declared by those of
/// rank 0. One all-reduce when they agree.
void check_same_rank_tensors(StateComm& comm, const std::map<std::string, torch::Tensor>& local,
                             const std::string& path) {
  const int64_t w = comm.world_size();
  if (w == 1) return;
  const std::string mine = describe_tensors(local);
  torch::Tensor sums = torch::zeros({w}, torch::kLong);
  sums[comm.rank()] = static_cast<int64_t>(detail::xxh64(mine.data(), mine.size()));
  sums = comm.all_reduce(sums, ReduceOp::Sum);
  if (sums.eq(sums[0]).all().item<bool>()) return;
  const std::string ref = detail::broadcast_text(comm, mine, 0);
  const std::string diff = first_difference(ref, mine, comm.rank());
  detail::agree_or_throw(
      comm,
      diff.empty() ? std::string()
                   : detail::str_cat("not saving checkpoint '", path, "': the on_save_checkpoint tensor ", diff,
                                     "; every rank must add the same names with the same shapes and dtypes to "
                                     "CheckpointMeta::tensors"),
      "saving checkpoint '" + path + "'");
}

/// Writes this rank's `tensors` into its file of a sharded save as "rank<r>.<name>"; rank 0
/// declares every rank's (the same names, shapes and dtypes on every rank).
void add_rank_tensors(ShardedCheckpointWriter& sw, const char* section,
                      const std::map<std::string, torch::Tensor>& tensors, int64_t rank, int64_t world) {
  for (const auto& [k, v] : tensors) {
    sw.file().add(section, "rank" + std::to_string(rank) + "." + k, v);
    if (rank == 0)
      for (int64_t r = 0; r < world; ++r)
        sw.declare(section, "rank" + std::to_string(r) + "." + k, v.scalar_type(), v.sizes().vec(), r, 0, v.numel());
  }
}

/// The optimizer state fields of a group's slices, by field, on this rank.
void for_each_slice_state(const OptimizerList& opt, const FlatGroup& g, const FlatSlice& s,
                          const std::function<void(const std::string&, const torch::Tensor&)>& fn) {
  for_each_optimizer_state(opt, {{g.entries[s.entry].name, s.view}},
                           [&](const std::string&, const std::string& field, const torch::Tensor& t) { fn(field, t); });
}

/// The dtype of each optimizer state field of the groups, as the optimizers keep it (the
/// parameters' dtype for LibTorch's optimizers: bf16 under bf16-true).
using FieldDtypes = std::map<std::string, at::ScalarType>;

/// Optimizer state fields present on any rank in any group (collective), in the canonical order,
/// and (into `dtypes`) the dtype each is kept in, so the manifest declares what the rank files hold.
std::vector<std::string> group_fields(const StateLayout& layout, StateComm& comm, FieldDtypes& dtypes) {
  const auto& all = optimizer_state_fields();
  std::map<std::string, at::ScalarType> local;
  if (!layout.optimizers.empty())
    for (const auto& g : layout.groups)
      for (const auto& s : g.slices)
        for_each_slice_state(layout.optimizers, g, s,
                             [&](const std::string& f, const torch::Tensor& t) { local[f] = t.scalar_type(); });
  // Per field: its dtype + 1 (0: this rank has none); a rank without a slice contributes 0.
  torch::Tensor have = torch::zeros({static_cast<int64_t>(all.size())}, torch::kDouble);
  for (size_t i = 0; i < all.size(); ++i)
    if (local.count(all[i])) have[static_cast<int64_t>(i)] = static_cast<double>(local.at(all[i])) + 1;
  if (comm.world_size() > 1) have = comm.all_reduce(have, ReduceOp::Max);
  std::vector<std::string> out;
  for (size_t i = 0; i < all.size(); ++i) {
    const auto code = static_cast<int>(have[static_cast<int64_t>(i)].item<double>());
    if (code <= 0) continue;
    out.push_back(all[i]);
    dtypes[all[i]] = static_cast<at::ScalarType>(code - 1);
  }
  return out;
}

/// This rank's optimizer state `field` of a group laid out as its shard (zeros where no slice has state).
torch::Tensor local_field(const OptimizerList& opt, const FlatGroup& g, const std::string& field,
                          at::ScalarType dtype) {
  torch::Tensor local = torch::zeros({g.shard_numel}, g.shard.options().dtype(dtype));
  for (const auto& s : g.slices)
    for_each_slice_state(opt, g, s, [&](const std::string& name, const torch::Tensor& t) {
      if (name == field) local.narrow(0, s.shard_offset, s.length).copy_(t.reshape({-1}));
    });
  return local;
}

/// Every group's optimizer step count per entry: the maximum over the entry's slices and shard
/// ranks (a rank may hold no slice of it). Per entry, not per group: parameters of one unit may be
/// stepped by different optimizers (manual optimization), or never (no gradient yet). One
/// collective for all groups (the groups of a layout share one shard group).
using GroupSteps = std::vector<std::vector<int64_t>>;
GroupSteps group_steps(const OptimizerList& opt, const std::vector<FlatGroup>& groups) {
  std::vector<double> local;
  for (const auto& g : groups) {
    const size_t base = local.size();
    local.resize(base + g.entries.size(), 0.0);
    for (const auto& s : g.slices)
      for_each_slice_state(opt, g, s, [&](const std::string& name, const torch::Tensor& t) {
        if (name == "step") local[base + s.entry] = std::max(local[base + s.entry], t.item<double>());
      });
  }
  torch::Tensor steps = torch::tensor(local, torch::kDouble);
  if (!groups.empty()) steps = groups[0].all_reduce(steps, ReduceOp::Max);
  steps = steps.contiguous();
  const double* v = steps.data_ptr<double>();
  GroupSteps out;
  for (const auto& g : groups) {
    out.emplace_back();
    for (size_t e = 0; e < g.entries.size(); ++e) out.back().push_back(static_cast<int64_t>(*v++));
  }
  return out;
}

/// The steps of every group's entries, if any group has optimizer state "step" (collective).
GroupSteps steps_if_any(const StateLayout& layout, const std::vector<std::string>& fields) {
  const bool has_step = std::count(fields.begin(), fields.end(), "step") > 0;
  return has_step ? group_steps(layout.optimizers, layout.groups) : GroupSteps{};
}

/// `staged` non-null: the writer defers its writes (stage_state) and is handed out (null on the
/// ranks that write nothing).
void save_full(const StateLayout& layout, const CheckpointHeader& header, const std::string& path, StateComm& comm,
               std::unique_ptr<ArchiveWriter>* staged = nullptr) {
  torch::NoGradGuard ng;
  auto rng = gather_rank_tensors(comm, header.rng_states);
  auto extra = gather_rank_tensors(comm, header.extra_tensors);
  FieldDtypes dtypes;
  const auto fields = layout.groups.empty() ? std::vector<std::string>{} : group_fields(layout, comm, dtypes);
  const GroupSteps steps = steps_if_any(layout, fields);
  const bool writer = comm.rank() == 0;
  std::unique_ptr<ArchiveWriter> w;
  std::string error;
  // Rank 0 keeps taking part in the gathers after a failed write, so no rank hangs; all learn of
  // the failure at the end.
  auto guarded = [&](const std::function<void()>& fn) {
    if (!writer || !error.empty()) return;
    try {
      fn();
    } catch (const std::exception& e) {
      error = e.what();
      w.reset();
    }
  };
  guarded([&] {
    w = std::make_unique<ArchiveWriter>(path);
    if (staged) w->defer_writes();
  });
  for (size_t gi = 0; gi < layout.groups.size(); ++gi) {
    const FlatGroup& g = layout.groups[gi];
    {
      torch::Tensor full = g.gather(g.shard);
      guarded([&] {
        for (const auto& e : g.entries) w->add(kModelSection, e.name, full.narrow(0, e.offset, e.numel).view(e.shape));
      });
    }  // one group's gathered values at a time
    for (const auto& field : fields) {
      if (field == "step") {
        guarded([&] {
          for (size_t ei = 0; ei < g.entries.size(); ++ei)
            w->add(kOptimizerSection, g.entries[ei].name + ".step", torch::tensor(steps[gi][ei], torch::kLong));
        });
        continue;
      }
      torch::Tensor full = g.gather(local_field(layout.optimizers, g, field, dtypes.at(field)));
      guarded([&] {
        for (const auto& e : g.entries)
          w->add(kOptimizerSection, e.name + "." + field, full.narrow(0, e.offset, e.numel).view(e.shape));
      });
    }
  }
  guarded([&] {
    for (const auto& [n, t] : layout.params) w->add(kModelSection, n, t);
    for (const auto& [n, t] : layout.buffers) w->add(kModelSection, n, t);
    if (!layout.optimizers.empty())
      for_each_optimizer_state(layout.optimizers, layout.params,
                               [&](const std::string& n, const std::string& f, const torch::Tensor& t) {
                                 w->add(kOptimizerSection, n + "." + f, t);
                               });
    for (const auto& [k, v] : rng) w->add(kRngSection, k, v);
    for (const auto& [k, v] : extra) w->add(kExtraTensorSection, k, v);
    w->commit(detail::checkpoint_fields(header), detail::checkpoint_index_meta(header));
  });
  detail::agree_or_throw(comm, error, "saving checkpoint '" + path + "'");
  if (staged) *staged = std::move(w);
}

/// Rank 0's part of a sharded save: whole tensors, written and declared.
void add_whole(const StateLayout& layout, ShardedCheckpointWriter& sw) {
  ArchiveWriter& file = sw.file();
  auto whole = [&](const char* section, const std::string& name, const torch::Tensor& t) {
    file.add(section, name, t);
    sw.declare(section, name, t.scalar_type(), t.sizes().vec(), 0, 0, t.numel());
  };
  for (const auto& [n, t] : layout.params) whole(kModelSection, n, t);
  for (const auto& [n, t] : layout.buffers) whole(kModelSection, n, t);
  if (!layout.optimizers.empty())
    for_each_optimizer_state(layout.optimizers, layout.params,
                             [&](const std::string& n, const std::string& f, const torch::Tensor& t) {
                               whole(kOptimizerSection, n + "." + f, t);
                             });
}

/// One group's pieces in this rank's file, and (rank 0) every rank's pieces in the manifest.
void add_group(const StateLayout& layout, const FlatGroup& g, const std::vector<std::string>& fields,
               const FieldDtypes& dtypes, const std::vector<int64_t>& steps, int64_t rank,
               ShardedCheckpointWriter& sw) {
  ArchiveWriter& file = sw.file();
  if (g.writes)
    for (const auto& s : g.slices) {
      const auto& e = g.entries[s.entry];
      file.add(kModelSection, e.name, g.shard.narrow(0, s.shard_offset, s.length));
      for (const auto& field : fields) {
        if (field == "step") {
          file.add(kOptimizerSection, e.name + ".step", torch::tensor(steps.at(s.entry), torch::kLong));
          continue;
        }
        for_each_slice_state(layout.optimizers, g, s, [&](const std::string& name, const torch::Tensor& t) {
          if (name == field) file.add(kOptimizerSection, e.name + "." + field, t.reshape({-1}));
        });
      }
    }
  if (rank != 0) return;
  // The writing ranks are the first replica: global rank q holds shard q.
  const int64_t S = g.shard_numel;
  for (const auto& e : g.entries)
    for (int64_t q = 0; q < g.shard_size; ++q) {
      const int64_t lo = std::max(e.offset, q * S), hi = std::min(e.offset + e.numel, (q + 1) * S);
      if (lo >= hi) continue;
      sw.declare(kModelSection, e.name, g.shard.scalar_type(), e.shape, q, lo - e.offset, hi - lo);
      for (const auto& field : fields) {
        if (field == "step") {
          if (lo == e.offset) sw.declare(kOptimizerSection, e.name + ".step", at::kLong, {}, q, 0, 1);  // once
        } else {
          sw.declare(kOptimizerSection, e.name + "." + field, dtypes.at(field), e.shape, q, lo - e.offset, hi - lo);
        }
      }
    }
}

/// One id for this sharded save, drawn on rank 0 and the same on every rank (collective).
std::string shared_save_id(StateComm& comm) {
  const std::string mine = detail::new_save_id();
  if (comm.world_size() == 1) return mine;
  // 48 bits travel exactly in a double.
  const double id =
      comm.broadcast(torch::tensor(static_cast<double>(std::stoull(mine, nullptr, 16)), torch::kDouble), 0)
          .item<double>();
  return detail::hex64(static_cast<uint64_t>(id));
}

/// `staged` non-null: the writer defers its writes (stage_state) and is handed out.
void save_sharded(const StateLayout& layout, const CheckpointHeader& header, const std::string& path, StateComm& comm,
                  std::unique_ptr<ShardedCheckpointWriter>* staged = nullptr) {
  torch::NoGradGuard ng;
  FieldDtypes dtypes;
  const auto fields = layout.groups.empty() ? std::vector<std::string>{} : group_fields(layout, comm, dtypes);
  const GroupSteps steps = steps_if_any(layout, fields);
  const int64_t rank = comm.rank(), world = comm.world_size();
  auto owned = std::make_unique<ShardedCheckpointWriter>(
      path, rank, world, shared_save_id(comm),
      [&comm](const std::string& error, const std::string& what) { detail::agree_or_throw(comm, error, what); });
  ShardedCheckpointWriter& sw = *owned;
  if (staged) sw.defer_writes();
  std::string error;
  try {
    for (size_t gi = 0; gi < layout.groups.size(); ++gi)
      add_group(layout, layout.groups[gi], fields, dtypes, steps.empty() ? std::vector<int64_t>{} : steps[gi], rank,
                sw);
    if (rank == 0) add_whole(layout, sw);
    add_rank_tensors(sw, kRngSection, header.rng_states, rank, world);
    add_rank_tensors(sw, kExtraTensorSection, header.extra_tensors, rank, world);
  } catch (const std::exception& e) {
    error = e.what();
  }
  sw.commit(header, error);
  if (staged) *staged = std::move(owned);
}

void load_optimizer(const StateLayout& layout, const CheckpointReader& ckpt) {
  const OptimizerList& opt = layout.optimizers;
  // Unit by unit: at most one unit's optimizer state is in flight besides the optimizer's own.
  for (const auto& g : layout.groups) {
    std::map<std::string, torch::Tensor> local;
    NamedTensors params;
    for (const auto& s : g.slices) {
      const auto& e = g.entries[s.entry];
      params.emplace_back(e.name, s.view);
      for (const auto& field : optimizer_state_fields()) {
        const std::string key = e.name + "." + field;
        if (!ckpt.has(kOptimizerSection, key)) continue;
        if (field == "step") {
          local[key] = ckpt.read(kOptimizerSection, key);
          continue;
        }
        VOLT_CHECK(ckpt.tensor(kOptimizerSection, key).numel == e.numel, CheckpointError, ckpt.path(),
                   ": optimizer state '", key, "' has ", ckpt.tensor(kOptimizerSection, key).numel,
                   " elements, the parameter ", e.numel);
        local[key] = ckpt.read_flat(kOptimizerSection, key, s.param_offset, s.length);
      }
    }
    optimizer_state_from_tensors(opt, params, local, ckpt.path());
  }
  // Whole parameters one by one: one parameter's state in flight besides the optimizer's own.
  const std::vector<std::string> names = ckpt.names(kOptimizerSection);  // sorted
  for (const auto& [name, p] : layout.params) {
    std::map<std::string, torch::Tensor> state;
    for (auto it = std::lower_bound(names.begin(), names.end(), name + ".");
         it != names.end() && it->rfind(name + ".", 0) == 0; ++it)
      if (it->find('.', name.size() + 1) == std::string::npos)  // "<name>.<field>", not a longer name's
        state[*it] = ckpt.read(kOptimizerSection, *it);
    optimizer_state_from_tensors(opt, {{name, p}}, state, ckpt.path());
  }
}

/// The first parameter on this rank holding nan or inf ("" if none).
std::string first_non_finite(const StateLayout& layout) {
  auto finite = [](const torch::Tensor& t) { return torch::isfinite(t.detach()).all().item<bool>(); };
  for (const auto& [n, t] : layout.params)
    if (t.is_floating_point() && !finite(t)) return n;
  for (const auto& g : layout.groups) {
    if (finite(g.shard)) continue;  // one check per unit; the padding is zeros
    for (const auto& s : g.slices)
      if (!finite(g.shard.narrow(0, s.shard_offset, s.length))) return g.entries[s.entry].name;
  }
  return {};
}

/// Refuses (on every rank) to write weights that hold nan or inf: a diverged run must never replace
/// a good checkpoint. Collective.
void check_finite_weights(const StateLayout& layout, StateComm& comm) {
  torch::NoGradGuard ng;
  const std::string bad = first_non_finite(layout);
  detail::agree_or_throw(comm, bad.empty() ? std::string() : "parameter '" + bad + "' holds nan or inf",
                         "the finiteness check of the weights");
}

class StagedFull : public StagedSave {
 public:
  StagedFull(std::string path, StateComm& comm) : comm_(comm) { path_ = std::move(path); }
  std::unique_ptr<ArchiveWriter> writer;  // rank 0's
  void set_staged_bytes(int64_t n) { staged_bytes_ = n; }
  void write() override {
    if (!writer) return;
    try {
      writer->write_deferred();
    } catch (const std::exception& e) {
      error_ = e.what();
    }
    writer.reset();  // without a commit, its temporary file goes
  }
  void finish() override { detail::agree_or_throw(comm_, error_, "saving checkpoint '" + path_ + "'"); }
  bool finish_alone(double) override { return error_.empty(); }

 private:
  StateComm& comm_;
  std::string error_;
};

class StagedSharded : public StagedSave {
 public:
  explicit StagedSharded(std::string path) { path_ = std::move(path); }
  std::unique_ptr<ShardedCheckpointWriter> writer;
  void set_staged_bytes(int64_t n) { staged_bytes_ = n; }
  void write() override { error_ = writer->write_deferred(); }
  void finish() override { writer->finish(error_); }
  bool finish_alone(double timeout_s) override { return error_.empty() && writer->finish_without_agreement(timeout_s); }

 private:
  std::string error_;
};

/// save_state, or with `staged` stage_state.
void save_or_stage(const StateLayout& layout, const CheckpointHeader& header, const std::string& path,
                   CheckpointFormat format, StateComm& comm, std::unique_ptr<StagedSave>* staged) {
  try {
    check_finite_weights(layout, comm);
  } catch (const CheckpointError& e) {
    throw CheckpointError(detail::str_cat("not saving checkpoint '", path, "' at step ", header.global_step, ": ",
                                          e.what(), " (training diverged); the checkpoints already written are kept"));
  }
  check_same_rank_tensors(comm, header.extra_tensors, path);
  if (!staged) {
    if (format == CheckpointFormat::Sharded)
      save_sharded(layout, header, path, comm);
    else
      save_full(layout, header, path, comm);
    return;
  }
  if (format == CheckpointFormat::Sharded) {
    auto s = std::make_unique<StagedSharded>(path);
    save_sharded(layout, header, path, comm, &s->writer);
    s->set_staged_bytes(s->writer->file().deferred_bytes());
    *staged = std::move(s);
  } else {
    auto s = std::make_unique<StagedFull>(path, comm);
    save_full(layout, header, path, comm, &s->writer);
    s->set_staged_bytes(s->writer ? s->writer->deferred_bytes() : 0);
    *staged = std::move(s);
  }
}

}  // namespace

void save_state(const StateLayout& layout, const CheckpointHeader& header, const std::string& path,
                CheckpointFormat format, StateComm& comm) {
  save_or_stage(layout, header, path, format, comm, nullptr);
}

std::unique_ptr<StagedSave> stage_state(const StateLayout& layout, const CheckpointHeader& header,
                                        const std::string& path, CheckpointFormat format, StateComm& comm) {
  std::unique_ptr<StagedSave> staged;
  save_or_stage(layout, header, path, format, comm, &staged);
  return staged;
}

void load_state(const StateLayout& layout, const CheckpointReader& ckpt) {
  torch::NoGradGuard ng;
  std::vector<std::pair<std::string, std::vector<int64_t>>> expected;
  for (const auto& g : layout.groups)
    for (const auto& e : g.entries) expected.emplace_back(e.name, e.shape);
  for (const auto& [n, t] : layout.params) expected.emplace_back(n, t.sizes().vec());
  for (const auto& [n, t] : layout.buffers) expected.emplace_back(n, t.sizes().vec());
  detail::check_checkpoint_model(ckpt, expected);
  // Just this rank's ranges: a full file is read in pieces, a sharded folder through its manifest.
  for (const auto& g : layout.groups) {
    torch::Tensor shard = g.shard;
    for (const auto& s : g.slices)
      shard.narrow(0, s.shard_offset, s.length)
          .copy_(ckpt.read_flat(kModelSection, g.entries[s.entry].name, s.param_offset, s.length));
  }
  for (const auto& [n, t] : layout.params) torch::Tensor(t).copy_(ckpt.read(kModelSection, n));
  for (const auto& [n, t] : layout.buffers) torch::Tensor(t).copy_(ckpt.read(kModelSection, n));
  if (!layout.optimizers.empty() && !ckpt.names(kOptimizerSection).empty()) load_optimizer(layout, ckpt);
}

namespace detail {

namespace {
/// Checks that `ckpt` holds `name` with `shape`; the message names the file and the tensor.
void check_model_tensor(const CheckpointReader& ckpt, const std::string& name, c10::IntArrayRef shape) {
  VOLT_CHECK(ckpt.has(kModelSection, name), CheckpointError, ckpt.path(), ": no tensor '", name,
             "' in the checkpoint (a checkpoint of another model?)");
  const auto& t = ckpt.tensor(kModelSection, name);
  VOLT_CHECK(c10::IntArrayRef(t.shape) == shape, CheckpointError, ckpt.path(), ": tensor '", name, "' has shape ",
             c10::IntArrayRef(t.shape), " but the model has ", shape, " (a checkpoint of another model?)");
}
}  // namespace

void check_checkpoint_model(const CheckpointReader& ckpt,
                            const std::vector<std::pair<std::string, std::vector<int64_t>>>& expected) {
  for (const auto& [name, shape] : expected) check_model_tensor(ckpt, name, shape);
  const size_t have = ckpt.names(kModelSection).size();
  VOLT_CHECK(have == expected.size(), CheckpointError, ckpt.path(), ": the checkpoint has ", have,
             " model tensors, the model ", expected.size(), " (a checkpoint of another model?)");
}

void agree_or_throw(StateComm& comm, const std::string& local_error, const std::string& what) {
  const FirstFailure f = first_failure(comm, local_error);
  if (f.rank >= comm.world_size()) return;
  if (!local_error.empty()) throw CheckpointError(local_error);
  throw CheckpointError(str_cat(what, " failed on rank ", f.rank, ": ", f.message));
}

}  // namespace detail
}  // namespace volt
