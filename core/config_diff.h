#pragma once
/// The first difference between two configs, for messages that name the key (the ranks of one job
/// must run one config: distributed/rendezvous.h, trainer/config_agreement.h).
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>

namespace volt::detail {

/// The first key at which `mine` and `theirs` differ, as "config key 'trainer.max_steps' is '40' on
/// rank R but '60' on rank 0", or "" when they are equal (maps compared key by key, whatever their
/// order). Keys are compared in `theirs`' order, then the keys only `mine` has.
std::string first_difference(const YAML::Node& mine, const YAML::Node& theirs, int64_t rank,
                             const std::string& prefix = "");

}  // namespace volt::detail
