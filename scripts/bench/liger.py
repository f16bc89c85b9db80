#!/usr/bin/env python3
"""Liger-Kernel side of scripts/bench/losses_vs_liger.mjs: fused linear JSD
(LigerFusedLinearJSDLoss, weight_hard_loss 0, weight_soft_loss 1, beta 0.5, T 1) and fused linear
GRPO (LigerFusedLinearGRPOLoss, beta 0.04, eps 0.2/0.2, loss_type dapo, one sequence of T tokens,
old = ref logprobs = -5, advantage 1) over a frozen lm_head weight [V, H]: time of forward +
backward (grad of the student / policy hidden states only, weights frozen, as on our side) and
peak memory over the inputs.

Inputs are generated like ours (native/napi/loss.cc _benchLoss): weight randn/sqrt(H),
hidden states randn, in --dtype, on --device. Time: CUDA events per iteration, median of --iters
after --warmup (Liger compiles its chunk function with torch.compile on the first call: warm-up
excludes that). Peak: max_memory_allocated minus the bytes allocated after creating the inputs
(the "extra over inputs"), after reset_peak_memory_stats; and the total peak.

Usage: python3 scripts/bench/liger.py --T 8192 --V 151936 --H 2048 --dtype bfloat16 --device cuda
       [--kinds jsd,grpo] [--iters 5] [--warmup 2] [--no-compile]
Prints one JSON line {"liger": version | null, "error": str | null, "rows": [{kind, T, V, H, ms,
extra_peak_bytes, total_peak_bytes, loss}]}. If liger_kernel is not importable: rows = [] and
error says so (exit status 0, so the caller still prints its own numbers).
"""
import argparse
import json
import math


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, default=8192)
    ap.add_argument("--V", type=int, default=151936)
    ap.add_argument("--H", type=int, default=2048)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--kinds", default="jsd,grpo")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--no-compile", action="store_true")
    a = ap.parse_args()

    import torch

    try:
        import liger_kernel
        from liger_kernel.chunked_loss import LigerFusedLinearGRPOLoss, LigerFusedLinearJSDLoss
        version = getattr(liger_kernel, "__version__", None)
        if version is None:
            from importlib.metadata import version as _v
            version = _v("liger-kernel")
    except Exception as e:  # noqa: BLE001 - report any import problem, keep going
        print(json.dumps({"liger": None, "error": f"liger_kernel not importable: {type(e).__name__}: {e}", "rows": []}))
        return

    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    dt = getattr(torch, a.dtype)
    rows = []
    for kind in a.kinds.split(","):
        try:
            torch.manual_seed(0)
            with torch.no_grad():
                w = torch.randn(a.V, a.H, device=dev, dtype=dt) * (1.0 / math.sqrt(a.H))
                h = torch.randn(a.T, a.H, device=dev, dtype=dt)
                th = torch.randn(a.T, a.H, device=dev, dtype=dt)
                tok = torch.randint(0, a.V, (1, a.T), device=dev)
                old = torch.full((1, a.T), -5.0, device=dev)
                adv = torch.ones(1, device=dev)
                mask = torch.ones(1, a.T, device=dev)
                labels = torch.full((a.T,), -100, dtype=torch.long, device=dev)  # hard loss weight 0 anyway
            if kind == "jsd":
                fn = LigerFusedLinearJSDLoss(weight_hard_loss=0.0, weight_soft_loss=1.0, beta=0.5, temperature=1.0,
                                             compiled=not a.no_compile)

                def run():
                    x = h.detach().requires_grad_(True)
                    out = fn(x, w, th, w, tok.view(-1))
                    loss = out[0] if isinstance(out, tuple) else out
                    loss.backward()
                    return loss
            elif kind == "grpo":
                fn = LigerFusedLinearGRPOLoss(beta=0.04, compiled=not a.no_compile, use_ref_model=True, epsilon_low=0.2,
                                              epsilon_high=0.2, loss_type="dapo", temperature=1.0)

                def run():
                    x = h.detach().view(1, a.T, a.H).requires_grad_(True)
                    out = fn(x, w, tok, mask, adv, ref_per_token_logps=old, old_per_token_logps=old)
                    loss = out[0] if isinstance(out, tuple) else out
                    loss.backward()
                    return loss
            else:
                raise ValueError(f"unknown kind {kind}")
            del labels
            for _ in range(a.warmup):
                run()
            if cuda:
                torch.cuda.synchronize(dev)
                base = torch.cuda.memory_allocated(dev)
                torch.cuda.reset_peak_memory_stats(dev)
            times, loss = [], None
            for _ in range(a.iters):
                if cuda:
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    e0.record()
                    loss = run()
                    e1.record()
                    torch.cuda.synchronize(dev)
                    times.append(e0.elapsed_time(e1))
                else:
                    import time
                    t0 = time.perf_counter()
                    loss = run()
                    times.append((time.perf_counter() - t0) * 1000)
            times.sort()
            peak = torch.cuda.max_memory_allocated(dev) if cuda else None
            rows.append({"kind": kind, "T": a.T, "V": a.V, "H": a.H, "dtype": a.dtype, "ms": times[len(times) // 2],
                         "extra_peak_bytes": (peak - base) if cuda else None, "total_peak_bytes": peak, "loss": float(loss)})
            del w, h, th, fn
            if cuda:
                torch.cuda.empty_cache()
        except Exception as e:  # noqa: BLE001
            rows.append({"kind": kind, "T": a.T, "V": a.V, "H": a.H, "error": f"{type(e).__name__}: {e}"})
    print(json.dumps({"liger": version, "torch": torch.__version__, "error": None, "rows": rows}))


if __name__ == "__main__":
    main()
