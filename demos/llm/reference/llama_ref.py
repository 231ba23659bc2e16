"""The Llama-style decoder of docs/llm.md in plain PyTorch: the reference volt's C++ model
(demos/llm/llama.h, llama_lm.h) is checked against.

Hugging Face's `LlamaForCausalLM` parameter names and formulas (transformers'
src/transformers/models/llama/modeling_llama.py): RMSNorm computed in float32, rotary embeddings
with `rotate_half`, grouped-query attention through `repeat_kv`, SwiGLU MLP, no biases. Attention on
the CPU (and everywhere on torch < 2) is the exact path
`softmax(q k^T * scale + causal_mask, dtype=float32).to(q.dtype) @ v`; CUDA tensors on torch >= 2 use
`F.scaled_dot_product_attention(is_causal=True)`.

Runs on PyTorch 1.13 (Debian's python3-torch) and 2.x. Also here: the optimizer (AdamW, two parameter
groups) and the learning-rate schedule (linear warm-up, then cosine to min_lr_ratio * lr) of
`volt::demos::LlamaLM`.
"""
import math
from dataclasses import dataclass, fields

import torch
import torch.nn as nn
import torch.nn.functional as F

_HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


@dataclass
class LlamaConfig:
    """The `model:` keys of configs/llm/*.yaml (Hugging Face's LlamaConfig names)."""

    vocab_size: int = 0
    hidden_size: int = 256
    intermediate_size: int = 0
    num_hidden_layers: int = 4
    num_attention_heads: int = 8
    num_key_value_heads: int = 0
    max_position_embeddings: int = 2048
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    tie_word_embeddings: bool = False
    initializer_range: float = 0.02
    attention_dropout: float = 0.0

    @classmethod
    def from_dict(cls, d):
        """A config from a dict with these keys; other keys are ignored."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def resolved(self):
        """A copy with the 0 defaults resolved (intermediate_size, num_key_value_heads), checked."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        if d["intermediate_size"] == 0:
            # Llama's rule: 256 * ceil((8d/3) / 256), in integers.
            d["intermediate_size"] = 256 * ((8 * self.hidden_size + 767) // 768)
        if d["num_key_value_heads"] == 0:
            d["num_key_value_heads"] = self.num_attention_heads
        c = LlamaConfig(**d)
        if c.vocab_size <= 0:
            raise ValueError("vocab_size must be > 0")
        if c.hidden_size % c.num_attention_heads:
            raise ValueError("hidden_size %d is not a multiple of num_attention_heads %d"
                             % (c.hidden_size, c.num_attention_heads))
        if (c.hidden_size // c.num_attention_heads) % 2:
            raise ValueError("the head width hidden_size / num_attention_heads must be even")
        if c.num_attention_heads % c.num_key_value_heads:
            raise ValueError("num_key_value_heads %d does not divide num_attention_heads %d"
                             % (c.num_key_value_heads, c.num_attention_heads))
        return c

    @property
    def head_dim(self):
        return self.hidden_size // self.num_attention_heads


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, x):
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * h.to(dtype)


def rotary_cos_sin(config, positions, dtype):
    """cos, sin [T, head_dim] for integer `positions` [T]: float32, then `dtype`.

    inv_freq is computed here rather than kept as a buffer, so that mixed-precision wrappers that cast
    buffers (FSDP's buffer_dtype) cannot round it.
    """
    hd = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.int64, device=positions.device)
                                            .float() / hd))
    freqs = torch.outer(positions.float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(q, k, cos, sin):
    """q, k [B, heads, T, hd]; cos, sin [T, hd]."""
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def repeat_kv(x, n_rep):
    """[B, KV, T, hd] -> [B, KV * n_rep, T, hd]: query head j uses kv head j // n_rep."""
    if n_rep == 1:
        return x
    b, kv, t, hd = x.shape
    return x[:, :, None, :, :].expand(b, kv, n_rep, t, hd).reshape(b, kv * n_rep, t, hd)


def causal_mask(t, dtype, device):
    """[T, T]: 0 on and below the diagonal, -inf above."""
    return torch.full((t, t), float("-inf"), dtype=dtype, device=device).triu(1)


class LlamaAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        d = config.hidden_size
        self.q_proj = nn.Linear(d, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(d, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(d, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, d, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, k, cos, sin)
        n_rep = self.num_heads // self.num_kv_heads
        k = repeat_kv(k, n_rep)
        v = repeat_kv(v, n_rep)
        p = self.config.attention_dropout if self.training else 0.0
        if _HAS_SDPA and q.is_cuda:
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        else:
            scale = 1.0 / math.sqrt(self.head_dim)
            scores = torch.matmul(q, k.transpose(2, 3)) * scale + causal_mask(t, q.dtype, q.device)
            probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
            probs = F.dropout(probs, p=p, training=self.training)
            out = torch.matmul(probs, v)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, self.num_heads * self.head_dim))


class LlamaMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        d, f = config.hidden_size, config.intermediate_size
        self.gate_proj = nn.Linear(d, f, bias=False)
        self.up_proj = nn.Linear(d, f, bias=False)
        self.down_proj = nn.Linear(f, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.self_attn = LlamaAttention(config)
        self.mlp = LlamaMLP(config)
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, h, cos, sin):
        h = h + self.self_attn(self.input_layernorm(h), cos, sin)
        return h + self.mlp(self.post_attention_layernorm(h))


class LlamaModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([LlamaDecoderLayer(config) for _ in range(config.num_hidden_layers)])
        self.norm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, input_ids):
        t = input_ids.shape[1]
        if t > self.config.max_position_embeddings:
            raise ValueError("sequence of %d tokens is longer than max_position_embeddings %d"
                             % (t, self.config.max_position_embeddings))
        h = self.embed_tokens(input_ids)
        cos, sin = rotary_cos_sin(self.config, torch.arange(t, device=input_ids.device), h.dtype)
        for layer in self.layers:
            h = layer(h, cos, sin)
        return self.norm(h)


