#!/usr/bin/env python3
"""PyTorch peer of `trainbench train`: the same GPT-2, trained the way PyTorch trains it at its best.

A benchmark baseline, not product code (tests/perf/README.md, "gpu_vs_pytorch.sh"). The model is trainbench's
shape exactly: pre-LayerNorm decoder blocks (eps 1e-5), learned positions over the preset's context, causal
attention, GELU with the tanh approximation, the LM head tied to the token embedding over the padded vocabulary
(rows rounded up to a multiple of 128, models/model_config.cc; the loss over the real vocabulary only), cross-entropy,
AdamW with trainbench's betas 0.9/0.95, eps 1e-8, weight decay 0.1 on matrices and embeddings only (not on biases or
LayerNorm), a constant learning rate (models/transformer.h AdamWConfig, models/layout.cc AdamWRanges). Initial weights
follow trainbench's scheme (normals of std 0.02, the two projections into the residual stream 0.02/sqrt(2L), biases 0,
LayerNorm gains 1, the vocabulary's padding rows 0); `--init exact` draws trainbench's own stream (splitmix64,
Box-Muller), and `--data exact` its synthetic tokens, so that a CPU run in fp32 gives trainbench's losses.

On a GPU: fp32 master weights, bf16 autocast (as trainbench's CUDA model: bf16 weights and activations, fp32 master
weights, gradients and AdamW state), fused AdamW, attention through F.scaled_dot_product_attention(is_causal=True).
Variants: eager, and compiled (torch.compile; "PyTorch's best"). Each variant builds a fresh model from the same
seed, runs --warmup-steps untimed steps (the compile happens there) and --steps timed ones (CUDA events around each
step, one synchronisation after the last), and prints one line `peer_result {json}` with tokens/s, ms per step and
MFU under trainbench's FLOP convention (6*N_matmul + 6*L*T*d per token, DESIGN.md "MFU") against the device's dense
bf16 peak as trainbench looks it up by name (models/peaks.cc).

  python3 tests/perf/pytorch_gpt2.py --model gpt2-124m --micro-batch 16 --steps 20              # on a GPU
  python3 tests/perf/pytorch_gpt2.py --device cpu --model tiny --micro-batch 4 --steps 5 --init exact --data exact
"""
import argparse
import json
import math
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# name: (layers, d_model, heads, vocab, seq), as models/model_config.cc's kPresets; mlp ratio 4 for all.
PRESETS = {
    "tiny": (2, 128, 4, 4096, 256),
    "gpt2-124m": (12, 768, 12, 50257, 1024),
    "gpt2-350m": (24, 1024, 16, 50257, 1024),
    "gpt2-774m": (36, 1280, 20, 50257, 1024),
    "gpt2-1.5b": (48, 1600, 25, 50257, 1024),
    "gpt-2.7b": (32, 2560, 32, 50257, 1024),
    "gpt-6.7b": (32, 4096, 32, 50257, 1024),
    "gpt-13b": (40, 5120, 40, 50257, 1024),
    "gpt-70b": (80, 8192, 64, 50257, 1024),
}
VOCAB_ALIGNMENT = 128  # model_config.cc kVocabAlignment
LAYER_NORM_EPS = 1e-5  # cpu_kernels.h kLayerNormEpsilon
INIT_STDDEV = 0.02
ADAMW_BETAS = (0.9, 0.95)  # transformer.h AdamWConfig
ADAMW_EPS = 1e-8
WEIGHT_DECAY = 0.1

# Dense bf16 peaks by a substring of the device name, the more specific first (models/peaks.cc kPeaks).
PEAKS = [("H200", 989e12), ("H100 PCIe", 756e12), ("H100", 989e12), ("A100", 312e12)]


def padded_vocab(vocab):
    return (vocab + VOCAB_ALIGNMENT - 1) // VOCAB_ALIGNMENT * VOCAB_ALIGNMENT


def flops_per_token(layers, c, vocab, seq):
    """models/model_config.cc ModelFlopsPerToken: 6*N_matmul + 6*L*T*C, N_matmul over the real vocabulary."""
    n_matmul = layers * (3 * c * c + c * c + 4 * c * c + 4 * c * c) + vocab * c
    return 6.0 * n_matmul + 6.0 * layers * seq * c


