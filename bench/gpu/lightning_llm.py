#!/usr/bin/env python3
"""Lightning's own FSDPStrategy on the Llama decoder: the baseline for volt's LlamaLM on the GPU.

The model is the plain-PyTorch reference volt's C++ model matches (demos/llm/reference/llama_ref.py,
Hugging Face's LlamaForCausalLM names and formulas; SDPA with is_causal on CUDA). Default shape:
Llama-3.2-1B (hidden 2048, 16 layers, 32 heads, 8 kv heads, intermediate 8192, vocab 128256, tied
embeddings, rope_theta 500000) at batch 8 x block 2048 per device, on random tokens.
FSDPStrategy (FULL_SHARD, each LlamaDecoderLayer a unit; --ac 1 also checkpoints them), bf16-mixed,
AdamW with LlamaLM's two param groups (decay on the 2-D Linear weights only), warm-up + cosine,
gradient clipping at 1.0 (FSDP's clip_grad_norm_ on the root module).

Prints one JSON line per run in bench/gpu/lightning_fsdp.py's format (bench/gpu/table.py reads both):
tokens/s from the median step time over the timed steps, peak allocated and reserved GPU memory, and
the MFU: training FLOPs per token as torchtitan counts them (llama_ref.flops_per_token: 6 x the
matmul parameters, a tied embedding once as the lm_head, + 12 x layers x heads x head_dim x block)
x tokens / step time, against the bf16 matmul rate measured in the same process.

usage: lightning_llm.py OUT_JSON [--hidden 2048 --layers 16 --heads 32 --kv_heads 8 --intermediate 8192
                        --vocab 128256 --tie 1 --rope_theta 500000 --batch 8 --block 2048 --steps 30
                        --warmup 5 --devices 1 --ac 0 --precision bf16-mixed]
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "demos", "llm", "reference"))

import torch  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

import llama_ref  # noqa: E402

import lightning as L  # noqa: E402  (the only import this needs beyond PyTorch)
from lightning.pytorch.strategies import FSDPStrategy  # noqa: E402


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


class RandomTokens(Dataset):
    """Windows of block + 1 random tokens (seeded per index): (input_ids, labels)."""

    def __init__(self, n, block, vocab):
        self.n, self.block, self.vocab = n, block, vocab

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        w = torch.randint(0, self.vocab, (self.block + 1,), generator=g)
        return w[:-1], w[1:]


def model_config(a):
    return llama_ref.LlamaConfig(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.intermediate,
                                 num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                                 max_position_embeddings=max(a.block, 2048), rope_theta=a.rope_theta,
                                 tie_word_embeddings=bool(a.tie))


class LlamaLit(L.LightningModule):
    def __init__(self, a):
        super().__init__()
        self.a = a
        self.model = None

    def configure_model(self):
        if self.model is None:
            # Built on the GPU (normal init there is fast), whole, then sharded by FSDP's wrapping.
            with torch.device(self.trainer.strategy.root_device):
                self.model = llama_ref.LlamaForCausalLM(model_config(self.a))

    def training_step(self, batch, batch_idx):
        ids, labels = batch
        return llama_ref.LlamaForCausalLM.loss(self.model(ids), labels)

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        # Lightning's FSDPPrecision refuses norm clipping; the root FSDP module clips over the shards.
        if gradient_clip_val:
            self.trainer.model.clip_grad_norm_(gradient_clip_val)

    def configure_optimizers(self):
        opt = llama_ref.make_optimizer(self.model, 3e-4, 0.1, (0.9, 0.95), 1e-8)
        steps = self.a.warmup + self.a.steps
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: llama_ref.lr_lambda(s, 2, steps, 0.1))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


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
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    for k, v in dict(hidden=2048, layers=16, heads=32, kv_heads=8, intermediate=8192, vocab=128256, tie=1, batch=8,
                     block=2048, steps=30, warmup=5, devices=1, ac=0).items():
        p.add_argument("--" + k, type=int, default=v)
    p.add_argument("--rope_theta", type=float, default=500000.0)
    p.add_argument("--precision", default="bf16-mixed", choices=["bf16-mixed", "16-mixed"])
    a = p.parse_args()
    L.seed_everything(42)
    data = RandomTokens(a.batch * a.devices * (a.warmup + a.steps), a.block, a.vocab)
    loader = DataLoader(data, batch_size=a.batch, shuffle=False, num_workers=2, drop_last=True)
    layers = {llama_ref.LlamaDecoderLayer}
    strategy = FSDPStrategy(auto_wrap_policy=layers, activation_checkpointing_policy=layers if a.ac else None,
                            sharding_strategy="FULL_SHARD")
    peak_rate = matmul_tflops()
    torch.cuda.reset_peak_memory_stats()
    timer = Timer(a.warmup)
    trainer = L.Trainer(accelerator="cuda", devices=a.devices, strategy=strategy, precision=a.precision,
                        max_steps=a.warmup + a.steps, gradient_clip_val=1.0, enable_checkpointing=False, logger=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[timer])
    lit = LlamaLit(a)
    trainer.fit(lit, loader)
    if trainer.global_rank != 0:
        return 0
    # Counted on an unsharded twin on the meta device: the same module tree, no memory.
    with torch.device("meta"):
        twin = llama_ref.LlamaForCausalLM(model_config(a))
    n_params = llama_ref.num_params(twin)
    step = statistics.median(timer.times)
    tokens = a.batch * a.block * a.devices
    flops = llama_ref.flops_per_token(twin, a.block) * tokens
    label = "fsdp" + ("+ac" if a.ac else "") + ("_fp16" if a.precision == "16-mixed" else "")
    row = dict(framework="lightning", model="llama", strategy=label, params=n_params, batch=a.batch, block=a.block,
               devices=a.devices, step_ms=step * 1e3, tokens_per_s=tokens / step,
               peak_alloc_mb=torch.cuda.max_memory_allocated() / 2**20,
               peak_reserved_mb=torch.cuda.max_memory_reserved() / 2**20, tflops=flops / step / 1e12 / a.devices,
               matmul_tflops=peak_rate, mfu=flops / step / 1e12 / a.devices / peak_rate)
    print(json.dumps(row), flush=True)
    with open(a.out, "a") as f:
        f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
