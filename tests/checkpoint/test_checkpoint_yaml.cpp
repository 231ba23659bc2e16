// The YAML inside a checkpoint (a sharded manifest and its COMPLETE marker, a file's volt index) is
// read through the bounded loader: a crafted alias cycle or alias bomb is a CheckpointError naming
// the file, not a crash or a spin.
#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "boring_model.h"
#include "checkpoint_support.h"
#include "volt/checkpoint/checkpoint.h"
#include "volt/checkpoint/manifest.h"
#include "volt/checkpoint/state_io.h"

using namespace volt;
using namespace volt::testing;
using Catch::Matchers::Contains;

namespace {
/// 10^10 values once its aliases are expanded, in about 400 bytes.
std::string alias_bomb() {
  std::string text = "format: volt-sharded\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i <= 9; ++i) {
    const std::string p = "*a" + std::to_string(i - 1);
    text += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [" + p;
    for (int k = 1; k < 10; ++k) text += "," + p;
    text += "]\n";
  }
  return text;
}
}  // namespace

TEST_CASE("a sharded manifest with a self-referencing alias or an alias bomb is a CheckpointError", "[checkpoint]") {
  const std::string cycle = "format: volt-sharded\ncheckpoint: &c {x: [*c]}\n";
  // The marker's checksum matches: only the manifest's YAML is hostile.
  CHECK_THAT(
      checkpoint_error([&] { volt::detail::decode_manifest(cycle, volt::detail::encode_marker(1, cycle), "ck"); }),
      Contains("sharded checkpoint 'ck'") && Contains("manifest.yaml") && Contains("refers to a node it is part of"));
  const auto t0 = std::chrono::steady_clock::now();
  const std::string bomb = alias_bomb();
  CHECK_THAT(checkpoint_error([&] { volt::detail::decode_manifest(bomb, volt::detail::encode_marker(1, bomb), "ck"); }),
             Contains("manifest.yaml") && Contains("aliases are expanded"));
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 5.0);
  CHECK_THAT(checkpoint_error([&] { volt::detail::decode_manifest(cycle, "a: &a [*a]\n", "ck"); }),
             Contains("COMPLETE") && Contains("refers to a node it is part of"));
}

TEST_CASE("a checkpoint file whose volt index holds an alias cycle is a CheckpointError", "[checkpoint]") {
  const std::string path = temp_dir("ckpt-yaml") + "/a.ckpt";
  {
    caffe2::serialize::PyTorchStreamWriter zip(path);
    const std::string index = "format: volt\nmeta: &m {x: [*m]}\n";
    zip.writeRecord("volt/index.yaml", index.data(), index.size());
    zip.writeEndOfFile();
  }
  CHECK_THAT(checkpoint_error([&] { load_checkpoint_file(path); }),
             Contains(path) && Contains("refers to a node it is part of"));
}
