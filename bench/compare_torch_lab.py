#!/usr/bin/python3
"""Training speed of the lab's transformer: posenc (C++) against the same model in PyTorch eager,
side by side, on the same number of threads, and prints tokens/second and the ratio.

The PyTorch model is the lab's model (include/posenc/model/transformer.hpp), written the way
public eager implementations write it (nanoGPT / Hugging Face GPT-2 style):
  tokens (B, T) -> E[token] (+ sinusoidal table | learned table)
  per layer: x += Wo attn(LN1(x)) ; x += W2 gelu_tanh(W1 LN2(x))    (pre-norm, biases on)
  attn: qkv = h Wqkv + b, split into heads (B, H, T, D); RoPE (half layout, theta 10000) on q, k
        for rope; scores q k^T / sqrt(D) + bias (ALiBi m_h (j - i), Press et al. 2022, or a
        learned T5 bucket table, Raffel et al. 2020) with a causal -inf mask; softmax; P V;
        merge heads
  logits = LN_f(x) W_out (untied, no bias); loss = mean cross-entropy over scored targets
  AdamW (betas 0.9, 0.99, eps 1e-8, decoupled weight decay on matrices only), linear warm-up and
  cosine decay, global gradient-norm clip 1.0.
Batches have the lab's shape: B sequences of one length L drawn uniformly from [A, B] per step,
passkey-task tokens (BOS filler MARK k k k filler QUERY k k k, distinct key digits; the
last 3 key digits scored).

posenc is timed by `posenc lab ... --format json` with one scheme and one seed, so the single
run uses all --threads threads; its tokens_per_second counts training steps only (no evaluation).
PyTorch is timed over the same number of steps after a few untimed warm-up steps. Both are
reported per wall second and per CPU second (process CPU time: the second is less sensitive to
other load on a shared machine, and shows threads that spin or wait rather than compute).

Usage: bench/compare_torch_lab.py [--posenc build/release/posenc] [--threads 2]
       [--schemes nope,sinusoidal,learned,rope,alibi,t5] [--steps 100] [--json OUT.json]
Needs Debian's python3-torch (run with /usr/bin/python3).
"""
import argparse
import json
import math
import random
import resource
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

# The ALiBi slopes and causal T5 buckets of the kernel comparison (same directory).
from compare_torch import alibi_slopes, t5_bucket

# Passkey task token ids (src/lab/tasks.cpp): BOS 1, MARK 2, QUERY 3, digits 4..13, filler 14..29.
BOS, MARK, QUERY, DIGIT0, FILLER0, N_FILLER = 1, 2, 3, 4, 14, 16
VOCAB = FILLER0 + N_FILLER


def passkey_batch(rnd, B, L):
    toks = torch.empty(B, L, dtype=torch.long)
    tgts = torch.full((B, L), -1, dtype=torch.long)
    for b in range(B):
        fill = L - 9
        depth = rnd.randint(0, fill)
        key = [DIGIT0 + d for d in rnd.sample(range(10), 3)]  # distinct digits, as posenc
        seq = [BOS] + [FILLER0 + rnd.randrange(N_FILLER) for _ in range(depth)] + [MARK] + key
        seq += [FILLER0 + rnd.randrange(N_FILLER) for _ in range(fill - depth)] + [QUERY] + key
        toks[b] = torch.tensor(seq)
        for i in range(L - 4, L - 1):
            tgts[b, i] = seq[i + 1]
    return toks, tgts


T5_BUCKETS, T5_MAX_DISTANCE = 32, 128


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Block(torch.nn.Module):
    def __init__(self, C, H, Fd):
        super().__init__()
        self.H = H
        self.ln1 = torch.nn.LayerNorm(C)
        self.qkv = torch.nn.Linear(C, 3 * C)
        self.o = torch.nn.Linear(C, C)
        self.ln2 = torch.nn.LayerNorm(C)
        self.w1 = torch.nn.Linear(C, Fd)
        self.w2 = torch.nn.Linear(Fd, C)

    def forward(self, x, scheme, cos, sin, bias):
        B, T, C = x.shape
        H, D = self.H, C // self.H
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q = q.view(B, T, H, D).transpose(1, 2)
        k = k.view(B, T, H, D).transpose(1, 2)
        v = v.view(B, T, H, D).transpose(1, 2)
        if scheme == "rope":
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
        s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D)) + bias
        a = torch.softmax(s, dim=-1) @ v
        x = x + self.o(a.transpose(1, 2).reshape(B, T, C))
        # tanh GELU, as posenc (Hendrycks and Gimpel 2016 approximation)
        h = self.w1(self.ln2(x))
        h = 0.5 * h * (1.0 + torch.tanh(0.7978845608028654 * (h + 0.044715 * h * h * h)))
        return x + self.w2(h)


