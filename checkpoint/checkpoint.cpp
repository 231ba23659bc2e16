#include "volt/checkpoint/checkpoint.h"

#include <torch/torch.h>

#include "volt/checkpoint/checkpoint_reader.h"
#include "volt/checkpoint/safetensors.h"
#include "volt/checkpoint/tensor_archive.h"
#include "volt/core/errors.h"

namespace volt {

namespace detail {

std::vector<std::pair<std::string, c10::IValue>> checkpoint_fields(const CheckpointHeader& header) {
  return {{"epoch", header.epoch},
          {"global_step", header.global_step},
          {"format_version", kCheckpointFormatVersion},
          {"volt_meta", YAML::Dump(header.meta)}};
}

YAML::Node checkpoint_index_meta(const CheckpointHeader& header) {
  YAML::Node m(YAML::NodeType::Map);
  m["epoch"] = header.epoch;
  m["global_step"] = header.global_step;
  m["checkpoint"] = YAML::Clone(header.meta);
  return m;
}

}  // namespace detail

void save_checkpoint_file(const Checkpoint& ckpt, const std::string& path) {
  ArchiveWriter w(path);
  for (const auto& [k, v] : ckpt.state_dict) w.add(kModelSection, k, v);
  for (const auto& [k, v] : ckpt.optimizer_state) w.add(kOptimizerSection, k, v);
  for (const auto& [k, v] : ckpt.rng_states) w.add(kRngSection, k, v);
  for (const auto& [k, v] : ckpt.extra_tensors) w.add(kExtraTensorSection, k, v);
  w.commit(detail::checkpoint_fields(ckpt), detail::checkpoint_index_meta(ckpt));
}

Checkpoint load_checkpoint_file(const std::string& path) {
  CheckpointReader r(path);
  Checkpoint c;
  c.epoch = r.epoch();
  c.global_step = r.global_step();
  c.meta = YAML::Clone(r.meta());
  for (const auto& n : r.names(kModelSection)) c.state_dict[n] = r.read(kModelSection, n);
  for (const auto& n : r.names(kOptimizerSection)) c.optimizer_state[n] = r.read(kOptimizerSection, n);
  for (const auto& n : r.names(kRngSection)) c.rng_states[n] = r.read(kRngSection, n);
  for (const auto& n : r.names(kExtraTensorSection)) c.extra_tensors[n] = r.read(kExtraTensorSection, n);
  return c;
}

uint64_t consolidate_checkpoint(const std::string& src, const std::string& dst, WeightsFormat format) {
  CheckpointReader r(src);
  if (format == WeightsFormat::Safetensors) {
    std::map<std::string, SafetensorsWriter::Spec> specs;
    for (const auto& n : r.names(kModelSection)) {
      const ShardedTensor& t = r.tensor(kModelSection, n);
      specs[n] = {t.dtype, t.shape};
    }
    SafetensorsWriter w(dst, specs,
                        {{"format", "pt"},
                         {"epoch", std::to_string(r.epoch())},
                         {"global_step", std::to_string(r.global_step())},
                         {"consolidated_from", src}});
    for (const auto& n : r.names(kModelSection)) w.add(n, r.read(kModelSection, n));  // one tensor at a time
    return w.commit();
  }
  CheckpointHeader header;
  header.epoch = r.epoch();
  header.global_step = r.global_step();
  header.meta = YAML::Clone(r.meta());
  header.meta["consolidated_from"] = src;
  ArchiveWriter w(dst);
  for (const char* section : {kModelSection, kOptimizerSection, kRngSection, kExtraTensorSection})
    for (const auto& n : r.names(section)) w.add(section, n, r.read(section, n));  // one tensor in memory at a time
  w.commit(detail::checkpoint_fields(header), detail::checkpoint_index_meta(header));
  return w.bytes_written();
}

}  // namespace volt
