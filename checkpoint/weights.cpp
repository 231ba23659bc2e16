#include "volt/checkpoint/weights.h"

#include <spdlog/spdlog.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "volt/checkpoint/checkpoint.h"
#include "volt/checkpoint/checkpoint_reader.h"
#include "volt/checkpoint/safetensors.h"
#include "volt/checkpoint/torch_save.h"
#include "volt/core/errors.h"

namespace volt {

namespace fs = std::filesystem;

namespace {

// Longer lists are cut: a model of another architecture would otherwise print thousands of lines.
constexpr size_t kListedNames = 20;

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

std::string shape_text(c10::IntArrayRef shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

/// A weights file, whatever its format: its tensor names, their dtype and shape, and a reader.
struct Source {
  std::string format;
  std::vector<std::string> names;
  std::function<std::pair<at::ScalarType, std::vector<int64_t>>(const std::string&)> info;
  std::function<torch::Tensor(const std::string&)> read;
  /// Names start with this in the file but are meant without it (a Lightning checkpoint's "state_dict.").
  std::string wrapper;
};

Source volt_source(const std::string& path) {
  auto r = std::make_shared<CheckpointReader>(path);
  Source s;
  s.format = "volt (" + r->format() + ")";
  s.names = r->names(kModelSection);
  s.info = [r](const std::string& n) {
    const ShardedTensor& t = r->tensor(kModelSection, n);
    return std::make_pair(t.dtype, t.shape);
  };
  s.read = [r](const std::string& n) { return r->read(kModelSection, n); };
  return s;
}

Source torch_save_source(const std::string& path, const LoadWeightsOptions& o) {
  auto r = std::make_shared<TorchSaveReader>(path);
  Source s;
  s.format = "torch.save";
  s.names = r->names();
  s.info = [r](const std::string& n) {
    const auto& i = r->info(n);
    return std::make_pair(i.dtype, i.shape);
  };
  s.read = [r](const std::string& n) { return r->read(n); };
  // A Lightning checkpoint: the model is its "state_dict" (unless the prefix names it itself).
  if (r->top_level_dicts().count("state_dict") && !starts_with(o.prefix, "state_dict.")) s.wrapper = "state_dict.";
  return s;
}

Source torchscript_source(const std::string& path) {
  std::map<std::string, torch::Tensor> tensors;
  std::vector<std::string> names;
  try {
    torch::jit::Module m = torch::jit::load(path, torch::kCPU);
    for (const auto& p : m.named_parameters(/*recurse=*/true)) {
      tensors[p.name] = p.value;
      names.push_back(p.name);
    }
    for (const auto& b : m.named_buffers(/*recurse=*/true)) {
      tensors[b.name] = b.value;
      names.push_back(b.name);
    }
  } catch (const c10::Error& e) {
    throw CheckpointError(detail::str_cat(
        "TorchScript archive '", path, "' cannot be loaded: ", std::string(e.what_without_backtrace()).substr(0, 300)));
  }
  auto shared = std::make_shared<std::map<std::string, torch::Tensor>>(std::move(tensors));
  Source s;
  s.format = "torchscript";
  s.names = std::move(names);
  s.info = [shared](const std::string& n) {
    const torch::Tensor& t = shared->at(n);
    return std::make_pair(t.scalar_type(), t.sizes().vec());
  };
  s.read = [shared](const std::string& n) { return shared->at(n); };
  return s;
}

Source safetensors_source(const std::string& path) {
  auto r = std::make_shared<SafetensorsReader>(path);
  Source s;
  s.format = "safetensors";
  s.names = r->names();
  s.info = [r](const std::string& n) {
    const SafetensorsEntry& e = r->entry(n);
    return std::make_pair(e.dtype, e.shape);
  };
  s.read = [r](const std::string& n) { return r->read(n); };
  return s;
}

/// Recognises the format from the first bytes (and, for a zip, its records).
Source open_source(const std::string& path, const LoadWeightsOptions& o) {
  VOLT_CHECK(fs::exists(path), CheckpointError, "weights file '", path, "' does not exist");
  if (fs::is_directory(path)) return volt_source(path);  // a sharded checkpoint, or an error saying it is not
  unsigned char head[9] = {};
  std::streamsize got = 0;
  {
    std::ifstream in(path, std::ios::binary);
    VOLT_CHECK(in.good(), CheckpointError, "cannot open weights file '", path, "'");
    in.read(reinterpret_cast<char*>(head), sizeof head);
    got = in.gcount();
  }
  VOLT_CHECK(got > 0, CheckpointError, "weights file '", path, "' is empty");
  if (got >= 4 && head[0] == 'P' && head[1] == 'K' && head[2] == 3 && head[3] == 4) {
    const std::vector<std::string> records = detail::zip_records(path);
    auto has = [&](const std::string& r) { return std::find(records.begin(), records.end(), r) != records.end(); };
    if (has("volt/index.yaml")) return volt_source(path);
    if (has("constants.pkl") ||
        std::any_of(records.begin(), records.end(), [](const std::string& r) { return starts_with(r, "code/"); }))
      return torchscript_source(path);
    return torch_save_source(path, o);
  }
  VOLT_CHECK(head[0] != 0x80, CheckpointError, "weights file '", path,
             "' is in torch.save's legacy (non-zip) format, which volt does not read; save it again in the zip "
             "format, the default since PyTorch 1.6: in Python, torch.save(torch.load(old_path), new_path) "
             "(or pass _use_new_zipfile_serialization=True)");
  if (got == 9 && head[8] == '{') return safetensors_source(path);
  throw CheckpointError(detail::str_cat("'", path,
                                        "' is not a weights file volt recognises: expected a volt checkpoint (a file "
                                        "or a sharded folder), a torch.save zip file, a TorchScript archive "
                                        "(torch.jit.save, or LibTorch's torch::save) or a safetensors file"));
}

/// "  <title>: a, b, c, ... and N more\n" (nothing for an empty list).
std::string listing(const std::string& title, const std::vector<std::string>& items) {
  if (items.empty()) return "";
  std::string s = "\n  " + title + " (" + std::to_string(items.size()) + "): ";
  for (size_t i = 0; i < items.size() && i < kListedNames; ++i) s += (i ? ", " : "") + items[i];
  if (items.size() > kListedNames) s += ", ... and " + std::to_string(items.size() - kListedNames) + " more";
  return s;
}

/// A prefix that would make the names agree, when most of the mismatch is one.
std::string prefix_hint(const std::vector<std::string>& missing, const std::vector<std::string>& unexpected,
                        const std::string& prefix) {
  if (missing.empty() || unexpected.empty()) return "";
  const std::set<std::string> miss(missing.begin(), missing.end()), unexp(unexpected.begin(), unexpected.end());
  std::map<std::string, size_t> extra, lacking;  // file names with more in front / with less in front
  for (const auto& u : unexpected)
    for (size_t p = u.find('.'); p != std::string::npos; p = u.find('.', p + 1))
      if (miss.count(u.substr(p + 1))) ++extra[u.substr(0, p + 1)];
  for (const auto& m : missing)
    for (size_t p = m.find('.'); p != std::string::npos; p = m.find('.', p + 1))
      if (unexp.count(m.substr(p + 1))) ++lacking[m.substr(0, p + 1)];
  auto best = [](const std::map<std::string, size_t>& c) {
    return std::max_element(c.begin(), c.end(), [](auto& a, auto& b) { return a.second < b.second; });
  };
  if (!extra.empty() && best(extra)->second * 2 >= missing.size())
    return "\n  hint: the file's names are the module's with '" + best(extra)->first + "' in front: pass prefix '" +
           prefix + best(extra)->first + "'";
  if (!lacking.empty() && best(lacking)->second * 2 >= missing.size())
    return "\n  hint: the module's names are the file's with '" + best(lacking)->first +
           "' in front: load into that submodule instead";
  return "";
}

}  // namespace

LoadWeightsReport load_weights(torch::nn::Module& module, const std::string& path, const LoadWeightsOptions& options) {
  const Source src = open_source(path, options);
  LoadWeightsReport report;
  report.format = src.format;
  const std::string strip = src.wrapper + options.prefix;

  std::map<std::string, std::string> file_name;  // the module's name -> the file's
  for (const auto& n : src.names) {
    if (!starts_with(n, strip)) {
      ++report.skipped;
      continue;
    }
    file_name[n.substr(strip.size())] = n;
  }
  if (!options.prefix.empty() && file_name.empty()) {
    std::vector<std::string> some(src.names.begin(), src.names.begin() + std::min<size_t>(src.names.size(), 5));
    for (auto& n : some) n = "'" + n.substr(starts_with(n, src.wrapper) ? src.wrapper.size() : 0) + "'";
    throw CheckpointError(detail::str_cat("no tensor name in '", path, "' (", src.format, ") starts with prefix '",
                                          options.prefix, "'", listing("its names begin", some)));
  }

  struct Target {
    std::string name;
    torch::Tensor tensor;
  };
  std::vector<Target> matched;
  std::vector<std::string> missing_text, mismatched_text, unexpected_text;
  std::set<std::string> in_module;
  // A tensor registered under several names (tied weights) needs only one of them in the file.
  std::map<const c10::TensorImpl*, std::vector<std::string>> names_of;
  for (const auto& p : module.named_parameters(/*recurse=*/true))
    names_of[p.value().unsafeGetTensorImpl()].push_back(p.key());
  auto alias_in_file = [&](const std::string& name, const torch::Tensor& t) {
    auto it = names_of.find(t.unsafeGetTensorImpl());
    if (it == names_of.end()) return false;
    for (const auto& other : it->second)
      if (other != name && file_name.count(other)) return true;
    return false;
  };
  auto consider = [&](const std::string& name, const torch::Tensor& t) {
    if (!t.defined() || !in_module.insert(name).second) return;
    auto it = file_name.find(name);
    if (it == file_name.end()) {
      if (alias_in_file(name, t)) return;
      report.missing.push_back(name);
      missing_text.push_back(name + " " + shape_text(t.sizes()));
      return;
    }
    const auto info = src.info(it->second);
    if (info.second != t.sizes().vec()) {
      report.mismatched.push_back(name);
      mismatched_text.push_back(name + ": file " + shape_text(info.second) + ", module " + shape_text(t.sizes()));
      return;
    }
    if (info.first != t.scalar_type())
      report.converted.push_back(name + " (" + c10::toString(info.first) + " -> " + c10::toString(t.scalar_type()) +
                                 ")");
    matched.push_back({name, t});
  };
  for (const auto& p : module.named_parameters(/*recurse=*/true)) consider(p.key(), p.value());
  for (const auto& b : module.named_buffers(/*recurse=*/true)) consider(b.key(), b.value());
  for (const auto& [name, fname] : file_name)
    if (!in_module.count(name)) {
      report.unexpected.push_back(name);
      const auto info = src.info(fname);
      unexpected_text.push_back(name + " " + shape_text(info.second));
    }

  const bool clean = report.missing.empty() && report.unexpected.empty() && report.mismatched.empty();
  if (!clean) {
    const std::string details = listing("missing (in the module, not in the file)", missing_text) +
                                listing("unexpected (in the file, not in the module)", unexpected_text) +
                                listing("shape mismatch", mismatched_text) +
                                prefix_hint(report.missing, report.unexpected, options.prefix);
    const std::string head =
        detail::str_cat("weights '", path, "' (", src.format, (strip.empty() ? "" : ", names under '" + strip + "'"),
                        ") and the module differ: ", report.missing.size(), " missing, ", report.unexpected.size(),
                        " unexpected, ", report.mismatched.size(), " of another shape");
    VOLT_CHECK(!options.strict, CheckpointError, head, details,
               "\n  (strict: nothing was loaded; pass strict: false to load the tensors that match)");
    spdlog::warn("{}; loading the {} that match{}", head, matched.size(), details);
  }
  torch::NoGradGuard no_grad;
  for (const Target& t : matched) {
    t.tensor.copy_(src.read(file_name.at(t.name)));
    ++report.loaded;
  }
  if (!report.converted.empty())
    spdlog::info("weights '{}': {} tensors cast to the module's dtype{}", path, report.converted.size(),
                 listing("cast", report.converted));
  return report;
}

uint64_t save_safetensors(const torch::nn::Module& module, const std::string& path,
                          std::map<std::string, std::string> metadata) {
  if (!metadata.count("format")) metadata["format"] = "pt";
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& p : module.named_parameters(/*recurse=*/true))
    if (p.value().defined()) tensors[p.key()] = p.value();
  for (const auto& b : module.named_buffers(/*recurse=*/true))
    if (b.value().defined()) tensors[b.key()] = b.value();
  return save_safetensors(tensors, path, metadata);
}

}  // namespace volt
