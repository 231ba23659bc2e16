#pragma once
/// Stateful: an object whose state a checkpoint saves and a resumed run restores (loop progress, LR
/// schedulers, callbacks, the precision's loss scaler), as torchtitan's CheckpointManager sees its
/// objects. The state is YAML; the CheckpointConnector stores it in the checkpoint metadata under
/// the key it registered the object with.
///
/// Ownership: implementations own their state; whoever registers them keeps them alive.
/// Thread-safety: as the implementing object's (the Trainer's parts: the training thread only).
#include <yaml-cpp/yaml.h>

namespace volt {

class Stateful {
 public:
  virtual ~Stateful() = default;
  /// YAML state saved in the checkpoint metadata; load_state_dict restores it.
  virtual YAML::Node state_dict() const = 0;
  virtual void load_state_dict(const YAML::Node& state) = 0;
};

}  // namespace volt
