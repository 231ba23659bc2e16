// torch.save files built to exhaust the reader: a pickle nested 200,000 deep, and compressed
// records that declare far more bytes than the pickle says they hold. Each is a CheckpointError,
// never a crash or a multi-gigabyte allocation.
#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cstring>

#include "boring_model.h"
#include "checkpoint/checkpoint_support.h"
#include "volt/checkpoint/weights.h"

using namespace volt;
using namespace volt::testing;
using Catch::Matchers::Contains;

namespace {

/// A zip in torch.save's layout holding `records` (stored uncompressed).
std::string zip_of(const std::vector<std::pair<std::string, std::string>>& records) {
  std::string out;
  caffe2::serialize::PyTorchStreamWriter w([&](const void* d, size_t n) -> size_t {
    out.append(static_cast<const char*>(d), n);
    return n;
  });
  for (const auto& [name, bytes] : records) w.writeRecord(name, bytes.data(), bytes.size());
  w.writeEndOfFile();
  return out;
}

void put_le32(std::string& s, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

/// Marks the central-directory entry whose name ends with `suffix` as deflated, declaring
/// `inflated` bytes: what a re-compressed file of that much data looks like to a reader.
void declare_deflated(std::string& zip, const std::string& suffix, uint32_t inflated) {
  for (size_t at = zip.find("PK\x01\x02"); at != std::string::npos; at = zip.find("PK\x01\x02", at + 4)) {
    const size_t name_n = static_cast<uint8_t>(zip[at + 28]) | static_cast<uint8_t>(zip[at + 29]) << 8;
    const std::string name = zip.substr(at + 46, name_n);
    if (name.size() < suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    zip[at + 10] = 8;  // method: deflate
    zip[at + 11] = 0;
    put_le32(zip, at + 24, inflated);
    return;
  }
  FAIL("no zip entry ending with " << suffix);
}

}  // namespace

TEST_CASE("load_weights on a pickle nested 200,000 deep is a CheckpointError, not a crash", "[weights][hostile]") {
  const std::string dir = temp_dir("hostile-deep");
  // [[[[...]]]]: 200,000 EMPTY_LISTs, each APPENDed into the one below it.
  const int64_t depth = 200'000;
  std::string pkl = "\x80\x02";
  pkl += std::string(depth, ']');
  pkl += std::string(depth - 1, 'a');
  pkl += '.';
  const std::string zip = zip_of({{"data.pkl", pkl}});
  write_bytes(dir + "/deep.pt", zip.data(), zip.size());
  auto m = std::make_shared<BoringModel>();
  CHECK_THAT(checkpoint_error([&] { load_weights(*m, dir + "/deep.pt"); }),
             Contains(dir + "/deep.pt") && Contains("nested"));
}

TEST_CASE("a compressed torch.save record declaring more than its tensor holds is refused before it is inflated",
          "[weights][hostile]") {
  const std::string dir = temp_dir("hostile-inflate");
  c10::impl::GenericDict root(c10::StringType::get(), c10::AnyType::get());
  root.insert("head.bias", torch::ones({2}));
  const auto bytes = torch::pickle_save(root);
  const std::string plain(bytes.begin(), bytes.end());
  auto m = std::make_shared<BoringModel>();
  LoadWeightsOptions loose;
  loose.strict = false;
  write_bytes(dir + "/plain.pt", plain.data(), plain.size());
  CHECK(load_weights(*m, dir + "/plain.pt", loose).loaded == 1);  // the file as written loads

  SECTION("a storage record: 8 bytes of tensor, 300 MB declared") {
    std::string zip = plain;
    declare_deflated(zip, "data/0", 300'000'000);
    write_bytes(dir + "/storage.pt", zip.data(), zip.size());
    CHECK_THAT(checkpoint_error([&] { load_weights(*m, dir + "/storage.pt", loose); }),
               Contains(dir + "/storage.pt") && Contains("data/0") && Contains("300000000") && Contains("inflated"));
  }
  SECTION("data.pkl: 300 MB declared") {
    std::string zip = plain;
    declare_deflated(zip, "data.pkl", 300'000'000);
    write_bytes(dir + "/pickle.pt", zip.data(), zip.size());
    CHECK_THAT(checkpoint_error([&] { load_weights(*m, dir + "/pickle.pt", loose); }),
               Contains(dir + "/pickle.pt") && Contains("data.pkl") && Contains("inflated"));
  }
}

TEST_CASE("a sparse tensor in a torch.save file is named as sparse, not reported missing", "[weights][hostile]") {
  const std::string dir = temp_dir("sparse-weights");
  // {"w": torch._utils._rebuild_sparse_tensor()}: how torch.save pickles a sparse tensor (its
  // arguments left out: volt refuses it before looking at them).
  std::string pkl = "\x80\x02}(X";
  pkl += std::string("\x01\x00\x00\x00", 4);
  pkl += "wctorch._utils\n_rebuild_sparse_tensor\n)Ru.";
  const std::string zip = zip_of({{"data.pkl", pkl}});
  write_bytes(dir + "/sparse.pt", zip.data(), zip.size());
  auto m = std::make_shared<BoringModel>();
  CHECK_THAT(checkpoint_error([&] { load_weights(*m, dir + "/sparse.pt"); }),
             Contains("tensor 'w' is a sparse tensor") && Contains("to_dense"));
}
