#!/usr/bin/python3
"""The Python baseline for the kit's benchmark: the same GPT-2 training step as the
C++ `build/bench`, in plain PyTorch, with the same command line and the same JSON line.

Run it with Debian's interpreter, which has python3-torch 1.13 (the LibTorch the C++
kit links against); a `python3` from pyenv on PATH usually has no torch:

    /usr/bin/python3 bench/baseline.py --config pp --preset tiny --steps 3 --warmup 1

Configurations (the same names as the C++ bench):
  single       one process
  indep        2 processes each running `single` at once, no communication (the
               ceiling data parallelism can reach on this machine); tokens/s summed
  dp           2 ranks on Gloo, all_reduce of every gradient then / world size
               (the original assignment's average_gradients)
  dp_bucketed  2 ranks, the model in torch.nn.parallel.DistributedDataParallel
               (bucketed all-reduce overlapped with backward), bucket_cap_mb = --bucket-mb
  mp           the model cut in 2 stages as GPT2ModelParallel places it, run in one
               thread: stage after stage, the whole batch at once
  pp           the same 2 stages as worker threads, the batch cut into micro-batches
               and scheduled by clock_cycles (the original's Pipe)

stdout gets exactly one JSON line; everything else goes to stderr.
"""
import argparse
import datetime
import json
import math
import os
import queue
import resource
import socket
import sys
import threading
import time
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = ["single", "indep", "dp", "dp_bucketed", "mp", "pp"]
# starter/kit/config.cpp: (n_layer, n_embd, n_head, n_positions); vocab comes from --vocab
PRESETS = {
    "tiny": (2, 32, 2, 128),
    "cpu-small": (4, 128, 4, 128),
    "cpu-base": (6, 256, 8, 128),
}
WORLD = 2          # processes for indep / dp / dp_bucketed
STAGES = 2         # stages for mp / pp
DIST_TIMEOUT_S = 60  # a collective whose peer died gives up after this, instead of hanging
RUN_TIMEOUT_S = float(os.environ.get("BENCH_TIMEOUT", "1800"))  # whole multi-process run


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------
# The model: starter/model/gpt2.cpp, op for op, with Hugging Face's names.

class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, dropout):
        super().__init__()
        assert n_embd % n_head == 0, f"n_embd ({n_embd}) must be divisible by n_head ({n_head})"
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x):
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = [t.view(B, T, self.n_head, hs).transpose(1, 2) for t in self.c_attn(x).split(C, dim=2)]
        # Manual softmax attention, as the C++ does (no scaled_dot_product_attention).
        att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(diagonal=1)
        att = att.masked_fill(future, float("-inf"))
        att = self.attn_dropout(torch.softmax(att, -1))
        y = torch.matmul(att, v).transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, n_embd, dropout):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))  # GPT-2's tanh GELU


