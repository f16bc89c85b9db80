#!/usr/bin/env python3
"""transformers `generate` side of scripts/bench/generate.mjs (same prompts, same device, same
sampling: T 1, no top-k/top-p, exactly --new-tokens per row via min_new_tokens).

Usage: python3 scripts/bench/generate_ref.py --model DIR --prompts PROMPTS.json --device cpu|cuda
       --dtype bfloat16|float32 --new-tokens 256 [--threads N] [--attn sdpa|eager]
PROMPTS.json: {"batches": {"1": [[ids]...], "8": [...], ...}}. Prints JSON:
{"transformers", "torch", "results": [{"batch", "seconds", "new_tokens", "tokens_per_s", "peak_bytes"}]}.
"""
import argparse
import json
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--attn", default="sdpa")
    a = ap.parse_args()

    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    if a.threads:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=getattr(torch, a.dtype), attn_implementation=a.attn).to(dev).eval()
    with open(a.prompts) as f:
        batches = json.load(f)["batches"]

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    def run(prompts, new_tokens):
        L = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), L), 151643, dtype=torch.long)
        mask = torch.zeros((len(prompts), L), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, L - len(p):] = torch.tensor(p)
            mask[i, L - len(p):] = 1
        ids, mask = ids.to(dev), mask.to(dev)
        sync()
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                                 max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=151643)
        sync()
        return time.perf_counter() - t0, int(out.shape[0]) * (int(out.shape[1]) - L)

    torch.manual_seed(0)
    results = []
    for b in sorted(batches, key=int):
        run(batches[b], 4)  # warm-up (allocator, kernels) at this batch size
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
        secs, n = run(batches[b], a.new_tokens)
        peak = torch.cuda.max_memory_allocated(dev) if dev.type == "cuda" else None
        results.append({"batch": int(b), "seconds": secs, "new_tokens": n, "tokens_per_s": n / secs, "peak_bytes": peak})
    print(json.dumps({"transformers": transformers.__version__, "torch": torch.__version__, "results": results}))


if __name__ == "__main__":
    main()
