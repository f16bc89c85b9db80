#!/usr/bin/env python3
"""transformers + peft side of scripts/bench/train_step.mjs: one LoRA train step (forward +
backward of the causal-LM cross-entropy over all tokens + clip_grad_norm_(1.0) + torch AdamW, lr
1e-5, weight decay 0), LoRA r 64 / alpha 128 / dropout 0 on all seven projections, SDPA
attention, base weights in --dtype, on the same checkpoint and token ids as ours.

Usage: python3 scripts/bench/train_step_ref.py --model DIR --ids IDS.json --device cuda
       --dtype bfloat16 [--iters 5] [--warmup 2] [--grad-ckpt] [--autocast] [--threads N]
--autocast: forward under torch.autocast(bfloat16), as transformers' Trainer / TRL run with
bf16=True: peft's float32 LoRA weights then run their matmuls in bf16 (the counterpart of our
setLoraFloat32Branch(false)); without it peft's LoRA branch runs in float32.
IDS.json: [[ids of row 0], ...] ([B, T]); labels = ids (the model shifts them).
Prints one JSON line: {"seconds_per_step", "tokens_per_s", "loss", "peak_bytes",
"peak_reserved_bytes", "peak_kind", "transformers", "peft", "torch"}. Peak = max_memory_allocated
over the timed steps (after warm-up; weights, adapter, optimizer state, activations) on CUDA,
process max RSS on CPU. Timing: CUDA events around the timed steps, device synchronised.
"""
import argparse
import json
import resource
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--grad-ckpt", action="store_true")
    ap.add_argument("--autocast", action="store_true")
    ap.add_argument("--threads", type=int)
    a = ap.parse_args()

    import peft
    import torch
    import transformers
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    if a.threads:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=getattr(torch, a.dtype), attn_implementation="sdpa").to(dev)
    cfg = LoraConfig(r=64, lora_alpha=128, lora_dropout=0.0, bias="none", task_type="CAUSAL_LM",
                     target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    model = get_peft_model(model, cfg)
    if a.grad_ckpt:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-5, weight_decay=0.0)
    with open(a.ids) as f:
        ids = torch.tensor(json.load(f), dtype=torch.long, device=dev)

    import contextlib
    amp = (lambda: torch.autocast(device_type=dev.type, dtype=torch.bfloat16)) if a.autocast else contextlib.nullcontext

    def step():
        with amp():
            out = model(input_ids=ids, labels=ids, use_cache=False)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return out.loss

    loss = None
    for _ in range(a.warmup):
        loss = step()
    if cuda:
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
    t0 = time.perf_counter()
    for _ in range(a.iters):
        loss = step()
    if cuda:
        e1.record()
        torch.cuda.synchronize(dev)
        secs = e0.elapsed_time(e1) / 1000 / a.iters
        peak, peak_res, kind = torch.cuda.max_memory_allocated(dev), torch.cuda.max_memory_reserved(dev), "cuda-allocated"
    else:
        secs = (time.perf_counter() - t0) / a.iters
        peak, peak_res, kind = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, None, "max-rss"
    n_tok = ids.numel()
    print(json.dumps({"seconds_per_step": secs, "tokens_per_s": n_tok / secs, "loss": float(loss.detach()), "peak_bytes": peak,
                      "peak_reserved_bytes": peak_res, "peak_kind": kind, "transformers": transformers.__version__,
                      "peft": peft.__version__, "torch": torch.__version__, "grad_ckpt": a.grad_ckpt,
                      "autocast": a.autocast}))


if __name__ == "__main__":
    main()
