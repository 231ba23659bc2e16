#!/usr/bin/env python3
"""The Python side of tests/demos/llm/test_llama_parity.cpp: the reference Llama
(demos/llm/reference/llama_ref.py) trained and loaded the way volt's LlamaLM is.

  parity.py make --config CONFIG --out DIR
      Builds the reference from CONFIG under its seed and writes, with torch.save:
        DIR/init.pt     the initial state_dict (Hugging Face names; a tied lm_head under both names)
        DIR/batches.pt  {"input_ids": [steps, batch, block], "labels": same} int64: a window w of
                        block + 1 tokens gives input_ids = w[:-1], labels = w[1:]; each window
                        counts from a random start by a random stride of 1 to 4 (mod vocab_size),
                        so that the loss falls within a few steps
        DIR/final.pt    the state_dict after training
        DIR/result.pt   {"losses", "lrs", "grad_norms"}: float64 [steps]
      Training: one process, float32, `steps` steps of AdamW with LlamaLM's two parameter groups,
      gradient clipping (gradient_clip_val, total 2-norm; 0: none), and LambdaLR(lr_lambda) with
      lr_decay_steps 0 meaning `steps`, as LlamaLM under trainer.max_steps = steps. losses[i] is
      step i's loss before its update.
      DIR/result.json holds the same numbers plus a checksum (sum, sum of squares) per parameter.

  parity.py load --config CONFIG --weights FILE --out OUT
      Loads FILE (safetensors, read here without the `safetensors` package; or a torch.save
      state_dict) into the reference by name, strictly: the same names and shapes as its state_dict, a tied lm_head.weight equal to
      model.embed_tokens.weight. Writes {"input_ids": [2, block], "logits": [2, block, vocab]} to
      OUT with torch.save (the input: random tokens under input_seed) and prints a summary.

CONFIG: a JSON or YAML mapping, inline or a file name. Model keys are LlamaConfig's (docs/llm.md);
training keys and defaults are in TRAIN_DEFAULTS. Exit codes: 0 done, 1 error (message on stderr).
"""
import argparse
import json
import math
import os
import struct
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "demos", "llm",
                                "reference"))

import torch  # noqa: E402

import llama_ref  # noqa: E402

TRAIN_DEFAULTS = dict(seed=1234, input_seed=4321, batch_size=4, block_size=32, steps=20, lr=3e-3, weight_decay=0.1,
                      beta1=0.9, beta2=0.95, eps=1e-8, warmup_steps=0, lr_decay_steps=0, min_lr_ratio=0.1,
                      gradient_clip_val=1.0, threads=1)


def read_config(text):
    """A dict from inline JSON/YAML or from a .json/.yaml file."""
    if os.path.isfile(text):
        with open(text) as f:
            text = f.read()
    try:
        import yaml
        cfg = yaml.safe_load(text)
    except ImportError:
        cfg = json.loads(text)
    if not isinstance(cfg, dict):
        raise ValueError("the config must be a mapping, got %r" % (cfg,))
    types = {k: type(v) for k, v in TRAIN_DEFAULTS.items()}
    types.update({f.name: f.type for f in llama_ref.LlamaConfig.__dataclass_fields__.values()})
    unknown = set(cfg) - set(types)
    if unknown:
        raise ValueError("unknown config keys: %s" % ", ".join(sorted(unknown)))
    cfg = {k: _coerce(k, v, types[k]) for k, v in cfg.items()}
    train = dict(TRAIN_DEFAULTS)
    train.update({k: v for k, v in cfg.items() if k in TRAIN_DEFAULTS})
    return llama_ref.LlamaConfig.from_dict(cfg), train


def _coerce(key, value, kind):
    """YAML 1.1 reads 1e-8 as a string and 3 as an int where a float is meant: the key's type decides."""
    try:
        if kind is bool:
            if isinstance(value, str) and value.lower() in ("true", "false"):
                return value.lower() == "true"
            if isinstance(value, bool):
                return value
            raise ValueError
        if kind is int and isinstance(value, float) and not value.is_integer():
            raise ValueError
        return kind(value)
    except (TypeError, ValueError):
        raise ValueError("config key %s: %r is not a %s" % (key, value, kind.__name__))


def make_batches(vocab, t):
    g = torch.Generator().manual_seed(int(t["seed"]) + 1)
    shape = (t["steps"], t["batch_size"], 1)
    start = torch.randint(0, vocab, shape, generator=g, dtype=torch.int64)
    stride = torch.randint(1, 5, shape, generator=g, dtype=torch.int64)
    w = (start + stride * torch.arange(t["block_size"] + 1, dtype=torch.int64)) % vocab
    return {"input_ids": w[..., :-1].contiguous(), "labels": w[..., 1:].contiguous()}


def checksums(state):
    return {k: [v.double().sum().item(), v.double().pow(2).sum().item()] for k, v in state.items()}


