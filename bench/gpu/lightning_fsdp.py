#!/usr/bin/env python3
"""Lightning's own FSDPStrategy on the demo Transformer: the baseline volt's GPU benchmark compares with.

Same model (lightning.pytorch.demos.Transformer), data (WikiText-2 valid.txt, Lightning's WikiText2
tokenization), batch, optimizer (AdamW) and precision (bf16-mixed, or 16-mixed with --precision) as
bench/gpu/bench_gpu.cpp.
Prints one JSON line per run: tokens/s (median step time over the timed steps), peak allocated GPU
memory, MFU against the bf16 matmul rate measured in the same process.

usage: lightning_fsdp.py DATA_DIR OUT_JSON [--ninp 1024 --nhead 64 --nhid 4096 --nlayers 32
                         --batch 8 --block 256 --steps 30 --warmup 5 --strategy fsdp|ddp --ac 0|1]
"""
import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
import lightning as L
from lightning.pytorch.demos import Transformer, WikiText2
from lightning.pytorch.strategies import FSDPStrategy
from torch.utils.data import DataLoader


def matmul_tflops():
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    t = time.perf_counter()
    n = 10
    for _ in range(n):
        a @ b
    torch.cuda.synchronize()
    return 2 * 8192**3 * n / (time.perf_counter() - t) / 1e12


class LM(L.LightningModule):
    def __init__(self, a):
        super().__init__()
        self.a = a
        self.model = None

    def configure_model(self):
        if self.model is None:
            self.model = Transformer(vocab_size=33278, ninp=self.a.ninp, nhead=self.a.nhead, nhid=self.a.nhid,
                                     nlayers=self.a.nlayers, dropout=0.2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.nll_loss(self.model(x, y), y.view(-1))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-4)


class Timer(L.Callback):
    def __init__(self, warmup):
        self.warmup, self.times, self.t0 = warmup, [], None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        torch.cuda.synchronize()
        self.t0 = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        torch.cuda.synchronize()
        if batch_idx >= self.warmup:
            self.times.append(time.perf_counter() - self.t0)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("data_dir")
    p.add_argument("out")
    for k, v in dict(ninp=1024, nhead=64, nhid=4096, nlayers=32, batch=8, block=256, steps=30, warmup=5, ac=0).items():
        p.add_argument("--" + k, type=int, default=v)
    p.add_argument("--strategy", default="fsdp")
    p.add_argument("--precision", default="bf16-mixed", choices=["bf16-mixed", "16-mixed"])
    a = p.parse_args()
    L.seed_everything(42)
    data = WikiText2(data_dir=Path(a.data_dir), block_size=a.block, download=False)
    loader = DataLoader(data, batch_size=a.batch, shuffle=False, num_workers=0, drop_last=True)
    layers = {nn.TransformerEncoderLayer, nn.TransformerDecoderLayer}
    if a.strategy == "fsdp":
        strategy = FSDPStrategy(auto_wrap_policy=layers, activation_checkpointing_policy=layers if a.ac else None,
                                sharding_strategy="FULL_SHARD")
    else:
        strategy = a.strategy
    peak_rate = matmul_tflops()
    torch.cuda.reset_peak_memory_stats()
    timer = Timer(a.warmup)
    trainer = L.Trainer(accelerator="cuda", devices=1, strategy=strategy, precision=a.precision,
                        max_steps=a.warmup + a.steps, enable_checkpointing=False, logger=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[timer])
    model = LM(a)
    trainer.fit(model, loader)
    n_params = sum(p.numel() for p in model.parameters())
    step = statistics.median(timer.times)
    tokens = a.batch * a.block
    # 6 N per token (forward + backward); the encoder and the decoder each see every token.
    flops = 6 * n_params * tokens
    label = a.strategy + ("+ac" if a.ac else "") + ("_fp16" if a.precision == "16-mixed" else "")
    row = dict(framework="lightning", strategy=label, params=n_params,
               batch=a.batch, block=a.block, step_ms=step * 1e3, tokens_per_s=tokens / step,
               peak_alloc_mb=torch.cuda.max_memory_allocated() / 2**20,
               peak_reserved_mb=torch.cuda.max_memory_reserved() / 2**20,
               tflops=flops / step / 1e12, matmul_tflops=peak_rate, mfu=flops / step / 1e12 / peak_rate)
    print(json.dumps(row), flush=True)
    with open(a.out, "a") as f:
        f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    sys.exit(main())