# --- trainbench's random streams (src/core/random.h), for --init exact and --data exact -------------------------
SPLITMIX_INCREMENT = np.uint64(0x9E3779B97F4A7C15)


def splitmix64(x):
    """SplitMix64 over an array of uint64 states (wrapping arithmetic, as in C++)."""
    with np.errstate(over="ignore"):
        x = x + SPLITMIX_INCREMENT
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def stream_states(start, count):
    with np.errstate(over="ignore"):
        return np.uint64(start) + np.arange(count, dtype=np.uint64) * SPLITMIX_INCREMENT


def trainbench_normals(seed, first, count):
    """Normals first..first+count of models/layout.cc's stream (Box-Muller over splitmix64 uniforms), unscaled."""
    pair0, pair1 = first // 2, (first + count + 1) // 2
    with np.errstate(over="ignore"):
        index = np.uint64(2) * np.arange(pair0, pair1, dtype=np.uint64)
        u1 = 1.0 - (splitmix64(np.uint64(seed) + index * SPLITMIX_INCREMENT) >> np.uint64(11)) * 2.0**-53
        u2 = (splitmix64(np.uint64(seed) + (index + np.uint64(1)) * SPLITMIX_INCREMENT) >> np.uint64(11)) * 2.0**-53
    radius = np.sqrt(-2.0 * np.log(u1))
    normals = np.empty(2 * (pair1 - pair0))
    normals[0::2] = radius * np.cos(6.283185307179586 * u2)
    normals[1::2] = radius * np.sin(6.283185307179586 * u2)
    return normals[first - 2 * pair0:first - 2 * pair0 + count]


def trainbench_batch(seed, step, sequences, seq, vocab):
    """models/train_loop.cc SyntheticBatch for rank 0: inputs and targets (sequences, seq) as int64."""
    state = seed ^ (step << 8)
    draws = (splitmix64(stream_states(state, sequences * (seq + 1))) % np.uint64(vocab)).astype(np.int64)
    windows = draws.reshape(sequences, seq + 1)
    return windows[:, :-1].copy(), windows[:, 1:].copy()


# --- the model ---------------------------------------------------------------------------------------------------
class Block(nn.Module):
    def __init__(self, c, heads, attention):
        super().__init__()
        self.heads, self.attention = heads, attention
        self.ln1 = nn.LayerNorm(c, eps=LAYER_NORM_EPS)
        self.qkv = nn.Linear(c, 3 * c)         # (3C, C): q, k, v, each heads x head_dim
        self.attn_proj = nn.Linear(c, c)       # (C, C)
        self.ln2 = nn.LayerNorm(c, eps=LAYER_NORM_EPS)
        self.fc = nn.Linear(c, 4 * c)          # (4C, C)
        self.mlp_proj = nn.Linear(4 * c, c)    # (C, 4C)

    def forward(self, x):  # x (B, T, C)
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))  # (B, H, T, hd)
        if self.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # the textbook product, for reference
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            y = scores.masked_fill(mask, float("-inf")).softmax(dim=-1) @ v
        x = x + self.attn_proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Head(nn.Module):
    """Final LayerNorm, the tied LM head over the padded vocabulary, and the loss over the real one."""

    def __init__(self, c, vocab):
        super().__init__()
        self.vocab = vocab
        self.lnf = nn.LayerNorm(c, eps=LAYER_NORM_EPS)

    def forward(self, x, wte, targets):
        logits = F.linear(self.lnf(x), wte)  # (B, T, Vp)
        return F.cross_entropy(logits[..., :self.vocab].reshape(-1, self.vocab), targets.reshape(-1))


class Gpt(nn.Module):
    def __init__(self, layers, c, heads, vocab, positions, attention):
        super().__init__()
        self.wte = nn.Embedding(padded_vocab(vocab), c)  # (Vp, C), tied to the LM head
        self.wpe = nn.Embedding(positions, c)            # (T_model, C)
        self.blocks = nn.ModuleList(Block(c, heads, attention) for _ in range(layers))
        self.head = Head(c, vocab)

    def forward(self, idx, targets):  # idx, targets (B, T)
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(x, self.wte.weight, targets)


