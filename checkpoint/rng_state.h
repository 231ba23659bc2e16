#pragma once
/// The default random generators' states, saved in checkpoints (one set per rank) so a resumed run
/// draws the same dropout masks and random numbers as an uninterrupted one. The CPU state is the
/// ByteTensor Python's torch.get_rng_state() returns.
#include <torch/types.h>

#include <map>
#include <string>

namespace volt {

/// "cpu", plus "cuda" (the generator of `device`) when `device` is a CUDA device.
std::map<std::string, torch::Tensor> capture_rng_states(const torch::Device& device);
/// Restores what capture_rng_states returned; keys that are absent are left alone.
void restore_rng_states(const std::map<std::string, torch::Tensor>& states, const torch::Device& device);

}  // namespace volt
