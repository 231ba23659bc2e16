#!/usr/bin/python3
"""The Python side of volt's LLM data (demos/llm/tokenizer.h, token_file.h): the same tokenizer
recipe, the same lines of text, and the token file format, in plain Python with `sentencepiece`
and numpy (Debian: python3-sentencepiece, python3-numpy).

  token_file.py train TEXT... --model OUT.model [--vocab-size 8000]
      Trains a SentencePiece model with volt's (Llama's) spec on the lines of the TEXT files.
  token_file.py write TEXT --model M.model --out OUT.tok [--no-bos] [--no-eos]
      Tokenizes TEXT into a token file (the header's tokenizer field 0: Python has no XXH64 here).
  token_file.py read FILE.tok [--block-size T] [--windows 0,5,-1]
      Prints the header, and the windows asked for, as JSON.

Format: a 64-byte little-endian header (magic b"VOLTTOK1", u32 token_bytes, u32 flags, u64
num_tokens, u64 vocab_size, u64 tokenizer, u64 source_size, i64 source_mtime_ns, u64 reserved),
then num_tokens ids of token_bytes each (uint16 or uint32). Window i of block size T holds tokens
[i*T, i*T + T + 1): input_ids = w[:-1], labels = w[1:]; there are (num_tokens - 1) // T windows.
"""
import argparse
import io
import json
import os
import struct
import sys

MAGIC = b"VOLTTOK1"
HEADER = struct.Struct("<8sIIQQQQqQ")  # 64 bytes
BOS_PER_LINE, EOS_PER_LINE = 1, 2

# Llama's trainer spec, as volt's train_tokenizer (demos/llm/tokenizer.cpp) passes it.
TRAINER_SPEC = dict(
    model_type="bpe",
    byte_fallback=True,
    split_digits=True,
    normalization_rule_name="identity",
    remove_extra_whitespaces=False,
    allow_whitespace_only_pieces=True,
    character_coverage=0.99995,
    unk_id=0,
    bos_id=1,
    eos_id=2,
    pad_id=-1,
    minloglevel=1,
)


def text_lines(path):
    """The lines of a UTF-8 text file that hold more than ASCII whitespace (space, \\t, \\v, \\f),
    without their line breaks; universal newlines (\\n, \\r\\n, \\r)."""
    with open(path, encoding="utf-8", newline=None) as f:
        for line in f:
            if line.endswith("\n"):
                line = line[:-1]
            if line.strip(" \t\v\f"):
                yield line


def train(text_paths, model_path, vocab_size=8000, num_threads=2):
    import sentencepiece as spm

    lines = [line for p in text_paths for line in text_lines(p)]
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=buf, vocab_size=vocab_size,
                                   num_threads=num_threads, **TRAINER_SPEC)
    with open(model_path, "wb") as f:
        f.write(buf.getvalue())


def encode_file(sp, text_path, add_bos=True, add_eos=True):
    ids = []
    for line in text_lines(text_path):
        ids += ([sp.bos_id()] if add_bos else []) + sp.encode(line) + ([sp.eos_id()] if add_eos else [])
    return ids


def write(path, ids, vocab_size, flags, tokenizer=0, source_size=0, source_mtime_ns=0):
    import numpy as np

    token_bytes = 2 if vocab_size <= 65536 else 4
    data = np.asarray(ids, dtype="<u2" if token_bytes == 2 else "<u4")
    with open(path, "wb") as f:
        f.write(HEADER.pack(MAGIC, token_bytes, flags, len(ids), vocab_size, tokenizer, source_size,
                            source_mtime_ns, 0))
        f.write(data.tobytes())


def read(path):
    """(header dict, ids as a read-only numpy memmap)."""
    import numpy as np

    with open(path, "rb") as f:
        raw = f.read(HEADER.size)
    magic, token_bytes, flags, num_tokens, vocab_size, tokenizer, source_size, mtime, _ = HEADER.unpack(raw)
    if magic != MAGIC:
        raise ValueError(f"{path}: not a volt token file")
    if os.path.getsize(path) != HEADER.size + num_tokens * token_bytes:
        raise ValueError(f"{path}: size does not match its header")
    header = dict(token_bytes=token_bytes, flags=flags, num_tokens=num_tokens, vocab_size=vocab_size,
                  tokenizer=f"{tokenizer:016x}", source_size=source_size, source_mtime_ns=mtime)
    ids = np.memmap(path, dtype="<u2" if token_bytes == 2 else "<u4", mode="r", offset=HEADER.size,
                    shape=(num_tokens,))
    return header, ids


def window(ids, block_size, i):
    w = [int(x) for x in ids[i * block_size:i * block_size + block_size + 1]]
    return {"input_ids": w[:-1], "labels": w[1:]}


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("text", nargs="+")
    t.add_argument("--model", required=True)
    t.add_argument("--vocab-size", type=int, default=8000)
    w = sub.add_parser("write")
    w.add_argument("text")
    w.add_argument("--model", required=True)
    w.add_argument("--out", required=True)
    w.add_argument("--no-bos", action="store_true")
    w.add_argument("--no-eos", action="store_true")
    r = sub.add_parser("read")
    r.add_argument("file")
    r.add_argument("--block-size", type=int, default=0)
    r.add_argument("--windows", default="")
    a = p.parse_args(argv)
    if a.cmd == "train":
        train(a.text, a.model, a.vocab_size)
    elif a.cmd == "write":
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor(model_file=a.model)
        ids = encode_file(sp, a.text, not a.no_bos, not a.no_eos)
        flags = (0 if a.no_bos else BOS_PER_LINE) | (0 if a.no_eos else EOS_PER_LINE)
        write(a.out, ids, sp.vocab_size(), flags)
    else:
        header, ids = read(a.file)
        out = {"header": header, "sum": int(ids.astype("int64").sum()), "first": [int(x) for x in ids[:64]]}
        if a.block_size:
            n = (header["num_tokens"] - 1) // a.block_size
            out["num_windows"] = n
            out["windows"] = {}
            for s in filter(None, a.windows.split(",")):
                i = int(s) % n
                out["windows"][str(i)] = window(ids, a.block_size, i)
        json.dump(out, sys.stdout)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
