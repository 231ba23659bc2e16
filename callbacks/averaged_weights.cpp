#include "volt/callbacks/averaged_weights.h"

#include <torch/torch.h>

#include <optional>

#include "volt/checkpoint/state_layout.h"
#include "volt/core/errors.h"
#include "volt/trainer/trainer.h"

namespace volt {

torch::Tensor running_mean(const torch::Tensor& averaged, const torch::Tensor& current, int64_t num_averaged) {
  return averaged + (current - averaged) / static_cast<double>(num_averaged + 1);
}

namespace detail {

void validate_averaging_device(const std::optional<std::string>& device, const std::string& key) {
  if (!device) return;
  std::optional<torch::Device> d;
  if (!device->empty()) {
    try {
      d.emplace(*device);
    } catch (const std::exception&) {
    }
  }
  VOLT_CHECK(d.has_value(), ConfigError, "config key '", key, "': '", *device,
             "' is not a device (expected e.g. 'cpu', 'cuda', 'cuda:1', or null for the weights' own device)");
  VOLT_CHECK(d->is_cpu() || (d->is_cuda() && torch::cuda::is_available()), ConfigError, "config key '", key, "': '",
             *device, "' is ",
             d->is_cuda() ? "a GPU, and this LibTorch sees none (a CPU-only build, or no visible GPU)"
                          : "not a device volt keeps weights on",
             "; use 'cpu', or null for the weights' own device");
  if (d->is_cuda() && d->has_index())
    VOLT_CHECK(d->index() < static_cast<int>(torch::cuda::device_count()), ConfigError, "config key '", key, "': '",
               *device, "' names GPU ", d->index(), ", and ", torch::cuda::device_count(), " are visible");
}

AveragedWeights::AveragedWeights(std::string device, bool buffers, bool average_buffers)
    : device_(std::move(device)), buffers_(buffers), average_buffers_(average_buffers) {}

int64_t AveragedWeights::numel() const {
  int64_t n = 0;
  for (const auto& [name, t] : copy_) n += t.numel();
  return n;
}

void AveragedWeights::clear() {
  copy_.clear();
  n_averaged_ = 0;
}

std::vector<AveragedWeights::Live> AveragedWeights::live(Trainer& t, LightningModule& m) const {
  // Under FSDP the module's parameters are views of freed storage between steps; the layout names
  // what holds the values: each unit's shard.
  StateLayout l = t.strategy().state_layout(m, {});
  std::vector<Live> out;
  for (auto& [name, p] : l.params) out.push_back({"param/" + name, p, true});
  for (size_t i = 0; i < l.groups.size(); ++i) {
    const FlatGroup& g = l.groups[i];
    const std::string first = g.entries.empty() ? std::string() : g.entries.front().name;
    out.push_back({"flat/" + std::to_string(i) + "/" + first, g.shard, true});
  }
  if (buffers_)
    for (auto& [name, b] : l.buffers) out.push_back({"buffer/" + name, b, average_buffers_ && b.is_floating_point()});
  return out;
}

torch::Tensor& AveragedWeights::copy_of(const Live& l) {
  auto it = copy_.find(l.name);
  VOLT_CHECK(it != copy_.end() && it->second.sizes() == l.value.sizes(), ConfigError, "weight averaging: the model's '",
             l.name, "' has no averaged copy of its shape; the model or the strategy changed after the copy was made");
  return it->second;
}

void AveragedWeights::snapshot(Trainer& t, LightningModule& m) {
  torch::NoGradGuard ng;
  copy_.clear();
  for (const Live& l : live(t, m)) {
    const torch::Device d = device_.empty() ? l.value.device() : torch::Device(device_);
    copy_[l.name] = l.value.detach().to(d, /*non_blocking=*/false, /*copy=*/true);
  }
}

void AveragedWeights::update(Trainer& t, LightningModule& m, const AveragingFn& fn) {
  torch::NoGradGuard ng;
  if (copy_.empty() || n_averaged_ == 0) {
    snapshot(t, m);
  } else {
    for (const Live& l : live(t, m)) {
      torch::Tensor& a = copy_of(l);
      const torch::Tensor current = l.value.detach().to(a.device());
      a.copy_(l.averaged ? fn(a, current, n_averaged_) : current);
    }
  }
  ++n_averaged_;
}

void AveragedWeights::swap(Trainer& t, LightningModule& m) {
  torch::NoGradGuard ng;
  for (const Live& l : live(t, m)) {
    torch::Tensor& a = copy_of(l);
    torch::Tensor model = l.value.detach();
    torch::Tensor held = model.to(a.device(), /*non_blocking=*/false, /*copy=*/true);
    model.copy_(a);
    a.copy_(held);
  }
}

void AveragedWeights::copy_to_model(Trainer& t, LightningModule& m) {
  torch::NoGradGuard ng;
  for (const Live& l : live(t, m)) l.value.detach().copy_(copy_of(l));
}

void AveragedWeights::save(const std::string& prefix, std::map<std::string, torch::Tensor>& out) const {
  for (const auto& [name, t] : copy_) out[prefix + "/" + name] = t;
}

bool AveragedWeights::load(Trainer& t, LightningModule& m, const std::string& prefix,
                           const std::map<std::string, torch::Tensor>& in) {
  std::map<std::string, torch::Tensor> loaded;
  for (const Live& l : live(t, m)) {
    auto it = in.find(prefix + "/" + l.name);
    if (it == in.end() || it->second.sizes() != l.value.sizes() || it->second.scalar_type() != l.value.scalar_type())
      return false;
    const torch::Device d = device_.empty() ? l.value.device() : torch::Device(device_);
    loaded[l.name] = it->second.to(d, /*non_blocking=*/false, /*copy=*/true);
  }
  copy_ = std::move(loaded);
  return true;
}

}  // namespace detail
}  // namespace volt