class Model(torch.nn.Module):
    def __init__(self, scheme, C, L, H, Fd, max_pos):
        super().__init__()
        self.scheme, self.H, self.C = scheme, H, C
        self.tok = torch.nn.Embedding(VOCAB, C)
        self.pos = torch.nn.Embedding(max_pos, C) if scheme == "learned" else None
        self.blocks = torch.nn.ModuleList([Block(C, H, Fd) for _ in range(L)])
        self.lnf = torch.nn.LayerNorm(C)
        self.out = torch.nn.Linear(C, VOCAB, bias=False)
        for n, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if n.endswith(("o.weight", "w2.weight")) else 0.02
                torch.nn.init.normal_(p, 0.0, std)
            elif n.endswith("bias"):
                torch.nn.init.zeros_(p)
        self.slopes = torch.tensor(alibi_slopes(H)).view(1, H, 1, 1)
        # T5 (Raffel et al. 2020): one learned (buckets, H) table shared by the layers.
        self.t5 = torch.nn.Parameter(0.02 * torch.randn(T5_BUCKETS, H)) if scheme == "t5" else None

    def forward(self, toks):
        B, T = toks.shape
        C, H, D = self.C, self.H, self.C // self.H
        pos = torch.arange(T)
        x = self.tok(toks)
        if self.scheme == "learned":
            x = x + self.pos(pos)
        elif self.scheme == "sinusoidal":
            om = torch.exp(-math.log(10000.0) * torch.arange(0, C, 2, dtype=torch.float32) / C)
            ang = pos[:, None].float() * om[None, :]
            # posenc's amplitude sqrt(2) * init_std (model::sinusoidal_amplitude)
            x = x + math.sqrt(2) * 0.02 * torch.stack((ang.sin(), ang.cos()), -1).view(T, C)
        cos = sin = None
        if self.scheme == "rope":
            inv = 1.0 / (10000.0 ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
            ang = torch.outer(pos.float(), inv)
            cos = torch.cat((ang.cos(), ang.cos()), -1)
            sin = torch.cat((ang.sin(), ang.sin()), -1)
        rel = (pos[None, :] - pos[:, None]).float()  # j - i
        bias = torch.zeros(T, T).masked_fill(rel > 0, float("-inf"))
        if self.scheme == "alibi":
            bias = bias + self.slopes * rel
        if self.scheme == "t5":
            bias = bias + self.t5[t5_bucket(rel.long(), T5_BUCKETS, T5_MAX_DISTANCE)].permute(2, 0, 1).unsqueeze(0)
        for blk in self.blocks:
            x = blk(x, self.scheme, cos, sin, bias)
        return self.out(self.lnf(x))


def torch_tokens_per_second(scheme, a, lengths):
    torch.manual_seed(0)
    m = Model(scheme, a.d_model, a.layers, a.heads, a.d_ff, a.train_max)
    decay = [p for p in m.parameters() if p.dim() == 2]
    other = [p for p in m.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": other, "weight_decay": 0.0}],
                            lr=3e-3, betas=(0.9, 0.99), eps=1e-8)
    warm = max(1, a.steps // 10)
    total = a.steps + a.warmup_steps

    def lr_at(s):
        if s < warm:
            return (s + 1) / warm
        p = min(1.0, (s - warm) / max(1, total - warm))
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    rnd = random.Random(1)
    batches = [passkey_batch(rnd, a.batch, L) for L in lengths]

    def step(toks, tgts):
        logits = m(toks)
        loss = F.cross_entropy(logits.view(-1, VOCAB), tgts.view(-1), ignore_index=-1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        sched.step()
        return loss

    for i in range(a.warmup_steps):
        step(*batches[i % len(batches)])
    tokens = 0
    t0, c0 = time.perf_counter(), time.process_time()
    for toks, tgts in batches:
        step(toks, tgts)
        tokens += toks.numel()
    return tokens / (time.perf_counter() - t0), tokens / (time.process_time() - c0)


def posenc_run(scheme, a):
    cmd = [a.posenc, "lab", "--task", "passkey", "--schemes", scheme, "--seeds", "1",
           "--steps", str(a.steps), "--batch", str(a.batch), "--train-len",
           "%d:%d" % (a.train_min, a.train_max), "--d-model", str(a.d_model), "--layers",
           str(a.layers), "--heads", str(a.heads), "--d-ff", str(a.d_ff), "--eval-lens",
           str(a.train_max), "--eval-samples", "1", "--threads", str(a.threads),
           "--no-progress", "--format", "json"]
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    run = json.loads(out)["runs"][0]
    # CPU seconds of the whole process (start-up and a 1-sequence evaluation included, which
    # slightly favours PyTorch); wall tokens/s is posenc's own timing of the training steps.
    cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    tokens = run["tokens_per_second"] * run["train_seconds"]
    return run["tokens_per_second"], tokens / cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--posenc", default="build/release/posenc")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--schemes", default="nope,sinusoidal,learned,rope,alibi,t5")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup-steps", type=int, default=5, help="untimed PyTorch steps")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--train-len", default="16:64")
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--d-ff", type=int, default=256)
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args()
    a.train_min, a.train_max = (int(v) for v in a.train_len.split(":"))
    torch.set_num_threads(a.threads)
    rnd = random.Random(0)
    lengths = [rnd.randint(a.train_min, a.train_max) for _ in range(a.steps)]
    print("PyTorch %s, %d threads; model C=%d layers=%d heads=%d d_ff=%d; batch %d, L in [%d, %d], "
          "%d steps" % (torch.__version__, torch.get_num_threads(), a.d_model, a.layers, a.heads,
                        a.d_ff, a.batch, a.train_min, a.train_max, a.steps))
    print("tokens per wall second, and per CPU second (less sensitive to a loaded machine)")
    print("%-11s %13s %13s %7s %13s %13s %7s" % ("scheme", "posenc wall", "torch wall", "ratio",
                                                  "posenc cpu", "torch cpu", "ratio"))
    rows = []
    for s in a.schemes.split(","):
        p, pc = posenc_run(s, a)
        t, tc = torch_tokens_per_second(s, a, lengths)
        rows.append({"scheme": s, "posenc_tokens_per_second": p, "torch_tokens_per_second": t,
                     "ratio": p / t, "posenc_tokens_per_cpu_second": pc,
                     "torch_tokens_per_cpu_second": tc, "cpu_ratio": pc / tc})
        print("%-11s %13.0f %13.0f %6.2fx %13.0f %13.0f %6.2fx" % (s, p, t, p / t, pc, tc, pc / tc),
              flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"threads": a.threads, "torch": torch.__version__, "config": vars(a),
                       "results": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
