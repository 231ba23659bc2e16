#!/usr/bin/env python3
"""Prints the GPU benchmark's JSON lines (volt and Lightning) as one markdown table, with ratios
to Lightning's FSDP run of the same batch and block."""
import json
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
base = {(r.get("model", "demo"), r["batch"], r["block"], r["strategy"]): r
        for r in rows if r["framework"] == "lightning"}
print("| framework | model | strategy | params (M) | batch x block | step (ms) | tokens/s | peak alloc (MB) | "
      "TFLOP/s | MFU | vs Lightning FSDP: speed, memory |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for r in rows:
    s = r["strategy"]
    ref = base.get((r.get("model", "demo"), r["batch"], r["block"], "fsdp+ac" if s.endswith("_ac") or s.endswith("+ac")
                    else "fsdp_fp16" if s.endswith("_fp16") else "fsdp"))
    cmp = ""
    if ref and r is not ref:
        cmp = f'{r["tokens_per_s"] / ref["tokens_per_s"]:.2f}x, {r["peak_alloc_mb"] / ref["peak_alloc_mb"]:.2f}x'
    print(f'| {r["framework"]} | {r.get("model", "demo")} | {r["strategy"]} | {r["params"] / 1e6:.0f} | {r["batch"]}x{r["block"]} | '
          f'{r["step_ms"]:.1f} | {r["tokens_per_s"]:.0f} | {r["peak_alloc_mb"]:.0f} | {r["tflops"]:.1f} | '
          f'{100 * r["mfu"]:.1f}% | {cmp} |')
