#!/usr/bin/env python3
"""PyTorch's side of tests/perf/cpu_vs_pytorch.sh: a GPT-2 of trainbench's exact shape trained on the CPU.

The model is trainbench's (models/README.md): pre-LayerNorm blocks, learned positions, GELU (tanh), causal
attention (PyTorch's fused scaled_dot_product_attention), the LM head tied to wte, GPT-2's initialisation, AdamW
with trainbench's betas (0.9, 0.95), eps 1e-8 and weight decay 0.1 on the matrices and embeddings only (not on
biases and LayerNorms), lr 3e-4. One step = forward, loss, backward, AdamW, over a batch of random tokens, as
`trainbench train --backend cpu` runs it. Prints the median step time of the measured steps:

  median_step_s 0.123456 tokens_per_s 8300.1 threads 2 torch 2.x
"""
import argparse
import math
import statistics
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    sys.exit("pytorch_gpt2_cpu: PyTorch is not installed (python3 -m pip install torch)")


class Block(nn.Module):
    def __init__(self, d_model, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.fc_proj = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt2(nn.Module):
    def __init__(self, layers, d_model, heads, vocab, seq):
        super().__init__()
        self.wte = nn.Embedding(vocab, d_model)
        self.wpe = nn.Embedding(seq, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads) for _ in range(layers))
        self.lnf = nn.LayerNorm(d_model)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() >= 2:  # residual projections scaled by 1/sqrt(2·layers), as trainbench draws them
                std = 0.02 / math.sqrt(2 * layers) if name.endswith(("proj.weight",)) else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, tokens, targets):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1]))
        for block in self.blocks:
            x = block(x)
        logits = self.lnf(x) @ self.wte.weight.t()  # the LM head tied to wte
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def make_optimizer(model, lr, fused):
    decay = [p for p in model.parameters() if p.dim() >= 2]  # matrices and embeddings
    no_decay = [p for p in model.parameters() if p.dim() < 2]  # biases and LayerNorms
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=fused)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, required=True)
    parser.add_argument("--d-model", type=int, required=True)
    parser.add_argument("--heads", type=int, required=True)
    parser.add_argument("--vocab", type=int, required=True)
    parser.add_argument("--seq", type=int, required=True)
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup-steps", type=int, default=2)
    parser.add_argument("--threads", type=int, required=True, help="torch.set_num_threads")
    parser.add_argument("--adamw", choices=("fused", "foreach"), default="fused",
                        help="PyTorch's AdamW implementation (fused: its fastest on the CPU)")
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model = Gpt2(args.layers, args.d_model, args.heads, args.vocab, args.seq)
    optimizer = make_optimizer(model, 3e-4, args.adamw == "fused")
    tokens = torch.randint(0, args.vocab, (args.micro_batch, args.seq + 1))
    inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    times = []
    for step in range(args.warmup_steps + args.steps):
        start = time.perf_counter()
        loss = model(inputs, targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        elapsed = time.perf_counter() - start
        if step >= args.warmup_steps:
            times.append(elapsed)
    if not math.isfinite(loss.item()):
        sys.exit(f"pytorch_gpt2_cpu: loss {loss.item()} is not finite")
    median = statistics.median(times)
    print(f"median_step_s {median:.6f} tokens_per_s {args.micro_batch * args.seq / median:.1f} "
          f"threads {torch.get_num_threads()} torch {torch.__version__} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
