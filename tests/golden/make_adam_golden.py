# Golden values for tests/optim/test_fused_adam.cpp: three steps of torch.optim.AdamW (amsgrad) and
# Adam (L2 weight decay) on 8 fixed values, with Debian's python3-torch 1.13 (single-tensor path).
# Run: python3 tests/golden/make_adam_golden.py
import torch
torch.set_printoptions(precision=9)
def grads(k):
    i = torch.arange(8, dtype=torch.float32)
    # The last two are tiny, so that eps (1e-6) weighs in their denominators.
    scale = torch.tensor([1, 1, 1, 1, 1, 1, 1e-6, 1e-6], dtype=torch.float32)
    return torch.sin(i * 0.7 + k) * (i.remainder(3) + 1) * scale
for name, cls, kw in [("AdamW", torch.optim.AdamW, dict(lr=0.05, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1, amsgrad=True)),
                      ("Adam", torch.optim.Adam, dict(lr=0.05, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1, amsgrad=False))]:
    p = torch.tensor([0.5, -1.25, 2.0, 0.0, -0.75, 3.0, 1e-3, -2.5], requires_grad=True)
    opt = cls([p], foreach=False, **kw)
    for k in range(1, 4):
        p.grad = grads(k)
        opt.step()
    st = opt.state[p]
    print(name, "p", ", ".join("%.9ef" % v for v in p.detach().tolist()))
    print(name, "m", ", ".join("%.9ef" % v for v in st["exp_avg"].tolist()))
    print(name, "v", ", ".join("%.9ef" % v for v in st["exp_avg_sq"].tolist()))
