# Golden values for tests/module/test_lr_scheduler.cpp: the learning rates torch.optim.lr_scheduler
# sets after 0, 1, 2, ... scheduler steps, with Debian's python3-torch 1.13. Row k of each table is
# [lr of group 0, lr of group 1] after k calls to step(). Prints C++ initializers to paste.
# Run: /usr/bin/python3 tests/golden/make_lr_golden.py
import math
import torch
from torch.optim.lr_scheduler import CosineAnnealingLR, LambdaLR, StepLR


def optimizer(base_lrs):
    groups = [{"params": [torch.nn.Parameter(torch.zeros(2))], "lr": lr} for lr in base_lrs]
    return torch.optim.SGD(groups, lr=base_lrs[0])


def table(make, base_lrs, steps):
    opt = optimizer(base_lrs)
    sched = make(opt)
    rows = []
    for _ in range(steps + 1):
        rows.append([g["lr"] for g in opt.param_groups])
        opt.step()
        sched.step()
    return rows


def emit(name, rows):
    body = ",\n".join("    {" + ", ".join("%.17g" % v for v in r) + "}" for r in rows)
    print("// %s\nconst std::vector<std::vector<double>> %s = {\n%s};" % (name, name, body))


TWO = [0.1, 0.03]
emit("kStepLR_3_0p1", table(lambda o: StepLR(o, step_size=3, gamma=0.1), TWO, 9))
emit("kStepLR_2_0p5", table(lambda o: StepLR(o, step_size=2, gamma=0.5), TWO, 7))
# A linear warm-up over 4 steps, then constant (volt's LambdaLR takes the same function).
emit("kLambdaWarmup", table(lambda o: LambdaLR(o, lambda e: min(1.0, (e + 1) / 4.0)), TWO, 7))
emit("kLambdaExp", table(lambda o: LambdaLR(o, lambda e: 0.95 ** e), TWO, 6))
# eta_min = 0 with two groups; volt's eta_min is a factor of each group's base lr, PyTorch's an
# absolute value, so a non-zero eta_min is compared on one group (0.01 = 0.1 * base 0.1).
emit("kCosine_5", table(lambda o: CosineAnnealingLR(o, T_max=5), TWO, 5))
emit("kCosine_4_eta", table(lambda o: CosineAnnealingLR(o, T_max=4, eta_min=0.01), [0.1], 4))
# Past T_max PyTorch's cosine rises again (it is periodic); volt holds eta_min there. For reference:
past = table(lambda o: CosineAnnealingLR(o, T_max=4, eta_min=0.01), [0.1], 6)
print("// PyTorch past T_max (not volt's behaviour): %s" % ", ".join("%.17g" % r[0] for r in past[5:]))
