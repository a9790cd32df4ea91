#!/usr/bin/env python3
"""PyTorch side of bench/gpt_cpu_bench.sh: nanoGPT's GPT (model.py) trained on
the character-level Shakespeare corpus with nanoGPT's shakespeare_char recipe,
the same network as gcc-train's `make_models --char-gpt L,H,C,T,DROPOUT`
(models/char_gpt.c, models/models.h gcc_model_char_gpt_sized).

  VENV/bin/python bench/torch_gpt.py [--threads 2] [--compile]
      [--layers 4] [--heads 4] [--embd 128] [--block 64] [--batch 32]
      [--dropout 0] [--warmup-steps 10] [--steps 50]
      [--data data/shakespeare/input.txt] [--eval-every N] [--eval-batches K]
      [--device cpu|cuda] [--precision fp32|bf16] [--random-tokens [--vocab N]]

--device cuda (bench/gpu_check.sh's gpt check): the model, the batches and the
optimizer on the GPU (batches cut on the CPU, pinned and copied non-blocking
as nanoGPT's get_batch; AdamW fused=True as nanoGPT's configure_optimizers on
CUDA); TF32 stays off (PyTorch's default for matmuls), so fp32 is fp32.
--precision bf16: forward and loss under torch.autocast(device, bfloat16)
(nanoGPT's ctx; parameters, gradients and AdamW in fp32). --random-tokens:
no text file: --vocab ids (default 50257, GPT-2's) drawn uniformly with
torch's generator seeded 1337 (4M tokens, 10% of them the validation split),
for GPT-2 124M's shape (--layers 12 --heads 12 --embd 768 --block 1024).

Model (nanoGPT model.py, bias=True as models/char_gpt.c): token + position
embeddings, n_layer pre-LayerNorm blocks (c_attn one (3C, C) Linear split into
q, k, v; F.scaled_dot_product_attention(is_causal=True), nanoGPT's flash path;
c_proj; MLP c_fc 4C, nn.GELU() exact, c_proj), ln_f, lm_head tied to wte;
nanoGPT's _init_weights. Dropout --dropout on transformer.drop, resid_dropout,
mlp.dropout and the attention probabilities (nanoGPT's attn_dropout: SDPA's
dropout_p in training, gcc-train's fused Attention's dropout_p); the bench runs
both sides with dropout 0.

Recipe (config/train_shakespeare_char.py + train.py): AdamW lr 1e-3, betas
(0.9, 0.99), eps 1e-8, weight decay 0.1 on parameters of >= 2 dims only
(configure_optimizers' two groups; PyTorch's default foreach implementation on
the CPU), clip_grad_norm_ 1.0, get_lr (warmup 100, cosine to 1e-4 at 5000)
set before every step. Data: the file's sorted distinct bytes are the
vocabulary, the first 90% trains (prepare.py); get_batch: --batch windows of
--block + 1 tokens at random offsets (torch.randint), inputs and shifted
targets, as int64.

One step = get_batch, lr set, forward, loss, backward, clip_grad_norm_,
optimizer.step(), zero_grad(set_to_none=True) (nanoGPT's loop without
gradient accumulation). --compile: the model is torch.compile()d as nanoGPT's
compile=True (Inductor's C++ CPU backend); the compilation happens in the
first step, reported as compile_s (the first step's wall time).

--eval-batches K: nanoGPT's estimate_loss, the mean loss (model.eval(), no
gradients) over K random batches of the validation split (the last 10%),
every --eval-every N steps and after the last step, printed as
"step S: train loss L, val loss V" (gcc-train's own line); evaluation is
outside the timed span of a step.

--checkpoint FILE (bench/gpt_val_compare.sh --work-dir, for runs longer than
a sitting): every --checkpoint-every N steps (default 100) and after the last,
the model, the optimizer, the step and torch's RNG state (the batches' and the
dropout masks' source) are written to FILE atomically; a run started with an
existing FILE continues from it (bitwise the uninterrupted run on the same
machine and threads) and one whose FILE holds the last step only says so. A
FILE written with other arguments is refused. CPU only.

Output: key=value lines: step_ms (median of the --steps timed steps after
--warmup-steps), tokens_per_s (batch * block / median step), first_loss,
last_loss, compile_s (with --compile), peak_rss_mb (getrusage ru_maxrss at the
end: the interpreter and libtorch included); on --device cuda also
peak_gpu_mb (torch.cuda.max_memory_allocated: the caching allocator's
tensors, not its reserve nor the CUDA context). On cuda the step's
loss.item() waits for the GPU, so the wall time of a step is its GPU time.
"""
import argparse
import math
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, c, h, dropout):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c)
        self.c_attn = nn.Linear(c, 3 * c)
        self.attn_proj = nn.Linear(c, c)
        self.ln_2 = nn.LayerNorm(c)
        self.c_fc = nn.Linear(c, 4 * c)
        self.gelu = nn.GELU()
        self.mlp_proj = nn.Linear(4 * c, c)
        self.resid_dropout = nn.Dropout(dropout)
        self.mlp_dropout = nn.Dropout(dropout)
        self.dropout = dropout
        self.n_head = h

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q = q.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        k = k.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        v = v.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0.0, is_causal=True
        )
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        x = x + self.resid_dropout(self.attn_proj(y))
        x = x + self.mlp_dropout(self.mlp_proj(self.gelu(self.c_fc(self.ln_2(x)))))
        return x


