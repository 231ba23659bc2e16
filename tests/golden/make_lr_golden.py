# Golden values for tests/optim/test_lr_scheduler*.cpp: the learning rates (and, for OneCycleLR, the
# momenta) torch.optim.lr_scheduler sets after 0, 1, 2, ... scheduler steps, with Debian's
# python3-torch 1.13. Row k of each table is [value of group 0, value of group 1] after k calls to
# step(). Prints C++ initializers to paste.
# Run: /usr/bin/python3 tests/golden/make_lr_golden.py
import warnings

import torch
from torch.optim.lr_scheduler import (CosineAnnealingLR, CosineAnnealingWarmRestarts, ExponentialLR, LambdaLR,
                                      LinearLR, MultiStepLR, OneCycleLR, ReduceLROnPlateau, SequentialLR, StepLR)

warnings.simplefilter("ignore")  # "lr_scheduler.step() before optimizer.step()" and the like


def optimizer(base_lrs, kind="sgd"):
    groups = [{"params": [torch.nn.Parameter(torch.zeros(2))], "lr": lr} for lr in base_lrs]
    if kind == "adam":
        return torch.optim.Adam(groups, lr=base_lrs[0], betas=(0.9, 0.999))
    return torch.optim.SGD(groups, lr=base_lrs[0], momentum=0.9)


def run(make, base_lrs, steps, kind="sgd", key="lr"):
    opt = optimizer(base_lrs, kind)
    sched = make(opt)
    lrs, moms = [], []
    for k in range(steps + 1):
        lrs.append([g["lr"] for g in opt.param_groups])
        moms.append([g["betas"][0] if "betas" in g else g["momentum"] for g in opt.param_groups])
        if k < steps:
            opt.step()
            sched.step()
    return lrs, moms


def table(make, base_lrs, steps, kind="sgd"):
    return run(make, base_lrs, steps, kind)[0]


def emit(name, rows, comment=None):
    body = ",\n".join("    {" + ", ".join("%.17g" % v for v in r) + "}" for r in rows)
    if comment:
        print("// " + comment)
    print("const Table %s = {\n%s};" % (name, body))


def emit_values(name, values):
    print("const std::vector<double> %s = {%s};" % (name, ", ".join("%.17g" % v for v in values)))


TWO = [0.1, 0.03]

print("// ---- test_lr_scheduler.cpp")
emit("kStepLR_3_0p1", table(lambda o: StepLR(o, step_size=3, gamma=0.1), TWO, 9))
emit("kStepLR_2_0p5", table(lambda o: StepLR(o, step_size=2, gamma=0.5), TWO, 7))
emit("kMultiStep", table(lambda o: MultiStepLR(o, milestones=[2, 5], gamma=0.1), TWO, 8), "milestones [2, 5], gamma 0.1")
emit("kMultiStepRepeated", table(lambda o: MultiStepLR(o, milestones=[4, 1, 4], gamma=0.5), TWO, 6),
     "milestones [4, 1, 4] (unsorted, 4 twice: gamma^2 there), gamma 0.5")
emit("kExponential", table(lambda o: ExponentialLR(o, gamma=0.9), TWO, 8))
emit("kLinearDefault", table(lambda o: LinearLR(o), TWO, 8), "LinearLR defaults: 1/3 -> 1 over 5")
emit("kLinearDecay", table(lambda o: LinearLR(o, start_factor=1.0, end_factor=0.1, total_iters=4), TWO, 6))
# A linear warm-up over 4 steps, then constant (volt's LambdaLR takes the same function).
emit("kLambdaWarmup", table(lambda o: LambdaLR(o, lambda e: min(1.0, (e + 1) / 4.0)), TWO, 7))
emit("kLambdaExp", table(lambda o: LambdaLR(o, lambda e: 0.95 ** e), TWO, 6))
emit("kLambdaPerGroup", table(lambda o: LambdaLR(o, [lambda e: 1.0 / (e + 1), lambda e: 0.5 ** e]), TWO, 5))
emit("kCosine_5", table(lambda o: CosineAnnealingLR(o, T_max=5), TWO, 5))
# Past T_max the cosine goes on (period 2 * T_max); steps 5 and 13 take PyTorch's special branch.
emit("kCosine_4_eta", table(lambda o: CosineAnnealingLR(o, T_max=4, eta_min=0.001), TWO, 17),
     "T_max 4, eta_min 0.001, 17 steps")
emit("kWarmRestarts_3", table(lambda o: CosineAnnealingWarmRestarts(o, T_0=3, eta_min=0.001), TWO, 10),
     "T_0 3, T_mult 1, eta_min 0.001")
emit("kWarmRestarts_2x2", table(lambda o: CosineAnnealingWarmRestarts(o, T_0=2, T_mult=2), TWO, 15),
     "T_0 2, T_mult 2: restarts at 2, 6, 14")