class LlamaForCausalLM(nn.Module):
    """`model.*` and `lm_head.weight`, as Hugging Face names them. forward(input_ids [B, T]) gives the
    logits [B, T, V]; loss(logits, labels) the mean cross entropy over labels != -100."""

    def __init__(self, config):
        super().__init__()
        self.config = config.resolved()
        self.model = LlamaModel(self.config)
        self.lm_head = nn.Linear(self.config.hidden_size, self.config.vocab_size, bias=False)
        self.reset_parameters()

    def reset_parameters(self):
        """Hugging Face's _init_weights: every Linear and Embedding weight ~ N(0, initializer_range),
        every RMSNorm weight 1; then lm_head tied to the embedding when tie_word_embeddings."""
        std = self.config.initializer_range
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=std)
            elif isinstance(m, LlamaRMSNorm):
                nn.init.ones_(m.weight)
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, input_ids):
        return self.lm_head(self.model(input_ids))

    @staticmethod
    def loss(logits, labels):
        v = logits.shape[-1]
        return F.cross_entropy(logits.float().view(-1, v), labels.reshape(-1), ignore_index=-100)


def param_groups(model):
    """(decay, no_decay) parameter lists: weight decay on every 2-D Linear weight (q/k/v/o, gate/up/down,
    an untied lm_head), none on the RMSNorm weights and the embedding (a tied lm_head is the embedding).
    Each parameter once, in named_parameters() order."""
    linear = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)}
    embedding = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    decay, no_decay = [], []
    for _, p in model.named_parameters():  # a tied tensor appears once
        if id(p) in linear and id(p) not in embedding and p.dim() == 2:
            decay.append(p)
        else:
            no_decay.append(p)
    return decay, no_decay


def make_optimizer(model, lr, weight_decay, betas=(0.9, 0.95), eps=1e-8):
    """torch.optim.AdamW with LlamaLM's two parameter groups (param_groups): weight_decay, then 0."""
    decay, no_decay = param_groups(model)
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=tuple(betas), eps=eps)


def lr_lambda(step, warmup, decay_steps, min_ratio):
    """The learning-rate factor at optimizer step `step` (0-based; torch.optim.lr_scheduler.LambdaLR's
    argument, stepped once per optimizer step), as LlamaLM's warmup_cosine: (step + 1) / (warmup + 1)
    during the warm-up, then min_ratio + (1 - min_ratio) * (1 + cos(pi * progress)) / 2 with
    progress = (step - warmup) / (decay_steps - warmup) clamped to [0, 1]; decay_steps <= warmup:
    1 after the warm-up."""
    if step < warmup:
        return float(step + 1) / float(warmup + 1)
    if decay_steps <= warmup:
        return 1.0
    progress = min(1.0, float(step - warmup) / float(decay_steps - warmup))
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def num_params(model):
    """Parameters, a tied tensor counted once."""
    return sum(p.numel() for p in model.parameters())


def flops_per_token(model, seq_len):
    """Training FLOPs per token as torchtitan counts them (torchtitan/models/utils.py:
    get_nparams_and_active_nparams and quadratic_attention_flops_per_token, Llama3Model's
    get_nparams_and_flops): 6 x the parameters that take part in a matmul per token (every
    parameter, a tied tensor once, except an Embedding table that is not also the lm_head) plus, per
    layer, 6 x heads x (qk head_dim + v head_dim) x seq_len = 12 x heads x head_dim x seq_len for the
    score and value matmuls (causal sparsity and flash attention's recomputation not counted)."""
    head = {id(p) for p in model.lm_head.parameters()}
    embedding_only = sum(p.numel() for m in model.modules() if isinstance(m, nn.Embedding)
                         for p in m.parameters(recurse=False) if id(p) not in head)
    c = model.config
    attention = c.num_hidden_layers * 6 * c.num_attention_heads * (2 * c.head_dim) * seq_len
    return 6 * (num_params(model) - embedding_only) + attention
