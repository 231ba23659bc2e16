#pragma once
// One rank of the LlamaLM parity runs (tests/demos/llm/test_llama_parity.cpp), inside
// volt_test_worker: `volt_test_worker --llama_parity=CONFIG`.
//
// CONFIG (YAML): `dir` (parity.py make's output: init.pt, batches.pt), `tag`, `model` (LlamaLMOptions)
// and `trainer` (TrainerOptions). The rank builds LlamaLM, loads `dir/init.pt` by name (strict), and
// fits on the batches of `dir/batches.pt` in order (global batch `b` of step `s`: each rank gets
// b / devices of its rows); with trainer.devices > 1 it self-launches the other ranks. Rank 0
// writes `dir/<tag>.losses` (each step's loss averaged over ranks, one per line) and
// `dir/<tag>.safetensors` (the strategy's full model state_dict after training).
#include <string>

namespace volt::testing {

/// Runs the rank; returns the process exit code (1 with the error on stderr).
int run_llama_parity(const std::string& config_path);

}  // namespace volt::testing
