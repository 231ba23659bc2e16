// Precompiled header: the expensive, stable includes shared by every translation unit.
#pragma once
#include <torch/torch.h>
#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>
