// Precompiled header: the expensive, stable includes shared by every translation unit.
#pragma once
#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>