class GPT(nn.Module):
    def __init__(self, vocab, block, n_layer, n_head, n_embd, dropout):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block, n_embd)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList([Block(n_embd, n_head, dropout) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("attn_proj.weight") or name.endswith("mlp_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init_weights(m):
        if isinstance(m, nn.Linear):
            torch.nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                torch.nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            torch.nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for blk in self.h:
            x = blk(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def get_lr(it, lr=1e-3, warmup=100, decay_iters=5000, min_lr=1e-4):
    if it < warmup:
        return lr * (it + 1) / (warmup + 1)
    if it > decay_iters:
        return min_lr
    ratio = (it - warmup) / (decay_iters - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


def ckpt_args(a):
    """The arguments a --checkpoint must have been written with to be resumed."""
    keep = ("threads", "layers", "heads", "embd", "block", "batch", "dropout", "warmup_steps", "steps",
            "data", "eval_every", "eval_batches", "precision", "random_tokens", "vocab")
    return {k: getattr(a, k) for k in keep}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--embd", type=int, default=128)
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--warmup-steps", type=int, default=10)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--data", default="data/shakespeare/input.txt")
    ap.add_argument("--eval-every", type=int, default=0)
    ap.add_argument("--eval-batches", type=int, default=0)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--random-tokens", action="store_true")
    ap.add_argument("--vocab", type=int, default=None)
    ap.add_argument("--checkpoint", default=None)
    ap.add_argument("--checkpoint-every", type=int, default=100)
    a = ap.parse_args()
    if a.checkpoint is not None and (a.device != "cpu" or a.compile):
        ap.error("--checkpoint is for the long CPU runs (eager, --device cpu)")
    if a.checkpoint_every < 1:
        ap.error("--checkpoint-every must be positive")
    if a.vocab is not None and not a.random_tokens:
        ap.error("--vocab N goes with --random-tokens (a text file's vocabulary is its bytes)")
    if a.vocab is not None and a.vocab < 1:
        ap.error("--vocab must be positive")
    if a.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch.cuda.is_available() is False")
    dev = torch.device(a.device)
    torch.set_num_threads(a.threads)
    torch.manual_seed(1337)

    if a.random_tokens:
        vocab = a.vocab if a.vocab is not None else 50257
        n_tok = 4 * 1024 * 1024
        all_ids = torch.randint(0, vocab, (n_tok,), generator=torch.Generator().manual_seed(1337))
        n_train = int(0.9 * n_tok)
        ids, val_ids = all_ids[:n_train], all_ids[n_train:]
    else:
        raw = open(a.data, "rb").read()
        chars = sorted(set(raw))
        vocab = len(chars)
        table = bytearray(256)
        for i, ch in enumerate(chars):
            table[ch] = i
        enc = bytearray(raw.translate(bytes(table)))
        n_train = int(0.9 * len(raw))
        ids = torch.frombuffer(enc[:n_train], dtype=torch.uint8).long()
        val_ids = torch.frombuffer(enc[n_train:], dtype=torch.uint8).long()
    if a.device == "cuda":
        ctx = torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.precision == "bf16")
    else:
        ctx = torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16")

    def get_batch(src=None):
        src = ids if src is None else src
        ix = torch.randint(len(src) - a.block, (a.batch,))
        x = torch.stack([src[i : i + a.block] for i in ix])
        y = torch.stack([src[i + 1 : i + 1 + a.block] for i in ix])
        if a.device == "cuda":  # nanoGPT's get_batch
            x = x.pin_memory().to(dev, non_blocking=True)
            y = y.pin_memory().to(dev, non_blocking=True)
        return x, y

    @torch.no_grad()
    def estimate_val_loss():  # nanoGPT's estimate_loss on the validation split
        model.eval()
        with ctx:
            losses = [model(*get_batch(val_ids)).item() for _ in range(a.eval_batches)]
        model.train()
        return sum(losses) / len(losses)

    model = GPT(vocab, a.block, a.layers, a.heads, a.embd, a.dropout).to(dev)
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=1e-3,
        betas=(0.9, 0.99),
        eps=1e-8,
        **({"fused": True} if a.device == "cuda" else {}),
    )
    fwd = torch.compile(model) if a.compile else model

    times = []
    first_loss = last_loss = None
    compile_s = None
    start = 0
    if a.checkpoint is not None and os.path.exists(a.checkpoint):
        ck = torch.load(a.checkpoint, weights_only=False)
        if ck["args"] != ckpt_args(a):
            sys.exit(f"torch_gpt.py: --checkpoint {a.checkpoint}: written by a run with other arguments "
                     f"({ck['args']}); remove it or pass the same ones")
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        torch.set_rng_state(ck["rng"])
        start, first_loss, last_loss = ck["step"], ck["first_loss"], ck["last_loss"]
        print(f"resuming from {a.checkpoint}: step {start}", flush=True)
    for it in range(start, a.warmup_steps + a.steps):
        t0 = time.perf_counter()
        x, y = get_batch()
        for g in opt.param_groups:
            g["lr"] = get_lr(it)
        with ctx:
            loss = fwd(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        lv = loss.item()
        dt = time.perf_counter() - t0
        if it == 0:
            first_loss = lv
            if a.compile:
                compile_s = dt
        if it >= a.warmup_steps:
            times.append(dt)
        last_loss = lv
        done = it + 1
        if a.eval_batches and ((a.eval_every and done % a.eval_every == 0) or done == a.warmup_steps + a.steps):
            print(f"step {done}: train loss {lv:.4f}, val loss {estimate_val_loss():.4f}", flush=True)
        if a.checkpoint is not None and (done % a.checkpoint_every == 0 or done == a.warmup_steps + a.steps):
            tmp = a.checkpoint + ".tmp"
            torch.save({"args": ckpt_args(a), "step": done, "model": model.state_dict(),
                        "opt": opt.state_dict(), "rng": torch.get_rng_state(),
                        "first_loss": first_loss, "last_loss": last_loss}, tmp)
            os.replace(tmp, a.checkpoint)  # atomic: a killed run leaves the previous checkpoint
    if not times:
        print(f"step {a.warmup_steps + a.steps}: already done in {a.checkpoint}")
        return
    med = statistics.median(times)
    print(f"step_ms={med * 1e3:.3f}")
    print(f"tokens_per_s={a.batch * a.block / med:.0f}")
    print(f"first_loss={first_loss:.4f}")
    print(f"last_loss={last_loss:.4f}")
    if compile_s is not None:
        print(f"compile_s={compile_s:.1f}")
    if a.device == "cuda":
        print(f"peak_gpu_mb={torch.cuda.max_memory_allocated() / 2**20:.1f}")
    print(f"peak_rss_mb={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f}")
    print(f"torch={torch.__version__}")


if __name__ == "__main__":
    main()