print("// ---- test_one_cycle_lr.cpp")
lrs, moms = run(lambda o: OneCycleLR(o, max_lr=[0.1, 0.05], total_steps=10), TWO, 10)
emit("kOneCycleCos", lrs, "SGD(momentum 0.9), max_lr [0.1, 0.05], total_steps 10, the other arguments default")
emit("kOneCycleCosMomentum", moms)
lrs, moms = run(lambda o: OneCycleLR(o, max_lr=0.2, epochs=3, steps_per_epoch=4, pct_start=0.25,
                                     anneal_strategy="linear", three_phase=True, base_momentum=0.8,
                                     max_momentum=[0.9, 0.95], div_factor=10.0, final_div_factor=100.0),
                TWO, 12, kind="adam")
emit("kOneCycleLinear3", lrs, "Adam, max_lr 0.2, 3 epochs x 4 steps, pct_start 0.25, linear, three_phase, "
     "base_momentum 0.8, max_momentum [0.9, 0.95], div_factor 10, final_div_factor 100")
emit("kOneCycleLinear3Beta1", moms)
lrs, moms = run(lambda o: OneCycleLR(o, max_lr=0.1, total_steps=6, cycle_momentum=False, pct_start=0.5), TWO, 6)
emit("kOneCycleNoMomentum", lrs, "max_lr 0.1, total_steps 6, pct_start 0.5, cycle_momentum False (momentum stays 0.9)")
assert all(m == [0.9, 0.9] for m in moms)
opt = optimizer(TWO)
s = OneCycleLR(opt, max_lr=0.1, total_steps=6)
for _ in range(6):
    s.step()
try:
    s.step()
    raise SystemExit("OneCycleLR did not raise past total_steps")
except ValueError as e:
    print("// OneCycleLR, total_steps 6: the 7th step() raises: %s" % e)

print("// ---- test_plateau_lr.cpp")


def plateau(metrics, **kw):
    opt = optimizer(TWO)
    s = ReduceLROnPlateau(opt, **kw)
    rows = [[g["lr"] for g in opt.param_groups]]
    for m in metrics:
        s.step(m)
        rows.append([g["lr"] for g in opt.param_groups])
    return rows


MIN_METRICS = [1.0, 0.9, 0.95, 0.91, 0.92, 0.89, 0.8999, 0.9, 0.7, 0.71, 0.72, 0.73, 0.74, 0.75, 0.76, 0.77,
               0.78, 0.79, 0.8, 0.81]
emit_values("kPlateauMinMetrics", MIN_METRICS)
emit("kPlateauMin", plateau(MIN_METRICS, mode="min", factor=0.5, patience=2, cooldown=1, min_lr=[0.01, 0.005]),
     "mode min, factor 0.5, patience 2, threshold 1e-4 rel, cooldown 1, min_lr [0.01, 0.005]")
MAX_METRICS = [0.5, 0.55, 0.65, 0.7, 0.74, 0.8, 0.79, 0.85, 0.92, 0.93, 0.94, 0.95, 0.96, 0.97]
emit_values("kPlateauMaxMetrics", MAX_METRICS)
emit("kPlateauMax", plateau(MAX_METRICS, mode="max", factor=0.3, patience=1, threshold=0.1, threshold_mode="abs",
                            min_lr=0.004),
     "mode max, factor 0.3, patience 1, threshold 0.1 abs, cooldown 0, min_lr 0.004")
EPS_METRICS = [1.0, 1.0, 1.0, 1.0, 1.0]
emit("kPlateauEps", plateau(EPS_METRICS, mode="min", factor=0.5, patience=0, min_lr=[0.06, 0.03 - 5e-9]),
     "metric 1.0 five times, patience 0, factor 0.5, min_lr [0.06, 0.03 - 5e-9]: a reduction below eps "
     "(1e-8) is skipped")

print("// ---- test_sequential_lr.cpp")


def warmup_cosine(o):
    warm = LinearLR(o, start_factor=0.1, total_iters=3)
    cos = CosineAnnealingLR(o, T_max=6, eta_min=0.001)
    return SequentialLR(o, schedulers=[warm, cos], milestones=[3])


emit("kWarmupCosine", table(warmup_cosine, TWO, 12),
     "LinearLR(start_factor 0.1, total_iters 3) then CosineAnnealingLR(T_max 6, eta_min 0.001), milestones [3]")


def three(o):
    a = LinearLR(o, start_factor=0.5, total_iters=2)
    b = ExponentialLR(o, gamma=0.9)
    c = StepLR(o, step_size=2, gamma=0.5)
    return SequentialLR(o, schedulers=[a, b, c], milestones=[2, 5])


emit("kSequentialThree", table(three, TWO, 10),
     "LinearLR(0.5, total_iters 2), ExponentialLR(0.9), StepLR(2, 0.5), milestones [2, 5]")