def slots(model):
    """The parameters in trainbench's layout order (models/layout.cc MakeLayout) with their role."""
    yield "wte", model.wte.weight
    yield "wpe", model.wpe.weight
    for blk in model.blocks:
        for name, p in (("ln1.weight", blk.ln1.weight), ("ln1.bias", blk.ln1.bias), ("attn.qkv.weight", blk.qkv.weight),
                        ("attn.qkv.bias", blk.qkv.bias), ("attn.proj.weight", blk.attn_proj.weight),
                        ("attn.proj.bias", blk.attn_proj.bias), ("ln2.weight", blk.ln2.weight),
                        ("ln2.bias", blk.ln2.bias), ("mlp.fc.weight", blk.fc.weight), ("mlp.fc.bias", blk.fc.bias),
                        ("mlp.proj.weight", blk.mlp_proj.weight), ("mlp.proj.bias", blk.mlp_proj.bias)):
            yield name, p
    yield "lnf.weight", model.head.lnf.weight
    yield "lnf.bias", model.head.lnf.bias


def decays(name):
    """AdamW decay as trainbench's layout marks it: matrices and embeddings, not biases or LayerNorm."""
    return name in ("wte", "wpe") or name.endswith(("qkv.weight", "proj.weight", "fc.weight"))


@torch.no_grad()
def initialise(model, layers, vocab, seed, exact):
    """trainbench's scheme (models/layout.cc SlotFills); exact: its very stream, slot by slot in layout order."""
    residual_stddev = float(np.float32(INIT_STDDEV) / np.sqrt(np.float32(2.0 * layers)))
    device = model.wte.weight.device
    generator = torch.Generator(device=device).manual_seed(seed)
    drawn = 0  # normals the slots before have drawn (exact)
    for name, p in slots(model):
        if not decays(name):
            p.fill_(1.0 if name.endswith(".weight") else 0.0)
            continue
        stddev = residual_stddev if name.endswith(".proj.weight") else INIT_STDDEV
        rows = vocab if name == "wte" else p.shape[0]  # wte's padding rows stay 0
        count = rows * p.shape[1]
        if exact:
            values = (trainbench_normals(seed, drawn, count) * np.float64(np.float32(stddev))).astype(np.float32)
            p[:rows].copy_(torch.from_numpy(values.reshape(rows, p.shape[1])))
            drawn += count
        else:
            p[:rows].normal_(0.0, stddev, generator=generator)
        p[rows:].zero_()


def make_optimizer(model, lr, device):
    decay = [p for name, p in slots(model) if decays(name)]
    no_decay = [p for name, p in slots(model) if not decays(name)]
    groups = [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}]
    fused = device.type == "cuda"
    return torch.optim.AdamW(groups, lr=lr, betas=ADAMW_BETAS, eps=ADAMW_EPS, fused=fused), fused


def device_peak(device):
    if device.type != "cuda":
        return None, "cpu"  # trainbench has no CPU peak either
    name = torch.cuda.get_device_name(device)
    for match, flops in PEAKS:
        if match in name:
            return flops, name
    return None, name


def dynamo_graphs():
    from torch._dynamo.utils import counters
    return int(counters["stats"]["unique_graphs"])