class Block(nn.Module):
    def __init__(self, n_embd, n_head, dropout, eps):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd, eps=eps)
        self.attn = CausalSelfAttention(n_embd, n_head, dropout)
        self.ln_2 = nn.LayerNorm(n_embd, eps=eps)
        self.mlp = MLP(n_embd, dropout)

    def forward(self, x):  # pre-norm residual block
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    def __init__(self, n_layer, n_embd, n_head, n_positions, vocab_size,
                 dropout=0.1, eps=1e-5, init_std=0.02):
        super().__init__()
        self.n_layer, self.n_positions, self.vocab_size, self.init_std = n_layer, n_positions, vocab_size, init_std
        # Registration order = parameter order = the C++ order, so the same seed draws
        # the same initial weights from the same CPU generator.
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(n_positions, n_embd)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList([Block(n_embd, n_head, dropout, eps) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd, eps=eps)
        # No lm_head module: the head is F.linear(x, wte.weight), so parameters()
        # lists the tied weight once and data parallelism reduces it once.
        self.init_weights()

    @torch.no_grad()
    def init_weights(self):
        # GPT-2's init; the residual projections shrink by 1/sqrt(2 L) so depth does
        # not grow the residual stream. Same name tests as GPT2Impl::init_weights.
        resid_std = self.init_std / math.sqrt(2.0 * self.n_layer)
        for name, t in self.named_parameters():
            if "ln_" in name:
                t.fill_(1.0) if name.endswith("weight") else t.zero_()
            elif name.endswith("bias"):
                t.zero_()
            elif "c_proj.weight" in name:
                t.normal_(0.0, resid_std)
            else:
                t.normal_(0.0, self.init_std)

    def embed(self, idx):
        T = idx.size(1)
        assert T <= self.n_positions, f"{T} tokens > n_positions {self.n_positions}"
        # The C++ checks the id range on every call (two reductions and two syncs): so do we.
        lo, hi = idx.min().item(), idx.max().item()
        if lo < 0 or hi >= self.vocab_size:
            raise ValueError(f"token id {lo if lo < 0 else hi} outside [0, {self.vocab_size})")
        pos = torch.arange(T, dtype=torch.long, device=idx.device)
        return self.drop(self.wte(idx) + self.wpe(pos))

    def head(self, hidden):
        return F.linear(self.ln_f(hidden), self.wte.weight)  # lm_head tied to wte

    def forward(self, idx):
        x = self.embed(idx)
        for block in self.h:
            x = block(x)
        return self.head(x)


def count_parameters(model):
    # model.parameters() already yields a shared tensor once: the tied weight counts once.
    return sum(p.numel() for p in model.parameters())


def masked_cross_entropy(logits, labels, mask):
    """starter/train/loss.cpp: mean over examples of the mean loss over unmasked tokens."""
    V = logits.size(-1)
    token_loss = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), reduction="none")
    m = mask.to(torch.float32)
    token_loss = token_loss.view(labels.shape) * m
    per_example = token_loss.sum(1) / m.sum(1).clamp_min(1.0)  # clamp: no NaN for an empty row
    return per_example.mean()


def make_optimizer(model, lr=1e-4, weight_decay=0.0):
    # LibTorch's AdamWOptions(lr).weight_decay(wd): betas (0.9, 0.999), eps 1e-8, no amsgrad.
    # foreach=False: one parameter at a time, like the C++ AdamW::step loop.
    return torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8,
                             weight_decay=weight_decay, amsgrad=False, foreach=False)


# ----------------------------------------------------------------------------------------
# Model parallel and the pipeline (the original's pipeline/{model_parallel,pipe,worker}.py).

