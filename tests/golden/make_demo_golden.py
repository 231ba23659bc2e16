#!/usr/bin/python3
"""Golden values for volt's demo model and data (tests/demos/), computed with PyTorch.

Run with Debian's python3-torch (1.13):  /usr/bin/python3 tests/golden/make_demo_golden.py
Re-runnable: it overwrites
  tests/golden/demo_transformer.pt    state_dict, batch, loss and gradients of a small Transformer
  tests/golden/demo_transformer.json  its config, parameter names/shapes, loss; default-config size
  tests/golden/demo_wikitext2.json    WikiText2 tokenization of ../shared/data/wikitext-2/valid.txt

The model is lightning.pytorch.demos.Transformer (Lightning is not needed: the classes are copied
below), with the positional encoding actually added (batch_first table pe[0, pos, :]).
"""
import json
import math
import os
from pathlib import Path
from typing import Dict, List

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
DATA = ROOT.parent / "shared" / "data" / "wikitext-2"


class PositionalEncoding(nn.Module):
    def __init__(self, dim, dropout=0.1, max_len=5000):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        self.dim = dim
        self.max_len = max_len
        self.pe = None  # a plain tensor, not a buffer: absent from the state_dict

    def forward(self, x):
        if self.pe is None:
            pe = torch.zeros(self.max_len, self.dim)
            position = torch.arange(0, self.max_len, dtype=torch.float).unsqueeze(1)
            div_term = torch.exp(torch.arange(0, self.dim, 2).float() * (-math.log(10000.0) / self.dim))
            pe[:, 0::2] = torch.sin(position * div_term)
            pe[:, 1::2] = torch.cos(position * div_term)
            self.pe = pe.unsqueeze(0).to(x.device)  # [1, max_len, dim]
        x = x + self.pe[:, : x.size(1)]
        return self.dropout(x)


class Transformer(nn.Module):
    def __init__(self, vocab_size=33278, ninp=200, nhead=2, nhid=200, nlayers=2, dropout=0.2):
        super().__init__()
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        self.embedding = nn.Embedding(vocab_size, ninp)
        self.transformer = nn.Transformer(
            d_model=ninp, nhead=nhead, num_encoder_layers=nlayers, num_decoder_layers=nlayers,
            dim_feedforward=nhid, dropout=dropout, batch_first=True)
        self.decoder = nn.Linear(ninp, vocab_size)
        self.ninp = ninp
        self.vocab_size = vocab_size
        self.src_mask = None

    def forward(self, inputs, target, mask=None):
        _, t = inputs.shape
        if mask is None:
            mask = nn.Transformer.generate_square_subsequent_mask(t)
        src = self.pos_encoder(self.embedding(inputs) * math.sqrt(self.ninp))
        target = self.pos_encoder(self.embedding(target) * math.sqrt(self.ninp))
        output = self.transformer(src, target, tgt_mask=mask)
        output = self.decoder(output)
        output = F.log_softmax(output, dim=-1)
        return output.view(-1, self.vocab_size)


class Dictionary:
    def __init__(self):
        self.word2idx: Dict[str, int] = {}
        self.idx2word: List[str] = []

    def add_word(self, word):
        if word not in self.word2idx:
            self.idx2word.append(word)
            self.word2idx[word] = len(self.idx2word) - 1
        return self.word2idx[word]

    def __len__(self):
        return len(self.idx2word)


def tokenize(path, dictionary):
    """Lightning's tokenize(), with the dictionary passed in (to share it between splits)."""
    with open(path, encoding="utf8") as f:
        for line in f:
            for word in line.split() + ["<eos>"]:
                dictionary.add_word(word)
    with open(path, encoding="utf8") as f:
        idss = []
        for line in f:
            idss.append(torch.tensor([dictionary.word2idx[w] for w in line.split() + ["<eos>"]]).type(torch.int64))
    return torch.cat(idss)


def item(data, block_size, index):
    start = index * block_size
    end = start + block_size
    return data[start:end], data[start + 1:end + 1]


def make_transformer():
    config = dict(vocab_size=50, ninp=16, nhead=2, nhid=32, nlayers=2, dropout=0.2)
    torch.manual_seed(1234)
    model = Transformer(**config)
    model.eval()  # dropout off
    inputs = torch.randint(0, config["vocab_size"], (3, 9))
    target = torch.randint(0, config["vocab_size"], (3, 9))
    output = model(inputs, target)
    loss = F.nll_loss(output, target.view(-1))
    loss.backward()

    tensors = {"inputs": inputs, "target": target, "loss": loss.detach().double(), "output": output.detach()}
    names, shapes = [], []
    for name, p in model.named_parameters():
        names.append(name)
        shapes.append(list(p.shape))
        tensors["param." + name] = p.detach().clone()
        tensors["grad." + name] = p.grad.detach().clone()
    assert names == list(model.state_dict().keys())
    torch.save(tensors, HERE / "demo_transformer.pt", _use_new_zipfile_serialization=True)

    default = Transformer()
    meta = {
        "config": config,
        "batch_shape": list(inputs.shape),
        "loss": loss.item(),
        "param_names": names,
        "param_shapes": shapes,
        "default_num_params": sum(p.numel() for p in default.parameters()),
        "default_num_param_tensors": len(list(default.parameters())),
    }
    (HERE / "demo_transformer.json").write_text(json.dumps(meta, indent=1) + "\n")
    print("transformer: loss", loss.item(), "params", len(names))


def make_wikitext2():
    block_size = 35
    d = Dictionary()
    valid = tokenize(DATA / "valid.txt", d)
    valid_vocab = len(d)
    test = tokenize(DATA / "test.txt", d)  # shared dictionary: valid's ids, then new words
    d_test = Dictionary()
    test_alone = tokenize(DATA / "test.txt", d_test)
    meta = {
        "block_size": block_size,
        "valid": {
            "num_tokens": valid.numel(),
            "vocab_size": valid_vocab,
            "len": valid.numel() // block_size - 1,
            "id_sum": int(valid.sum()),
            "first_ids": valid[:50].tolist(),
            "first_words": d.idx2word[:20],
            "item0": [t.tolist() for t in item(valid, block_size, 0)],
            "item100": [t.tolist() for t in item(valid, block_size, 100)],
            "last_item": [t.tolist() for t in item(valid, block_size, valid.numel() // block_size - 2)],
        },
        "test_shared": {
            "num_tokens": test.numel(),
            "vocab_size": len(d),
            "id_sum": int(test.sum()),
            "first_ids": test[:50].tolist(),
        },
        "test_alone": {
            "vocab_size": len(d_test),
            "id_sum": int(test_alone.sum()),
        },
    }
    (HERE / "demo_wikitext2.json").write_text(json.dumps(meta) + "\n")
    print("wikitext2: valid tokens", valid.numel(), "vocab", valid_vocab, "shared vocab", len(d))


if __name__ == "__main__":
    make_transformer()
    make_wikitext2()
