#!/usr/bin/env python3
"""The kit's GPT-2 training step on one GPU beside PyTorch's own on the same card.

    python3 bench/gpu.py --build build-gpu                       # GPT-2 124M, T = 1024, batch 16
    python3 bench/gpu.py --build build --device cpu --preset tiny --batch-size 2 --seq-len 32 --steps 3
                                                                 # the same runs on a CPU (a check of the script)

Each run is its own process, one after the other on the same device, with the same model, batch,
AdamW (lr 1e-4, weight decay 0.01), dropout and intra-op threads, synthetic tokens (uniform
ids, drawn differently by the kit and here: compare speed and memory, not losses):

  kit fp32          build/train_parallel --optimizer adamw, one rank (kit::AdamW; on CUDA the
                    fused kernel and scaled_dot_product_attention, model/attention.h)
  torch same-ops    bench/baseline.py's GPT2: the kit's ops one for one (manual attention,
                    AdamW one parameter at a time), fp32
  torch eager       the same model with scaled_dot_product_attention and fused AdamW, fp32
  torch bf16        + bf16 autocast (fp32 weights, optimizer state and loss)
  torch compile     + torch.compile (CUDA only)

For each: tokens/s over the timed steps, model TFLOP/s (6 N + 12 L T C flops per token, N the
parameters: the PaLM paper's count, attention included), and the peak tensor bytes
(torch.cuda.max_memory_allocated; the kit's from kit/memory.h, which reads the same allocator).
The ratios are taken in this one run; runs/gpu/summary.json and summary.md hold everything.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PRESETS = {"gpt2": (12, 768, 12, 1024), "cpu-base": (6, 256, 8, 128), "cpu-small": (4, 128, 4, 128),
           "tiny": (2, 32, 2, 128)}
TORCH_RUNS = ["torch same-ops", "torch eager", "torch bf16", "torch compile"]


def flops_per_token(n_params, n_layer, seq_len, n_embd):
    return 6 * n_params + 12 * n_layer * seq_len * n_embd


# ---------------------------------------------------------------- one PyTorch run (a child)
def torch_run(args, name):
    import torch
    import torch.nn.functional as F
    sys.path.insert(0, HERE)
    import baseline

    sdpa = name != "torch same-ops"
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)  # as the kit's --threads (what matters on a CPU)

    class Attention(baseline.CausalSelfAttention):
        def forward(self, x):
            B, T, C = x.shape
            q, k, v = [t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                       for t in self.c_attn(x).split(C, dim=2)]
            p = self.attn_dropout.p if self.training else 0.0
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
            return self.resid_dropout(self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C)))

    L, C, H, n_pos = PRESETS[args.preset]
    torch.manual_seed(args.seed)
    model = baseline.GPT2(L, C, H, max(n_pos, args.seq_len), args.vocab_size, dropout=args.dropout)
    if sdpa:
        for block in model.h:
            old = block.attn
            block.attn = Attention(C, H, args.dropout)
            block.attn.load_state_dict(old.state_dict())
    model.to(device).train()
    fused = sdpa and device.type == "cuda"
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01,
                                  **({"fused": True} if fused else {"foreach": sdpa}))
    step_model = torch.compile(model) if name == "torch compile" else model
    bf16 = name in ("torch bf16", "torch compile")
    g = torch.Generator().manual_seed(args.seed)
    idx = torch.randint(args.vocab_size, (args.steps, args.batch_size, args.seq_len + 1), generator=g)
    mask = torch.ones(args.batch_size, args.seq_len, dtype=torch.bool, device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times, losses = [], []
    for k in range(args.steps):
        x, y = idx[k, :, :-1].to(device), idx[k, :, 1:].to(device)
        sync()
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = step_model(x)
        loss = baseline.masked_cross_entropy(logits.float(), y, mask)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())  # waits for the step, as the kit's loss.item<double>() does
        sync()
        times.append(time.perf_counter() - t0)
    timed = times[args.warmup:]
    n_params = sum(p.numel() for p in model.parameters())
    return {"tokens_per_sec": args.batch_size * args.seq_len * len(timed) / sum(timed),
            "peak_bytes": torch.cuda.max_memory_allocated() if device.type == "cuda" else None,
            "parameters": n_params, "losses": losses, "torch": torch.__version__}


# ---------------------------------------------------------------- the kit's run
def kit_run(args, out_dir):
    d = os.path.join(out_dir, "kit")
    os.makedirs(d, exist_ok=True)
    cmd = [os.path.join(args.build, "train_parallel"), "--optimizer", "adamw",
           "--preset", args.preset, "--batch-size", str(args.batch_size), "--seq-len", str(args.seq_len),
           "--vocab-size", str(args.vocab_size), "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--dropout", str(args.dropout), "--seed", str(args.seed), "--weight-decay", "0.01",
           "--threads", str(args.threads), "--backend", "nccl" if args.device.startswith("cuda") else "gloo",
           "--no-progress", "--out", os.path.join(d, "rank{rank}.json")]
    subprocess.run(cmd, check=True, timeout=args.timeout, stdout=sys.stderr)
    m = json.load(open(os.path.join(d, "rank0.json")))
    return {"tokens_per_sec": m["tokens_per_sec"], "peak_bytes": m.get("peak_tensor_bytes"),
            "parameters": m["parameter_count"], "losses": m["losses"], "command": " ".join(cmd)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("--build", default="build", help="the kit's build directory (its train_parallel)")
    ap.add_argument("--device", default="cuda", help="cuda (the GPU the kit's rank 0 takes) or cpu")
    ap.add_argument("--preset", default="gpt2", choices=sorted(PRESETS))
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--vocab-size", type=int, default=50257)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5, help="untimed first steps (torch.compile compiles in them)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--threads", type=int, default=1, help="the kit's intra-op threads (CPU runs)")
    ap.add_argument("--runs", nargs="+", default=["kit fp32"] + TORCH_RUNS,
                    help="which runs (names as above; torch compile only on CUDA)")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per run")
    ap.add_argument("--out", default="runs/gpu")
    ap.add_argument("--child", help=argparse.SUPPRESS)  # one PyTorch run in this process: its name
    args = ap.parse_args(argv)
    if args.warmup >= args.steps:
        ap.error(f"--warmup {args.warmup} leaves no timed step of --steps {args.steps}: make --steps larger")
    if args.child:
        print(json.dumps(torch_run(args, args.child)))
        return 0
    os.makedirs(args.out, exist_ok=True)
    results = {}
    for name in args.runs:
        if name == "torch compile" and not args.device.startswith("cuda"):
            print(f"{name}: skipped (CUDA only)", file=sys.stderr)
            continue
        print(f"== {name}", file=sys.stderr, flush=True)
        if name == "kit fp32":
            results[name] = kit_run(args, args.out)
        else:
            child = [sys.executable, os.path.abspath(__file__), "--child", name] + (argv if argv is not None else sys.argv[1:])
            p = subprocess.run(child, check=True, timeout=args.timeout, capture_output=True, text=True)
            results[name] = json.loads(p.stdout.strip().splitlines()[-1])
    L, C, H, _ = PRESETS[args.preset]
    for r in results.values():
        r["model_tflops"] = r["tokens_per_sec"] * flops_per_token(r["parameters"], L, args.seq_len, C) / 1e12
    def ratio(a, b):
        return results[a]["tokens_per_sec"] / results[b]["tokens_per_sec"] if a in results and b in results else None
    ratios = {"kit fp32 / torch same-ops": ratio("kit fp32", "torch same-ops"),
              "kit fp32 / torch eager": ratio("kit fp32", "torch eager"),
              "kit fp32 / torch bf16": ratio("kit fp32", "torch bf16"),
              "kit fp32 / torch compile": ratio("kit fp32", "torch compile")}
    if "kit fp32" in results and "torch same-ops" in results and results["kit fp32"]["peak_bytes"] \
            and results["torch same-ops"]["peak_bytes"]:
        ratios["kit peak bytes / torch same-ops peak bytes"] = \
            results["kit fp32"]["peak_bytes"] / results["torch same-ops"]["peak_bytes"]
    summary = {"device": args.device, "preset": args.preset, "batch_size": args.batch_size, "seq_len": args.seq_len,
               "steps": args.steps, "warmup": args.warmup, "runs": results, "ratios": ratios}
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    lines = [f"# GPT-2 `{args.preset}` on {args.device}, batch {args.batch_size} x {args.seq_len} tokens", "",
             "| run | tokens/s | model TFLOP/s | peak tensor MiB | last loss |", "|---|---:|---:|---:|---:|"]
    for name, r in results.items():
        peak = f"{r['peak_bytes'] / 2**20:.0f}" if r.get("peak_bytes") else "-"
        lines.append(f"| {name} | {r['tokens_per_sec']:,.0f} | {r['model_tflops']:.2f} | {peak} | {r['losses'][-1]:.4f} |")
    lines += ["", "| ratio | value |", "|---|---:|"]
    lines += [f"| {k} | {v:.3f} |" for k, v in ratios.items() if v is not None]
    open(os.path.join(args.out, "summary.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
