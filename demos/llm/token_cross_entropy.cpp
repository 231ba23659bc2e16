#include "volt/demos/llm/token_cross_entropy.h"

#include <torch/autograd.h>
#include <torch/torch.h>

#include <algorithm>

#include "volt/core/errors.h"

namespace volt::demos {

namespace {

/// Rows of `vocab` float32 values in `chunk_bytes` (at least one).
int64_t chunk_rows(int64_t vocab, int64_t chunk_bytes) {
  return std::max<int64_t>(1, chunk_bytes / std::max<int64_t>(1, vocab * 4));
}

/// Whether an op that reads float32 and writes `out`'s dtype runs as one kernel here: on a GPU a
/// mixed-dtype elementwise kernel streams memory as a same-dtype one does, and saves a pass. On the
/// CPU LibTorch runs such loops element by element, unvectorized: with bf16 logits the whole loss
/// took 435 ms in single passes and 314 ms in two (F.cross_entropy: 335 ms; bench_llm_ops, 8 x 128
/// tokens, vocabulary 32,000, LibTorch 1.13 on 2 cores), so the CPU takes the two passes.
bool single_pass_casts(const torch::Tensor& out) { return out.scalar_type() == torch::kFloat || out.is_cuda(); }

/// Per-row losses -log p(label) [N] in float32 (rows with an ignored label: anything; masked by the
/// caller), and when `grad` is defined, exp(log p) into it with p(label) - 1 at the labels.
torch::Tensor chunked_rows(const torch::Tensor& logits, const torch::Tensor& targets, int64_t chunk_bytes,
                           const torch::Tensor& grad) {
  const int64_t n = logits.size(0), v = logits.size(1);
  const int64_t rows = chunk_rows(v, chunk_bytes);
  auto losses = torch::empty({n}, logits.options().dtype(torch::kFloat));
  for (int64_t r0 = 0; r0 < n; r0 += rows) {
    const int64_t c = std::min(rows, n - r0);
    const auto logp = torch::log_softmax(logits.narrow(0, r0, c).to(torch::kFloat), 1);
    const auto t = targets.narrow(0, r0, c).unsqueeze(1);
    const auto lt = logp.gather(1, t);  // [c, 1]
    auto rows_out = losses.narrow(0, r0, c);
    torch::neg_out(rows_out, lt.squeeze(1));
    if (grad.defined()) {
      auto g = grad.narrow(0, r0, c);
      if (single_pass_casts(g)) {
        torch::exp_out(g, logp);
      } else {
        g.copy_(logp.exp_());  // logp is done with (lt holds what the loss needs)
      }
      g.scatter_(1, t, torch::expm1(lt).to(g.scalar_type()));
    }
  }
  return losses;
}

struct Prepared {
  torch::Tensor logits, mask, targets;  // [N, V], [N] bool, [N] int64 (ignored rows: 0)
  torch::Tensor count;                  // the kept rows, a float32 scalar
};

Prepared prepare(const torch::Tensor& logits, const torch::Tensor& labels, int64_t ignore_index) {
  VOLT_CHECK(logits.dim() >= 1 && logits.is_floating_point(), DataError,
             "token_cross_entropy: logits must be a floating tensor [..., vocab], got ", logits.sizes(), " ",
             logits.scalar_type());
  VOLT_CHECK(labels.scalar_type() == torch::kLong, DataError, "token_cross_entropy: labels must be int64, got ",
             labels.scalar_type());
  const int64_t v = logits.size(-1);
  VOLT_CHECK(labels.sizes().equals(logits.sizes().slice(0, logits.dim() - 1)), DataError,
             "token_cross_entropy: labels ", labels.sizes(), " do not match logits ", logits.sizes(),
             " without their last (vocabulary) dimension");
  Prepared p;
  p.logits = logits.reshape({-1, v});
  VOLT_CHECK(labels.device() == logits.device(), DataError, "token_cross_entropy: labels are on ", labels.device(),
             ", logits on ", logits.device(), "; move the batch to the model's device");
  const auto flat = labels.reshape({-1});
  p.mask = flat != ignore_index;
  p.targets = flat.masked_fill(p.mask.logical_not(), 0);
  p.count = p.mask.sum().to(torch::kFloat);
  // On the CPU a bad label is named here (checking costs no device synchronization); on a GPU the
  // gather asserts, as F.cross_entropy does.
  if (!p.targets.is_cuda() && p.targets.numel() > 0) {
    const int64_t lo = p.targets.min().item<int64_t>(), hi = p.targets.max().item<int64_t>();
    VOLT_CHECK(lo >= 0 && hi < v, DataError, "token_cross_entropy: a label is ", lo < 0 ? lo : hi,
               ", outside the vocabulary [0, ", v, ") and not ignore_index (", ignore_index, ")");
  }
  return p;
}

/// The mean of `losses` over p's kept rows.
torch::Tensor mean_loss(const torch::Tensor& losses, const Prepared& p) {
  return torch::where(p.mask, losses, torch::zeros({}, losses.options())).sum() / p.count;
}

struct CrossEntropyFunction : public torch::autograd::Function<CrossEntropyFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& logits,
                               const torch::Tensor& labels, int64_t ignore_index, int64_t chunk_bytes) {
    const Prepared p = prepare(logits, labels, ignore_index);
    // fp16 cannot hold softmax's small probabilities before they are scaled (about 3e-5 at a
    // vocabulary of 32,000, below its normal range): its buffer is float32, rounded once when the
    // backward scales it, as F.cross_entropy's gradient is. bf16 has float32's exponent range.
    const auto buffer_dtype = logits.scalar_type() == torch::kHalf ? torch::kFloat : logits.scalar_type();
    auto grad = torch::empty(p.logits.sizes(), p.logits.options().dtype(buffer_dtype));
    const auto losses = chunked_rows(p.logits, p.targets, chunk_bytes, grad);
    ctx->save_for_backward({grad, p.mask, p.count});
    ctx->saved_data["shape"] = logits.sizes().vec();
    ctx->saved_data["dtype"] = static_cast<int64_t>(logits.scalar_type());
    ctx->saved_data["chunk_rows"] = chunk_rows(p.logits.size(1), chunk_bytes);
    return mean_loss(losses, p);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    VOLT_CHECK(!torch::GradMode::is_enabled(), TrainingError,
               "token_cross_entropy: a double backward (create_graph) is not supported: its gradient is computed in ",
               "the forward; use torch::nn::functional::cross_entropy for second derivatives");
    const auto saved = ctx->get_saved_variables();
    const auto& grad = saved[0];
    // g / count on kept rows, 0 on ignored ones (also when every row is ignored, where count is 0):
    // one pass over [N, V] into the logits' dtype.
    const auto per_token = grads[0].to(torch::kFloat) / saved[2];
    const auto scale = torch::where(saved[1], per_token, torch::zeros({}, per_token.options())).unsqueeze(1);
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    auto out = torch::empty(grad.sizes(), grad.options().dtype(dtype));
    if (single_pass_casts(out)) {
      torch::mul_out(out, grad, scale);
    } else {  // the CPU with reduced-precision logits: through one float32 chunk, reused
      const int64_t rows = std::min(grad.size(0), std::max<int64_t>(1, ctx->saved_data["chunk_rows"].toInt()));
      auto buf = torch::empty({rows, grad.size(1)}, grad.options().dtype(torch::kFloat));
      for (int64_t r0 = 0; r0 < grad.size(0); r0 += rows) {
        const int64_t c = std::min(rows, grad.size(0) - r0);
        auto chunk = buf.narrow(0, 0, c);
        out.narrow(0, r0, c).copy_(chunk.copy_(grad.narrow(0, r0, c)).mul_(scale.narrow(0, r0, c)));
      }
    }
    return {out.view(ctx->saved_data["shape"].toIntVector()), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor token_cross_entropy(const torch::Tensor& logits, const torch::Tensor& labels, int64_t ignore_index,
                                  int64_t chunk_bytes) {
  VOLT_CHECK(chunk_bytes > 0, ConfigError, "token_cross_entropy: chunk_bytes must be > 0, got ", chunk_bytes);
  if (torch::GradMode::is_enabled() && logits.requires_grad())
    return CrossEntropyFunction::apply(logits, labels, ignore_index, chunk_bytes);
  const Prepared p = prepare(logits, labels, ignore_index);
  return mean_loss(chunked_rows(p.logits, p.targets, chunk_bytes, torch::Tensor()), p);
}

}  // namespace volt::demos