# --- one variant -------------------------------------------------------------------------------------------------
def run_variant(args, variant, device, shape):
    layers, c, heads, vocab, positions = shape
    seq = args.seq or positions
    torch.manual_seed(args.seed)
    setup_start = time.perf_counter()
    with device:  # built and drawn on the device: 1.5B parameters take seconds there, minutes on one CPU core
        model = Gpt(layers, c, heads, vocab, positions, args.attention)
    initialise(model, layers, vocab, args.seed, args.init == "exact")
    optimizer, fused = make_optimizer(model, args.lr, device)
    forward = model
    if variant == "compiled":
        if args.compile_scope == "model":
            forward = torch.compile(model, mode=args.compile_mode)
        else:  # regional: one compile of a block serves all (same code, parameters as inputs), and one of the head
            for block in model.blocks:
                block.compile(mode=args.compile_mode)
            model.head.compile(mode=args.compile_mode)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    setup_s = time.perf_counter() - setup_start

    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16")
    sequences = args.micro_batch * args.grad_accum
    rng = np.random.default_rng(args.seed)
    total = args.warmup_steps + args.steps
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(total)] \
        if device.type == "cuda" else []
    host_s, losses = [], []
    for step in range(total):
        start = time.perf_counter()
        if events:
            events[step][0].record()
        # The step's tokens, made on the host and copied in, as trainbench's synthetic batch is.
        if args.data == "exact":
            inputs, targets = trainbench_batch(args.seed, step, sequences, seq, vocab)
        else:
            windows = rng.integers(0, vocab, size=(sequences, seq + 1), dtype=np.int64)
            inputs, targets = windows[:, :-1], windows[:, 1:]
        batch = torch.from_numpy(np.stack([inputs, targets]))
        if device.type == "cuda":
            batch = batch.pin_memory().to(device, non_blocking=True)
        step_loss = torch.zeros((), device=device)
        for micro in range(args.grad_accum):
            rows = slice(micro * args.micro_batch, (micro + 1) * args.micro_batch)
            with autocast:
                loss = forward(batch[0, rows], batch[1, rows])
            (loss / args.grad_accum).backward()
            step_loss += loss.detach() / args.grad_accum
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(step_loss)
        if events:
            events[step][1].record()
        else:
            host_s.append(time.perf_counter() - start)
    if events:
        torch.cuda.synchronize(device)
        step_s = [a.elapsed_time(b) / 1e3 for a, b in events]
    else:
        step_s = host_s
    losses = [float(x) for x in losses]

    for step in range(total):
        tag = "(warm-up)" if step < args.warmup_steps else "         "
        print(f"step {step:5d} {tag} | {variant:8s} | loss {losses[step]:.4f} | {step_s[step] * 1e3:10.2f} ms",
              flush=True)
    timed = step_s[args.warmup_steps:]
    tokens_per_step = sequences * seq
    mean_s = sum(timed) / len(timed)
    per_token = flops_per_token(layers, c, vocab, seq)
    peak, device_name = device_peak(device) if args.peak_flops is None else (args.peak_flops, "given")
    tokens_per_s = tokens_per_step / mean_s
    result = {
        "variant": variant, "attention": args.attention,
        "compile": f"{args.compile_scope}/{args.compile_mode or 'default'}" if variant == "compiled" else "",
        "model": args.model, "layers": layers, "preset_layers": PRESETS[args.model][0], "d_model": c,
        "heads": heads, "vocab": vocab, "vocab_padded": padded_vocab(vocab), "micro_batch": args.micro_batch,
        "seq": seq, "grad_accum": args.grad_accum, "tokens_per_step": tokens_per_step,
        "warmup_steps": args.warmup_steps, "steps": args.steps,
        "ms_per_step": mean_s * 1e3, "ms_per_step_median": statistics.median(timed) * 1e3,
        "ms_per_step_min": min(timed) * 1e3, "tokens_per_s": tokens_per_s,
        "flops_per_token": per_token, "peak_flops": peak,
        "mfu": tokens_per_s * per_token / peak if peak else None,
        "first_loss": losses[0], "last_loss": losses[-1], "ln_vocab": math.log(vocab),
        # The first warm-up step beyond a timed one: compiling (compiled) or first-use set-up (eager).
        "first_step_extra_s": step_s[0] - mean_s, "setup_s": setup_s,
        "peak_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None,
        "precision": "bf16 autocast, fp32 master weights" if args.precision == "bf16" else "fp32",
        "fused_adamw": fused, "init": args.init, "data": args.data, "device": device_name,
        "torch": torch.__version__,
        # Graphs dynamo compiled so far in this process (blocks scope: 2 when one compile served every block).
        "compiled_graphs": dynamo_graphs() if variant == "compiled" else None,
    }
    mfu = f"{result['mfu'] * 100:.1f}%" if result["mfu"] is not None else "n/a"
    graphs = "" if result["compiled_graphs"] is None else f"{result['compiled_graphs']} graphs, "
    print(f"# {variant}: {tokens_per_s:,.0f} tokens/s, {mean_s * 1e3:.2f} ms/step (median "
          f"{result['ms_per_step_median']:.2f}), MFU {mfu}, {graphs}loss {losses[0]:.4f} -> {losses[-1]:.4f} "
          f"(ln V {math.log(vocab):.4f}), first step {result['first_step_extra_s']:+.1f} s", flush=True)
    print("peer_result " + json.dumps(result), flush=True)
    del forward, model, optimizer, losses
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="gpt2-124m", choices=sorted(PRESETS), help="trainbench's preset")
    p.add_argument("--layers", type=int, help="run N layers of the preset's shape (as trainbench's --layers)")
    p.add_argument("--seq", type=int, help="tokens per sequence (default: the preset's)")
    p.add_argument("--micro-batch", type=int, default=4, help="sequences per micro-batch")
    p.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step")
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup-steps", type=int, default=3, help="untimed steps first (torch.compile compiles there)")
    p.add_argument("--variants", default="eager,compiled", help="comma-separated: eager, compiled")
    p.add_argument("--device", default="cuda", help="cuda or cpu")
    p.add_argument("--precision", choices=["bf16", "fp32"], help="default: bf16 on a GPU, fp32 on the CPU")
    p.add_argument("--attention", choices=["sdpa", "manual"], default="sdpa")
    p.add_argument("--compile-scope", choices=["model", "blocks"], default="model",
                   help="model: the whole forward; blocks: each block (one compile serves all) and the head")
    p.add_argument("--compile-mode", default=None, help="torch.compile mode (default: PyTorch's default)")
    p.add_argument("--lr", type=float, default=3e-4, help="AdamW learning rate (trainbench's default)")
    p.add_argument("--seed", type=int, default=1234, help="seed of the weights and tokens (trainbench's default)")
    p.add_argument("--init", choices=["scheme", "exact"], default="scheme",
                   help="scheme: trainbench's distributions from torch's generator; exact: trainbench's own stream")
    p.add_argument("--data", choices=["random", "exact"], default="random",
                   help="random tokens, or trainbench's synthetic tokens (rank 0)")
    p.add_argument("--peak-flops", type=float, help="peak FLOP/s for MFU (default: by device name, as trainbench)")
    args = p.parse_args(argv)
    for flag in ("micro_batch", "grad_accum", "steps"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} {getattr(args, flag)} must be at least 1")
    if args.warmup_steps < 0:
        p.error(f"--warmup-steps {args.warmup_steps} must be at least 0")
    layers, c, heads, vocab, positions = PRESETS[args.model]
    if args.layers is not None and args.layers < 1:
        p.error(f"--layers {args.layers} must be at least 1")
    if args.seq is not None and not 1 <= args.seq <= positions:
        p.error(f"--seq {args.seq} is outside 1..{positions}, the positions of model '{args.model}'")
    args.variant_list = [v for v in args.variants.split(",") if v]
    bad = [v for v in args.variant_list if v not in ("eager", "compiled")]
    if bad or not args.variant_list:
        p.error(f"--variants {args.variants}: accepted eager, compiled")
    if args.precision is None:
        args.precision = "fp32" if args.device == "cpu" else "bf16"
    return args


def main(argv):
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("pytorch_gpt2: --device cuda but torch sees no GPU (--device cpu runs on the CPU)", file=sys.stderr)
        return 2
    layers, c, heads, vocab, positions = PRESETS[args.model]
    shape = (args.layers or layers, c, heads, vocab, positions)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # fp32 matmuls outside autocast (none in bf16 runs)
    print(f"# pytorch_gpt2: torch {torch.__version__}, device {device_peak(device)[1]}, model {args.model} "
          f"({shape[0]} of {layers} layers, d {c}, {heads} heads, vocab {vocab} padded {padded_vocab(vocab)}), "
          f"micro-batch {args.micro_batch} x seq {args.seq or positions} x grad-accum {args.grad_accum}, "
          f"{args.precision}, attention {args.attention}", flush=True)
    failed = 0
    for variant in args.variant_list:
        try:
            run_variant(args, variant, device, shape)
        except Exception as error:  # one variant's failure (out of memory, a compile error) leaves the next to run
            failed += 1
            print(f"peer_failed {json.dumps({'variant': variant, 'error': f'{type(error).__name__}: {error}'[:2000]})}",
                  flush=True)
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
