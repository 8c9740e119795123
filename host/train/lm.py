"""The language model every LM method trains: a small byte-level decoder-only transformer, and its
optimizer.

Pre-norm blocks (causal multi-head self-attention, then a 4x GELU MLP, each with a residual), learned
position embeddings, the output layer tied to the byte embedding (256 symbols). The default (2 layers,
width 64, 4 heads, context 128) has about 0.1 M parameters: a step of one site runs in tens of
milliseconds on one CPU thread. The training loss and the validation loss are the mean next-byte
cross-entropy in nats.

:class:`AdamW` is written out (torch.optim's update, no amsgrad) because constructing a torch.optim
optimizer imports ``torch._dynamo``, which costs each site process seconds of CPU.
"""

import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["ByteTransformer", "make_lm", "AdamW", "lm_batch", "lm_loss", "validation_loss"]

VOCAB = 256


class _Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, c))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class ByteTransformer(nn.Module):
    """Bytes (batch, time) -> next-byte logits (batch, time, 256)."""

    def __init__(self, *, layers=2, width=64, heads=4, context=128):
        super().__init__()
        if width % heads:
            raise ValueError(f"The width ({width}) must be a multiple of the number of heads ({heads}).")
        self.context = context
        self.embed = nn.Embedding(VOCAB, width)
        self.pos = nn.Parameter(torch.zeros(context, width))
        self.blocks = nn.ModuleList(_Block(width, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(width)
        self._init()

    def _init(self):
        # GPT-2's initialisation: N(0, 0.02), residual projections scaled by 1/sqrt(2 * layers).
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() >= 2 and "ln" not in name:
                std = (
                    0.02 / math.sqrt(2 * len(self.blocks))
                    if name.endswith(("proj.weight", "down.weight"))
                    else 0.02
                )
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx):
        x = self.embed(idx) + self.pos[: idx.shape[1]]
        for blk in self.blocks:
            x = blk(x)
        return self.ln(x) @ self.embed.weight.T


def make_lm(seed, *, layers=2, width=64, heads=4, context=128):
    """The model with the initial weights of ``seed`` (the same on every site and for every method)."""
    torch.manual_seed(seed)
    return ByteTransformer(layers=layers, width=width, heads=heads, context=context)


def lm_batch(text, rng, batch, context):
    """``batch`` windows of ``context + 1`` bytes at random offsets of ``text`` (uint8): inputs, targets."""
    starts = rng.integers(0, len(text) - context - 1, batch)
    w = torch.from_numpy(np.stack([text[s : s + context + 1] for s in starts]).astype(np.int64))
    return w[:, :-1], w[:, 1:]


def lm_loss(model, x, y):
    return F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))


@torch.no_grad()
def validation_loss(model, windows):
    """Mean next-byte cross-entropy (nats) over the validation windows ((k, context + 1) uint8)."""
    w = torch.from_numpy(np.asarray(windows, dtype=np.int64))
    return float(lm_loss(model, w[:, :-1], w[:, 1:]))


class AdamW:
    """AdamW (Loshchilov and Hutter, arXiv:1711.05101) as torch.optim.AdamW computes it, with a linear
    warm-up of ``warmup`` steps; weight decay on matrices only."""

    def __init__(self, params, *, lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0, warmup=0):
        self.params = list(params)
        self.lr, self.betas, self.eps, self.wd, self.warmup = lr, betas, eps, weight_decay, warmup
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]
        self.t = 0

    @torch.no_grad()
    def step(self):
        self.t += 1
        b1, b2 = self.betas
        lr = self.lr * min(1.0, self.t / self.warmup) if self.warmup else self.lr
        c1, c2 = 1 - b1**self.t, 1 - b2**self.t
        for p, m, v in zip(self.params, self.m, self.v, strict=True):
            if p.grad is None:
                continue
            g = p.grad
            if self.wd and p.dim() >= 2:
                p.mul_(1 - lr * self.wd)
            m.mul_(b1).add_(g, alpha=1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            p.addcdiv_(m / c1, (v / c2).sqrt_().add_(self.eps), value=-lr)

    def zero_grad(self):
        for p in self.params:
            p.grad = None
