#include "volt/callbacks/model_summary.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <iomanip>
#include <sstream>
#include <unordered_set>
#include <vector>

#include "volt/trainer/trainer.h"

namespace volt {

namespace {
std::string human(int64_t n) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(1);
  if (n >= 1000000000)
    os << n / 1e9 << " B";
  else if (n >= 1000000)
    os << n / 1e6 << " M";
  else if (n >= 1000)
    os << n / 1e3 << " K";
  else
    os << n << "  ";
  return os.str();
}
/// Each parameter once: LibTorch lists a shared one (tied embeddings) under each of its names;
/// Lightning's summary, over PyTorch's deduplicated parameters(), counts it once.
std::vector<torch::Tensor> unique_parameters(const torch::nn::Module& m) {
  std::vector<torch::Tensor> out;
  std::unordered_set<const void*> seen;
  for (const auto& p : m.parameters())
    if (seen.insert(p.unsafeGetTensorImpl()).second) out.push_back(p);
  return out;
}
int64_t count(const torch::nn::Module& m, bool trainable_only) {
  int64_t n = 0;
  for (const auto& p : unique_parameters(m))
    if (!trainable_only || p.requires_grad()) n += p.numel();
  return n;
}
}  // namespace

std::string ModelSummary::summarize(const torch::nn::Module& module, int64_t max_depth) {
  struct Row {
    std::string name, type;
    int64_t params;
  };
  std::vector<Row> rows;
  for (const auto& item : module.named_modules("", /*include_self=*/false)) {
    const std::string& name = item.key();
    const int64_t depth = std::count(name.begin(), name.end(), '.') + 1;
    if (depth > max_depth) continue;
    rows.push_back({name, item.value()->name(), count(*item.value(), false)});
  }
  size_t wn = 4, wt = 4;
  for (auto& r : rows) {
    wn = std::max(wn, r.name.size());
    wt = std::max(wt, r.type.size());
  }
  std::ostringstream os;
  os << "  | " << std::left << std::setw(wn) << "Name"
     << " | " << std::setw(wt) << "Type"
     << " | Params\n";
  os << std::string(wn + wt + 20, '-') << '\n';
  for (size_t i = 0; i < rows.size(); ++i)
    os << std::right << std::setw(2) << i << "| " << std::left << std::setw(wn) << rows[i].name << " | "
       << std::setw(wt) << rows[i].type << " | " << std::right << std::setw(8) << human(rows[i].params) << '\n';
  os << std::string(wn + wt + 20, '-') << '\n';
  const int64_t total = count(module, false), trainable = count(module, true);
  double bytes = 0;
  for (const auto& p : unique_parameters(module)) bytes += static_cast<double>(p.numel() * p.element_size());
  os << std::left << std::setw(10) << human(trainable) << "Trainable params\n"
     << std::setw(10) << human(total - trainable) << "Non-trainable params\n"
     << std::setw(10) << human(total) << "Total params\n"
     << std::fixed << std::setprecision(3) << std::setw(10) << bytes / 1e6
     << "Total estimated model params size (MB)\n";
  return os.str();
}

void ModelSummary::on_fit_start(Trainer& t, LightningModule& m) {
  if (!t.is_global_zero()) return;
  std::string extra = t.strategy().describe_module(m);
  spdlog::info("Model summary:\n{}{}", summarize(m, max_depth_), extra);
}

}  // namespace volt
