#include "volt/checkpoint/tensor_dict_file.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include "volt/checkpoint/tensor_archive.h"
#include "volt/core/errors.h"

namespace volt {

void save_tensor_dict(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& entries) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [key, t] : entries) {
    if (!t.defined()) continue;
    VOLT_CHECK(!dict.contains(key), CheckpointError, "writing '", path, "': the key '", key, "' is given twice");
    dict.insert(key, t.detach().to(torch::kCPU));
  }
  std::string pickle;
  // tag_aggregates=false: a plain dict, as torch.save pickles one (no restore_type_tag global).
  torch::jit::Pickler pickler([&](const char* b, size_t n) { pickle.append(b, n); }, nullptr, nullptr, nullptr, nullptr,
                              /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(dict);
  pickler.stop();

  std::vector<char> bytes;
  caffe2::serialize::PyTorchStreamWriter zip([&](const void* data, size_t n) -> size_t {
    bytes.insert(bytes.end(), static_cast<const char*>(data), static_cast<const char*>(data) + n);
    return n;
  });
  zip.writeRecord("data.pkl", pickle.data(), pickle.size());
  // The pickle names storage i "i" (its persistent id): each one's whole bytes, as torch.save writes them.
  const std::vector<at::Tensor>& storages = pickler.tensorData();
  for (size_t i = 0; i < storages.size(); ++i) {
    const auto data = torch::jit::getWriteableTensorData(storages[i]);
    zip.writeRecord("data/" + std::to_string(i), data.data(), data.sizeInBytes());
  }
  zip.writeEndOfFile();
  detail::atomic_write(path, bytes.data(), bytes.size());
}

}  // namespace volt