def cmd_make(args):
    mcfg, t = read_config(args.config)
    torch.set_num_threads(int(t["threads"]))
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(int(t["seed"]))
    model = llama_ref.LlamaForCausalLM(mcfg)
    torch.save(model.state_dict(), os.path.join(args.out, "init.pt"))
    batches = make_batches(model.config.vocab_size, t)
    torch.save(batches, os.path.join(args.out, "batches.pt"))

    opt = llama_ref.make_optimizer(model, t["lr"], t["weight_decay"], (t["beta1"], t["beta2"]), t["eps"])
    decay_steps = t["lr_decay_steps"] or t["steps"]
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: llama_ref.lr_lambda(s, t["warmup_steps"], decay_steps, t["min_lr_ratio"]))
    model.train()
    losses, lrs, norms = [], [], []
    for i in range(t["steps"]):
        lrs.append(opt.param_groups[0]["lr"])
        loss = model.loss(model(batches["input_ids"][i]), batches["labels"][i])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        params = [p for p in model.parameters() if p.grad is not None]
        if t["gradient_clip_val"] > 0:
            norms.append(torch.nn.utils.clip_grad_norm_(params, t["gradient_clip_val"]).item())
        else:
            norms.append(torch.norm(torch.stack([p.grad.norm(2) for p in params]), 2).item())
        opt.step()
        sched.step()
        losses.append(loss.item())
    final = model.state_dict()
    torch.save(final, os.path.join(args.out, "final.pt"))
    torch.save({"losses": torch.tensor(losses, dtype=torch.float64), "lrs": torch.tensor(lrs, dtype=torch.float64),
                "grad_norms": torch.tensor(norms, dtype=torch.float64)}, os.path.join(args.out, "result.pt"))
    with open(os.path.join(args.out, "result.json"), "w") as f:
        json.dump({"config": vars(model.config), "train": t, "params": llama_ref.num_params(model),
                   "losses": losses, "lrs": lrs, "grad_norms": norms, "checksums": checksums(final)}, f, indent=1)
    print("trained %d steps: loss %.6f -> %.6f" % (t["steps"], losses[0], losses[-1]))
    return 0


_ST_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
              "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
              "BOOL": torch.bool}


def read_safetensors(path):
    """Every tensor of a safetensors file: the `safetensors` package when installed, else this reader
    (8-byte little-endian header length, JSON header, row-major little-endian data)."""
    try:
        from safetensors.torch import load_file
        return load_file(path)
    except ImportError:
        pass
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError("%s: too short for a safetensors file" % path)
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError("%s: header length %d past the end of the file" % (path, n))
    header = json.loads(data[8:8 + n].decode("utf-8"))
    body = memoryview(data)[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        dtype = _ST_DTYPES[e["dtype"]]
        begin, end = e["data_offsets"]
        shape = list(e["shape"])
        count = math.prod(shape) if shape else 1
        if end - begin != count * torch.tensor([], dtype=dtype).element_size():
            raise ValueError("%s: %s holds %d bytes for shape %s" % (path, name, end - begin, shape))
        raw = bytearray(body[begin:end])  # a writable copy: torch.frombuffer warns on read-only memory
        t = torch.frombuffer(raw, dtype=dtype) if count else torch.empty(0, dtype=dtype)
        out[name] = t.reshape(shape).clone()
    return out


def cmd_load(args):
    mcfg, t = read_config(args.config)
    torch.set_num_threads(int(t["threads"]))
    model = llama_ref.LlamaForCausalLM(mcfg)
    with open(args.weights, "rb") as f:
        zip_file = f.read(2) == b"PK"
    tensors = torch.load(args.weights) if zip_file else read_safetensors(args.weights)
    want = model.state_dict()
    missing = sorted(set(want) - set(tensors))
    unexpected = sorted(set(tensors) - set(want))
    shapes = sorted("%s %s vs %s" % (k, list(tensors[k].shape), list(want[k].shape)) for k in set(want) & set(tensors)
                    if tensors[k].shape != want[k].shape)
    if missing or unexpected or shapes:
        raise ValueError("%s does not match the reference: missing %s, unexpected %s, shapes %s"
                         % (args.weights, missing, unexpected, shapes))
    if model.config.tie_word_embeddings and not torch.equal(tensors["lm_head.weight"],
                                                             tensors["model.embed_tokens.weight"]):
        raise ValueError("tie_word_embeddings, but lm_head.weight differs from model.embed_tokens.weight")
    model.load_state_dict(tensors, strict=True)
    model.eval()
    g = torch.Generator().manual_seed(int(t["input_seed"]))
    ids = torch.randint(0, model.config.vocab_size, (2, t["block_size"]), generator=g, dtype=torch.int64)
    with torch.no_grad():
        logits = model(ids)
    torch.save({"input_ids": ids, "logits": logits}, args.out)
    print("loaded %d tensors; logits %s, sum %.9g, max |x| %.9g" % (len(tensors), list(logits.shape),
                                                                     logits.double().sum().item(),
                                                                     logits.abs().max().item()))
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)
    m = sub.add_parser("make")
    m.add_argument("--config", required=True)
    m.add_argument("--out", required=True)
    ld = sub.add_parser("load")
    ld.add_argument("--config", required=True)
    ld.add_argument("--weights", required=True)
    ld.add_argument("--out", required=True)
    args = p.parse_args()
    try:
        return cmd_make(args) if args.mode == "make" else cmd_load(args)
    except (ValueError, OSError, RuntimeError) as e:
        print("parity.py: error: %s" % e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