def blocks_per_stage(n_blocks, n_stages):
    """The first n_blocks % n_stages stages get one block more (pipeline/parallelize.cpp)."""
    if n_stages < 1 or n_stages > n_blocks:
        raise ValueError(f"{n_stages} stages for {n_blocks} blocks: use 1..{n_blocks} stages")
    counts = [n_blocks // n_stages] * n_stages
    for j in range(n_blocks % n_stages):
        counts[j] += 1
    return counts


def clock_cycles(num_batches, num_partitions):
    """Micro-batch i is at partition j on clock i + j; each clock lists its (i, j) by j."""
    m, n = num_batches, num_partitions
    for k in range(m + n - 1):
        yield [(k - j, j) for j in range(max(0, k - m + 1), min(k, n - 1) + 1)]


class Task:
    """A unit of work for a worker thread; grad mode is per thread, so carry the caller's."""
    def __init__(self, step, compute):
        self.step, self._compute, self.grad_enabled = step, compute, torch.is_grad_enabled()

    def compute(self):
        with torch.set_grad_enabled(self.grad_enabled):
            return self._compute()


def worker(in_queue, out_queue, threads):
    # OpenMP's thread count is per thread: give this stage its own, as the C++ worker does.
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    while True:
        task = in_queue.get()
        if task is None:
            break
        try:
            out_queue.put((True, (task.step, task.compute())))
        except Exception:  # send every error back: the caller gets one result per task
            out_queue.put((False, (task.step, sys.exc_info())))


class Pipe(nn.Module):
    """Runs a list of partitions (nn.Sequential each) over micro-batches of split_size rows,
    one worker thread per partition, clock by clock."""
    def __init__(self, partitions, split_size, threads):
        super().__init__()
        self.partitions = nn.ModuleList(partitions)
        self.split_size = split_size
        self.in_queues = [queue.Queue() for _ in partitions]
        self.out_queues = [queue.Queue() for _ in partitions]
        self.threads = [threading.Thread(target=worker, args=(i, o, threads), daemon=True)
                        for i, o in zip(self.in_queues, self.out_queues)]
        for t in self.threads:
            t.start()

    def forward(self, x):
        batches = list(x.split(self.split_size, dim=0))  # 10 rows in 4s: 4, 4, 2
        for schedule in clock_cycles(len(batches), len(self.partitions)):
            self.compute(batches, schedule)
        return torch.cat(batches, dim=0)

    def compute(self, batches, schedule):
        # Put every step of the clock in flight first, then collect: else nothing overlaps.
        for i, j in schedule:
            def compute_fn(batch=batches[i], partition=self.partitions[j]):
                return partition(batch)
            self.in_queues[j].put(Task((i, j), compute_fn))
        first_error = None
        for _, j in schedule:
            ok, (step, payload) = self.out_queues[j].get()
            if not ok:
                first_error = first_error or payload
                continue
            batches[step[0]] = payload
        if first_error:
            raise first_error[1].with_traceback(first_error[2])

    def close(self):
        for q in self.in_queues:
            q.put(None)
        for t in self.threads:
            t.join(timeout=10)


class GPT2ModelParallel(nn.Module):
    """Stage 0: wte, wpe and the first blocks; the last stage: the last blocks and ln_f; the
    tied head where wte is. On a CPU every stage is the same device, so placement is only
    the partition of the blocks: mp runs it in one thread, pp through a Pipe."""
    def __init__(self, model, n_stages):
        super().__init__()
        self.model = model
        counts = blocks_per_stage(len(model.h), n_stages)
        self.block_stage = [j for j, c in enumerate(counts) for _ in range(c)]
        self.pipe = None

    def prepare_pipeline_parallel(self, split_size, threads):
        # Consecutive blocks of one stage form one partition (split_module's result).
        blocks = list(self.model.h)
        partitions, start = [], 0
        for c in blocks_per_stage(len(blocks), max(self.block_stage) + 1):
            partitions.append(nn.Sequential(*blocks[start:start + c]))
            start += c
        self.pipe = Pipe(partitions, split_size, threads)

    def forward(self, idx):
        x = self.model.embed(idx)
        if self.pipe is not None:
            x = self.pipe(x)
        else:
            for block in self.model.h:
                x = block(x)
        return self.model.head(x)


# ----------------------------------------------------------------------------------------
# Data, one step, the timed loop.

def make_batches(args, rank, n=4):
    """Synthetic token rows: the same shapes as the corpus, no tokenizer needed."""
    g = torch.Generator().manual_seed(args.seed + rank)
    out = []
    for _ in range(n):
        t = torch.randint(0, args.vocab, (args.batch_size, args.seq_len + 1), generator=g, dtype=torch.int64)
        out.append((t[:, :-1], t[:, 1:], torch.ones(args.batch_size, args.seq_len)))
    return out


def average_gradients(model, world_size):
    """The original's average_gradients: SUM-all_reduce every gradient, divide by the world."""
    import torch.distributed as dist
    for p in model.parameters():
        if p.grad is None:  # a missing gradient still takes part, or the ranks' calls misalign
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
        p.grad.div_(world_size)


def train_step(forward, model, optimizer, batch, world_size, manual_allreduce):
    """project/utils.cpp train_step. Returns (loss, seconds spent in the all-reduce calls)."""
    inp, labels, mask = batch
    optimizer.zero_grad(set_to_none=False)  # LibTorch 1.13's zero_grad zeroes in place
    loss = masked_cross_entropy(forward(inp), labels, mask)
    loss.backward()  # with DDP, the bucketed all-reduce runs inside this call
    comm = 0.0
    if manual_allreduce:
        t0 = time.perf_counter()
        average_gradients(model, world_size)
        comm = time.perf_counter() - t0
    optimizer.step()
    return loss.item(), comm  # the C++ returns loss.item<double>() too (a sync point)


def set_threads(n):
    torch.set_num_threads(n)
    try:  # inter-op threads can be set once per process, before any parallel work
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass


def run_one(args, config, rank=0, world_size=1, barrier=None):
    """Build, warm up and time one process's training. Returns this process's measurements."""
    set_threads(args.threads)
    n_layer, n_embd, n_head, n_pos = PRESETS[args.preset]
    torch.manual_seed(args.seed)  # build_model: seed, then the model (dropout uses it too)
    model = GPT2(n_layer, n_embd, n_head, n_pos, args.vocab)
    n_params = count_parameters(model)
    n_wpe = model.wpe.weight.numel()

    manual_allreduce = False
    pipe_model = None
    if config in ("dp", "dp_bucketed"):
        import torch.distributed as dist
        # Everyone starts from rank 0's weights (here they are equal already, by the seed).
        for p in model.parameters():
            dist.broadcast(p.data, src=0)
        if config == "dp":
            manual_allreduce = True
            train_model = model
        else:
            train_model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_mb)
    elif config in ("mp", "pp"):
        pipe_model = GPT2ModelParallel(model, STAGES)
        if config == "pp":
            split = -(-args.batch_size // args.chunks)  # ceil(B / chunks) rows per micro-batch
            micro = -(-args.batch_size // split)
            if micro != args.chunks:
                log(f"note: {args.batch_size} rows in micro-batches of {split} make {micro} micro-batches, "
                    f"not {args.chunks}")
            pipe_model.prepare_pipeline_parallel(split, args.threads)
        train_model = pipe_model
    else:
        train_model = model

    model.train()
    optimizer = make_optimizer(model)
    batches = make_batches(args, rank)
    tokens_per_step = args.batch_size * args.seq_len
    try:
        for k in range(args.warmup):
            train_step(train_model, model, optimizer, batches[k % len(batches)], world_size, manual_allreduce)
        if barrier is not None:  # indep: start the timed part together, so both really overlap
            barrier.wait(timeout=DIST_TIMEOUT_S)
        times, comms = [], []
        for k in range(args.warmup, args.warmup + args.steps):
            t0 = time.perf_counter()
            loss, comm = train_step(train_model, model, optimizer, batches[k % len(batches)], world_size,
                                    manual_allreduce)
            times.append(time.perf_counter() - t0)
            comms.append(comm)
            if not math.isfinite(loss):
                raise FloatingPointError(f"rank {rank}: loss is {loss} at step {k}")
    finally:
        if pipe_model is not None and pipe_model.pipe is not None:
            pipe_model.pipe.close()
    return {
        "rank": rank,
        "times": times,
        "comm_time_s": (sum(comms) / len(comms)) if config == "dp" else (None if config == "dp_bucketed" else 0.0),
        "tokens": tokens_per_step * len(times),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,  # KiB on Linux
        "n_params": n_params,
        "n_wpe": n_wpe,
        "n_layer": n_layer,
        "n_embd": n_embd,
        "last_loss": loss,
    }


# ----------------------------------------------------------------------------------------
# Processes for indep / dp / dp_bucketed.

def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def exit_with_parent(parent_pid):
    """A rank whose launcher died (even by SIGKILL) ends itself instead of lingering."""
    def watch():
        while True:
            if os.getppid() != parent_pid:
                os._exit(3)
            time.sleep(1.0)
    threading.Thread(target=watch, daemon=True).start()


def rank_main(args, config, rank, world_size, port, results, barrier, parent_pid):
    exit_with_parent(parent_pid)
    try:
        if config in ("dp", "dp_bucketed"):
            import torch.distributed as dist
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # the C++ uses loopback for a local world too
            dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                    world_size=world_size, timeout=datetime.timedelta(seconds=DIST_TIMEOUT_S))
        if os.environ.get("BENCH_FAIL_RANK") == str(rank):  # test hook: a rank that dies
            raise RuntimeError(f"rank {rank} fails on purpose (BENCH_FAIL_RANK)")
        r = run_one(args, config, rank, world_size, barrier)
        results.put(("ok", rank, r))
        if config in ("dp", "dp_bucketed"):
            torch.distributed.destroy_process_group()
    except BaseException:
        results.put(("error", rank, traceback.format_exc()))
        results.close()
        results.join_thread()  # flush the message to the parent before the hard exit
        sys.stderr.flush()
        os._exit(1)


def run_ranks(args, config):
    """Start WORLD processes, collect one result from each; stop them all if one fails."""
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    barrier = ctx.Barrier(WORLD) if config == "indep" else None
    port = free_port()
    procs = [ctx.Process(target=rank_main, args=(args, config, r, WORLD, port, results, barrier, os.getpid()),
                         daemon=True) for r in range(WORLD)]
    for p in procs:
        p.start()
    got, error = {}, None
    deadline = time.monotonic() + RUN_TIMEOUT_S
    try:
        while len(got) < WORLD and error is None:
            try:
                status, rank, payload = results.get(timeout=0.5)
                if status == "ok":
                    got[rank] = payload
                else:
                    error = f"rank {rank} failed:\n{payload}"
            except queue.Empty:
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead and results.empty():
                    error = f"rank {procs.index(dead[0])} exited with code {dead[0].exitcode}"
                elif time.monotonic() > deadline:
                    error = f"timed out after {RUN_TIMEOUT_S:.0f} s (BENCH_TIMEOUT)"
        if error is None:
            for p in procs:
                p.join(timeout=30)
    finally:
        for p in procs:  # never leave a rank behind, whatever happened
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
    if error:
        raise RuntimeError(error)
    return [got[r] for r in range(WORLD)]


# ----------------------------------------------------------------------------------------

def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", choices=CONFIGS, default="single")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--batch-size", type=int, default=32, help="rows per step per rank")
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads per process (per stage for pp)")
    ap.add_argument("--chunks", type=int, default=4, help="pp micro-batches: split size = ceil(batch / chunks)")
    ap.add_argument("--bucket-mb", type=float, default=1.0, help="dp_bucketed: DDP's bucket_cap_mb")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=1000, help="vocabulary size (the kit's SentencePiece size)")
    args = ap.parse_args(argv)
    n_pos = PRESETS[args.preset][3]
    checks = [
        (args.steps >= 1, f"--steps must be at least 1 (got {args.steps})"),
        (args.warmup >= 0, f"--warmup must be >= 0 (got {args.warmup})"),
        (args.batch_size >= 1, f"--batch-size must be at least 1 (got {args.batch_size})"),
        (args.threads >= 1, f"--threads must be at least 1 (got {args.threads})"),
        (args.chunks >= 1, f"--chunks must be at least 1 (got {args.chunks})"),
        (args.config != "pp" or args.chunks <= args.batch_size,
         f"--chunks {args.chunks} is more micro-batches than the batch has rows ({args.batch_size})"),
        (args.bucket_mb > 0, f"--bucket-mb must be positive (got {args.bucket_mb})"),
        (1 <= args.seq_len <= n_pos,
         f"--seq-len must be in 1..{n_pos} (the preset's n_positions), got {args.seq_len}"),
        (args.vocab >= 1, f"--vocab must be at least 1 (got {args.vocab})"),
    ]
    for ok, msg in checks:
        if not ok:
            ap.error(msg)
    return args


