#!/usr/bin/env python3
"""LlamaLM on the CPU: volt (bench_llm, bench/llm.cpp) beside the same model in plain PyTorch eager
(demos/llm/reference/llama_ref.py), measured side by side in one run, printed as one markdown table.

Both sides train the same shape on the same token windows (written here with torch.save, read by
bench_llm) with the same recipe: float32, AdamW with two param groups (lr 3e-4, weight decay 0.1 on
the 2-D Linear weights), LambdaLR warm-up (2 steps) + cosine, gradient clipping at 1.0, the same
intra-op threads per process. Runs: one process (all cores), DDP on 2 processes (gloo, a core each,
the global batch split between them), FSDP on 2 processes (FULL_SHARD, each decoder layer a unit)
where PyTorch's FSDP can run on the CPU. Step time: loop iteration to loop iteration, median after
the warm-up steps, max over ranks; tokens/s = global batch x block / step time. Each step is also
split into forward (with the loss), backward (with DDP's and FSDP's communication) and the rest
(clipping, optimizer, scheduler, loading). Each run is measured twice, with glibc's malloc as it
comes and with its mmap threshold pinned (MALLOC_ENV, the same for both frameworks): the step's large
tensors otherwise fault in fresh pages every step, and how many depends on each process's history.

usage: llm_cpu.py [--volt build/bench/bench_llm] [--runs single,ddp,fsdp] [--malloc default,pinned]
                  [--steps 30] [--warmup 5]
                  [--batch 8] [--block 256] [--vocab 8192] [--hidden 256] [--layers 4] [--heads 8]
                  [--kv_heads 2] [--tie 0] [--out results.jsonl]
Internal: llm_cpu.py --pt-run single|ddp|fsdp ... runs one PyTorch configuration (a rank with RANK set).
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "demos", "llm", "reference"))

import torch  # noqa: E402

import llama_ref  # noqa: E402

SHAPE_KEYS = ("batch", "block", "vocab", "hidden", "layers", "heads", "kv_heads", "tie")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pt_run(a):
    """One PyTorch configuration; rank 0 prints the JSON line."""
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    torch.set_num_threads(a.threads)
    if world > 1:
        import torch.distributed as dist
        dist.init_process_group("gloo", rank=rank, world_size=world)
    tokens = torch.load(a.batches)["tokens"]
    cfg = llama_ref.LlamaConfig(vocab_size=a.vocab, hidden_size=a.hidden, num_hidden_layers=a.layers,
                                num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                                max_position_embeddings=max(2048, a.block), tie_word_embeddings=bool(a.tie))
    torch.manual_seed(1)
    model = llama_ref.LlamaForCausalLM(cfg)
    n_params = llama_ref.num_params(model)
    net = model
    if a.pt_run == "ddp":
        from torch.nn.parallel import DistributedDataParallel
        net = DistributedDataParallel(model)
    elif a.pt_run == "fsdp":
        import functools

        from torch.distributed.fsdp import FullyShardedDataParallel
        from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
        policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={llama_ref.LlamaDecoderLayer})
        net = FullyShardedDataParallel(model, auto_wrap_policy=policy, device_id=torch.device("cpu"))
    opt = llama_ref.make_optimizer(net if a.pt_run == "fsdp" else model, 3e-4, 0.1, (0.9, 0.95), 1e-8)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: llama_ref.lr_lambda(s, 2, a.steps, 0.1))
    per_rank = a.batch // world
    times, fwd, bwd, rest, losses, marks = [], [], [], [], [], None

    def close(now):
        start, before, after = marks
        times.append(now - start)
        fwd.append(before - start)
        bwd.append(after - before)
        rest.append(now - after)

    net.train()
    for step in range(a.steps):
        now = time.perf_counter()
        if marks is not None:
            close(now)
        w = tokens[step % tokens.shape[0], rank * per_rank:(rank + 1) * per_rank]
        loss = llama_ref.LlamaForCausalLM.loss(net(w[:, :-1]), w[:, 1:])
        before = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        marks = (now, before, time.perf_counter())
        if a.pt_run == "fsdp":
            net.clip_grad_norm_(1.0)
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
    close(time.perf_counter())
    medians = torch.tensor([statistics.median(v[a.warmup:]) for v in (times, fwd, bwd, rest)], dtype=torch.float64)
    if world > 1:
        dist.all_reduce(medians, op=dist.ReduceOp.MAX)
        dist.destroy_process_group()
    step_s, fwd_s, bwd_s, rest_s = medians.tolist()
    if rank == 0:
        print(json.dumps(dict(framework="pytorch", strategy=a.pt_run, processes=world, threads=a.threads,
                              params=n_params, batch=a.batch, block=a.block, steps=len(times[a.warmup:]),
                              step_ms=step_s * 1e3, forward_ms=fwd_s * 1e3, backward_ms=bwd_s * 1e3,
                              rest_ms=rest_s * 1e3, tokens_per_s=a.batch * a.block / step_s, loss_first=losses[0],
                              loss_last=losses[-1], torch=torch.__version__)), flush=True)
    return 0


def last_json(text):
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return None


# glibc's malloc hands allocations above a dynamic threshold (at most 32 MB) to mmap and returns
# freed heap tops to the kernel, so each step faults in fresh pages for its large tensors. "pinned":
# both frameworks' processes run with the threshold fixed at 32 MB and no trimming, which keeps
# freed memory for the next step (both sides get the same environment).
MALLOC_ENV = {"default": {}, "pinned": {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(4 << 30)}}


def run_pytorch(a, run, world, threads, batches, malloc):
    args = [sys.executable, os.path.abspath(__file__), "--pt-run", run, "--threads", str(threads), "--batches", batches,
            "--steps", str(a.steps), "--warmup", str(a.warmup)]
    for k in SHAPE_KEYS:
        args += ["--" + k, str(getattr(a, k))]
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE=str(world), OMP_NUM_THREADS=str(threads), **MALLOC_ENV[malloc])
    procs = [subprocess.Popen(args, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(world)]
    outs = [p.communicate(timeout=3600) for p in procs]
    row = last_json(outs[0][0])
    if row is None or any(p.returncode for p in procs):
        err = " | ".join(o[1].strip().splitlines()[-1] if o[1].strip() else "exit %d" % p.returncode
                         for p, o in zip(procs, outs))
        return dict(framework="pytorch", strategy=run, processes=world, threads=threads, error=err, malloc=malloc)
    row["malloc"] = malloc
    return row


def run_volt(a, run, world, threads, batches, malloc):
    args = [a.volt, "--strategy", "single_device" if run == "single" else run, "--devices", str(world), "--threads",
            str(threads), "--batches", batches, "--steps", str(a.steps), "--warmup", str(a.warmup)]
    for k in SHAPE_KEYS:
        args += ["--" + k, str(getattr(a, k))]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), **MALLOC_ENV[malloc])
    p = subprocess.run(args, capture_output=True, text=True, timeout=3600, env=env)
    row = last_json(p.stdout)
    if row is None or p.returncode:
        tail = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "exit %d" % p.returncode
        return dict(framework="volt", strategy=run, processes=world, threads=threads, error=tail, malloc=malloc)
    row["malloc"] = malloc
    return row


def table(a, pairs, cores):
    print("\nLlamaLM on the CPU, %d cores: hidden %d, %d layers, %d heads (%d kv), vocab %d%s, global batch %d x "
          "block %d, fp32 AdamW + clipping + warm-up/cosine; median of %d steps after %d warm-up\n"
          % (cores, a.hidden, a.layers, a.heads, a.kv_heads, a.vocab, ", tied" if a.tie else "", a.batch, a.block,
             a.steps - a.warmup, a.warmup))
    print("| run | malloc | processes x threads | PyTorch %s (ms/step) | volt (ms/step) | PyTorch tokens/s | volt tokens/s | "
          "volt / PyTorch step time | forward, backward, rest (ms): PyTorch / volt |" % torch.__version__)
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")

    def cell(r, key, fmt):
        return fmt % r[key] if "error" not in r else "n/a"

    for run, (pt, vt) in pairs:
        ok = "error" not in pt and "error" not in vt
        ratio = "%.2fx" % (vt["step_ms"] / pt["step_ms"]) if ok else "-"
        split = " / ".join("%s, %s, %s" % tuple(cell(r, k, "%.0f") for k in ("forward_ms", "backward_ms", "rest_ms"))
                           for r in (pt, vt))
        print("| %s | %s | %d x %d | %s | %s | %s | %s | %s | %s |" % (
            run, pt["malloc"], pt["processes"], pt["threads"], cell(pt, "step_ms", "%.1f"), cell(vt, "step_ms", "%.1f"),
            cell(pt, "tokens_per_s", "%.0f"), cell(vt, "tokens_per_s", "%.0f"), ratio, split))
    errors = {}
    for run, (pt, vt) in pairs:
        for r in (pt, vt):
            if "error" in r:
                errors.setdefault("%s %s" % (r["framework"], run), r["error"])
    for what, err in errors.items():
        print("\n%s did not run: %s" % (what, err))
    params = next((r["params"] for _, p in pairs for r in p if "params" in r), None)
    if params:
        print("\nParameters: %.2f M." % (params / 1e6))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--volt", default=os.path.join(HERE, "..", "build", "bench", "bench_llm"))
    p.add_argument("--runs", default="single,ddp,fsdp")
    p.add_argument("--malloc", default="default,pinned", help="glibc malloc settings, each a set of rows: "
                   "default (glibc's own) and/or pinned (MALLOC_ENV)")
    p.add_argument("--out", default="")
    p.add_argument("--pt-run", default="")
    p.add_argument("--batches", default="")
    p.add_argument("--threads", type=int, default=0)
    for k, v in dict(steps=30, warmup=5, batch=8, block=256, vocab=8192, hidden=256, layers=4, heads=8, kv_heads=2,
                     tie=0).items():
        p.add_argument("--" + k, type=int, default=v)
    a = p.parse_args()
    if a.pt_run:
        return pt_run(a)
    cores = len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory(prefix="llm-bench-") as tmp:
        batches = os.path.join(tmp, "tokens.pt")
        g = torch.Generator().manual_seed(7)
        torch.save({"tokens": torch.randint(0, a.vocab, (a.steps, a.batch, a.block + 1), generator=g)}, batches)
        pairs = []
        for malloc in a.malloc.split(","):
            for run in a.runs.split(","):
                world = 1 if run == "single" else 2
                threads = max(1, cores // world)
                # Alternating the frameworks run by run keeps slow drifts of the machine out of the ratio.
                pt = run_pytorch(a, run, world, threads, batches, malloc)
                vt = run_volt(a, run, world, threads, batches, malloc)
                for r in (pt, vt):
                    print(json.dumps(r), flush=True)
                    if a.out:
                        with open(a.out, "a") as f:
                            f.write(json.dumps(r) + "\n")
                pairs.append((run, (pt, vt)))
    table(a, pairs, cores)
    return 0


if __name__ == "__main__":
    sys.exit(main())
