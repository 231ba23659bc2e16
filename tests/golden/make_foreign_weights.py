#!/usr/bin/python3
"""Weights written by Python PyTorch for volt's load_weights (tests/checkpoint/test_weights.cpp).

Run with Debian's python3-torch (1.13):  /usr/bin/python3 tests/golden/make_foreign_weights.py
Re-runnable (fixed seed): it overwrites
  tests/golden/foreign_weights.pt           torch.save(model.state_dict()): an OrderedDict
  tests/golden/foreign_weights.safetensors  the same state_dict, by write_safetensors below
  tests/golden/foreign_lightning.pt         a Lightning-style checkpoint: the model as `self.model`
                                            under "state_dict", plus epoch, an Adam state, callbacks
                                            and hyper_parameters as an AttributeDict (a class volt's
                                            reader has never heard of)
  tests/golden/foreign_legacy.pt            torch.save's legacy non-zip format (volt refuses it)
  tests/golden/foreign_module.pt            torch.save(model): the pickled nn.Module itself
  tests/golden/foreign_weights.json         the model's config and names, a fixed input and the
                                            model's output on it (eval mode)

The test imports this file for make_model() and read_safetensors() (to check the files volt
writes), so it must stay importable without side effects. The safetensors package is not needed:
write_safetensors/read_safetensors implement the format with json and struct.
"""
import copy
import json
import math
import struct
import sys
import types
from collections import OrderedDict
from pathlib import Path

import torch
import torch.nn as nn

HERE = Path(__file__).resolve().parent

CONFIG = {"inputs": 8, "hidden": 16, "outputs": 4}

# The format's dtype names; the reference implementation's order of the data is by item size
# (largest first), then by name.
ST_DTYPES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}
ST_TORCH = {v: k for k, v in ST_DTYPES.items()}


def make_model():
    """Linear, LayerNorm, Tanh, BatchNorm1d (buffers, an int64 one too), Linear."""
    c = CONFIG
    return nn.Sequential(
        nn.Linear(c["inputs"], c["hidden"]),
        nn.LayerNorm(c["hidden"]),
        nn.Tanh(),
        nn.BatchNorm1d(c["hidden"]),
        nn.Linear(c["hidden"], c["outputs"]),
    )


def write_safetensors(tensors, path, metadata=None):
    """Hugging Face's layout: u64 header length, JSON header padded with spaces to 8 bytes, data."""
    header = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    # Keys in the order of the data, as the reference writer does (volt's writer sorts them).
    order = sorted(tensors, key=lambda k: (-tensors[k].element_size(), k))
    blobs, offset = [], 0
    for name in order:
        t = tensors[name].detach().cpu().contiguous()
        blob = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": ST_DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def read_safetensors(path, sorted_keys=False):
    """(tensors, metadata, problems): every check a careful reader makes, as a list of problems.
    With sorted_keys, header keys out of order are a problem too (volt writes them sorted; this
    file's writer, like the reference one, in the order of the data)."""
    data = Path(path).read_bytes()
    problems = []
    (n,) = struct.unpack("<Q", data[:8])
    if n % 8:
        problems.append("header length %d is not a multiple of 8" % n)
    raw = data[8 : 8 + n]
    if raw.rstrip(b" ") != raw.rstrip():
        problems.append("header padding is not spaces")
    header = json.loads(raw)
    names = [k for k in header if k != "__metadata__"]
    if sorted_keys and names != sorted(names):
        problems.append("header keys are not sorted")
    metadata = header.pop("__metadata__", {})
    base, spans, tensors = 8 + n, [], {}
    for name, e in header.items():
        dtype = ST_TORCH[e["dtype"]]
        begin, end = e["data_offsets"]
        itemsize = torch.empty((), dtype=dtype).element_size()
        numel = math.prod(e["shape"])
        if end - begin != numel * itemsize:
            problems.append("%s: offsets [%d, %d] do not match its shape" % (name, begin, end))
        if begin % itemsize:
            problems.append("%s: data at %d is not aligned to its item size %d" % (name, begin, itemsize))
        spans.append((begin, end, name))
        if numel == 0:
            tensors[name] = torch.empty(e["shape"], dtype=dtype)
        else:
            buf = bytearray(data[base + begin : base + end])
            tensors[name] = torch.frombuffer(buf, dtype=dtype).reshape(e["shape"])
    pos = 0
    for begin, end, name in sorted(spans):
        if begin != pos:
            problems.append("%s starts at %d, not %d (gap or overlap)" % (name, begin, pos))
        pos = end
    if base + pos != len(data):
        problems.append("data ends at %d, the file at %d" % (base + pos, len(data)))
    return tensors, metadata, problems


