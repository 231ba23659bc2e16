#include "volt/data/dataset.h"

#include <algorithm>

namespace volt {

int64_t ShardInfo::shard_size(int64_t n, int64_t s, int64_t shards) { return n / shards + (s < n % shards ? 1 : 0); }

std::pair<int64_t, int64_t> ShardInfo::range(int64_t n) const {
  const int64_t shards = num_shards(), s = shard();
  const int64_t first = s * (n / shards) + std::min(s, n % shards);
  return {first, first + shard_size(n, s, shards)};
}

namespace {
class FunctionStream : public SampleStream {
 public:
  explicit FunctionStream(std::function<std::optional<Batch>()> fn) : fn_(std::move(fn)) {}
  std::optional<Batch> next() override { return fn_(); }

 private:
  std::function<std::optional<Batch>()> fn_;
};
}  // namespace

std::unique_ptr<SampleStream> SampleStream::from(std::function<std::optional<Batch>()> fn) {
  return std::make_unique<FunctionStream>(std::move(fn));
}

}  // namespace volt
