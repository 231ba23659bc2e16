#pragma once
/// `volt consolidate SHARDED_CHECKPOINT [-o FILE] [--overwrite]`: a sharded checkpoint folder into
/// one full checkpoint file, tensor by tensor. Internal to cli/.
#include <string>

namespace volt::detail {

/// The usage lines of consolidate (`program` is the command's name).
std::string consolidate_usage(const std::string& program);
/// Runs it on argv[2..]; returns 0, throws ConfigError for bad arguments.
int run_consolidate(int argc, char** argv, const std::string& program);

}  // namespace volt::detail