def main(argv=None):
    args = parse_args(argv)
    config = args.config
    if config in ("indep", "dp", "dp_bucketed"):
        ranks = run_ranks(args, config)
        if config == "indep":  # each process alone: its own rate, summed
            tokens_per_s = sum(r["tokens"] / sum(r["times"]) for r in ranks)
        else:  # lock-stepped by the collectives: all tokens over the slowest rank's time
            tokens_per_s = sum(r["tokens"] for r in ranks) / max(sum(r["times"]) for r in ranks)
    else:
        ranks = [run_one(args, config)]
        tokens_per_s = ranks[0]["tokens"] / sum(ranks[0]["times"])
    r0 = ranks[0]
    N = r0["n_params"] - r0["n_wpe"]  # wte stays: it is also the head's matmul
    flops_per_token = 6 * N + 6 * r0["n_layer"] * r0["n_embd"] * args.seq_len
    log(f"[python] {config} {args.preset}: {tokens_per_s:.0f} tok/s, last loss "
        + ", ".join(f"{r['last_loss']:.4f}" for r in ranks))
    out = {
        "impl": "python",
        "config": config,
        "preset": args.preset,
        "ranks": len(ranks),
        "stages": STAGES if config in ("mp", "pp") else 1,
        "threads": args.threads,
        "batch_size": args.batch_size,
        "seq_len": args.seq_len,
        "chunks": args.chunks,
        "steps": args.steps,
        "warmup": args.warmup,
        "tokens_per_s": tokens_per_s,
        "step_time_s": sum(r0["times"]) / len(r0["times"]),
        "step_time_min_s": min(r0["times"]),
        "comm_time_s": r0["comm_time_s"],
        "peak_rss_mb": [round(r["peak_rss_mb"], 1) for r in ranks],
        "n_params": r0["n_params"],
        "flops_per_token": flops_per_token,
    }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as e:
        log(traceback.format_exc())
        log(f"error: {e}")
        sys.exit(1)