def make_trained_model():
    torch.manual_seed(20240611)
    model = make_model()
    with torch.no_grad():
        # Away from the defaults (LayerNorm/BatchNorm start at ones and zeros), so only loading gives these.
        for m in (model[1], model[3]):
            m.weight.copy_(1 + 0.2 * torch.randn_like(m.weight))
            m.bias.copy_(0.2 * torch.randn_like(m.bias))
        model.train()
        for _ in range(3):  # running statistics, and num_batches_tracked = 3
            model(torch.randn(32, CONFIG["inputs"]) * 2 + 0.5)
    model.eval()
    return model


class _AttributeDict(dict):
    """Stands in for Lightning's AttributeDict: a dict subclass of a module volt does not know."""


def _as_lightning_class(cls, module, name):
    parts = module.split(".")
    for i in range(1, len(parts) + 1):  # pickle imports the module, parents first
        sys.modules.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
    mod = sys.modules[module]
    cls.__module__, cls.__qualname__, cls.__name__ = module, name, name
    setattr(mod, name, cls)
    return cls


def main():
    model = make_trained_model()
    sd = copy.deepcopy(model.state_dict())  # state_dict() shares storage: the Adam step below would change it
    assert isinstance(sd, OrderedDict) and hasattr(sd, "_metadata")
    torch.save(sd, HERE / "foreign_weights.pt")
    write_safetensors(sd, HERE / "foreign_weights.safetensors", {"format": "pt", "source": "make_foreign_weights.py"})
    torch.save(sd, HERE / "foreign_legacy.pt", _use_new_zipfile_serialization=False)
    torch.save(model, HERE / "foreign_module.pt")  # the whole pickled nn.Module

    # A Lightning checkpoint of a LightningModule holding the model as `self.model`.
    attribute_dict = _as_lightning_class(_AttributeDict, "lightning.fabric.utilities.data", "AttributeDict")
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    model.train()
    model(torch.randn(4, CONFIG["inputs"])).square().mean().backward()
    opt.step()
    model.load_state_dict(sd)  # the step changed the weights: the checkpoint holds the golden ones
    model.eval()
    lightning = {
        "epoch": 3,
        "global_step": 120,
        "pytorch-lightning_version": "2.1.0",
        "state_dict": OrderedDict(("model." + k, v) for k, v in sd.items()),
        "loops": {"fit_loop": {"state_dict": {}, "epoch_progress": {"total": {"ready": 4, "completed": 3}}}},
        "callbacks": {
            "ModelCheckpoint{'monitor': 'val_loss', 'mode': 'min'}": {
                "best_model_score": torch.tensor(0.25),
                "best_model_path": "/runs/epoch=2.ckpt",
                "kth_value": torch.tensor(float("inf")),
            }
        },
        "optimizer_states": [opt.state_dict()],
        "lr_schedulers": [],
        "hparams_name": "kwargs",
        "hyper_parameters": attribute_dict(lr=0.01, hidden=CONFIG["hidden"], layers=[8, 16], eps=1e-5),
    }
    torch.save(lightning, HERE / "foreign_lightning.pt")

    x = torch.linspace(-2.0, 2.0, 5 * CONFIG["inputs"]).reshape(5, CONFIG["inputs"]).sin() * 1.5
    with torch.no_grad():
        y = model(x)
    meta = {
        "config": CONFIG,
        "names": list(sd.keys()),
        "shapes": [list(v.shape) for v in sd.values()],
        "input": x.tolist(),
        "output": y.tolist(),
    }
    (HERE / "foreign_weights.json").write_text(json.dumps(meta, indent=1) + "\n")
    tensors, _, problems = read_safetensors(HERE / "foreign_weights.safetensors")
    assert not problems, problems
    assert all(torch.equal(tensors[k], v) for k, v in sd.items())
    print("foreign weights:", len(sd), "tensors; output", list(y.shape))


if __name__ == "__main__":
    main()
