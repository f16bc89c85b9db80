#!/usr/bin/env python3
"""Reference greedy generations from transformers `generate` (golden fixture for
test/generate.test.ts).

Usage: python3 scripts/ref_generate.py --model DIR [--model DIR2 ...] --job JOB.json [--out FILE|-]

JOB: {"prompts": [[ids...], ...], "max_new_tokens": 64, "stop_ids": [..], "pad_id": 151643}
The prompts are left-padded with pad_id into one batch (attention_mask 0 on padding) and decoded
greedily (do_sample=False) in float32 on CPU with eos_token_id = stop_ids. Output JSON:
{"transformers": version, "completions": [[new ids...], ...]}: per prompt the generated ids up to
and including the first stop id (padding after it removed). With several --model flags (one process
for several checkpoints): {"transformers": version, "by_model": {DIR: completions, ...}}.
"""
import argparse
import json
import sys


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, action="append")
    ap.add_argument("--job", required=True)
    ap.add_argument("--out", default="-")
    a = ap.parse_args()

    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(int(__import__("os").environ.get("OMP_NUM_THREADS", "2")))
    with open(a.job) as f:
        job = json.load(f)
    prompts = job["prompts"]
    pad = int(job.get("pad_id", 0))
    stops = [int(s) for s in job.get("stop_ids", [])]
    max_new = int(job.get("max_new_tokens", 64))
    L = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), L), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), L), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, L - len(p):] = torch.tensor(p, dtype=torch.long)
        mask[i, L - len(p):] = 1

    def greedy(path):
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=max_new,
                                 min_new_tokens=0, eos_token_id=stops or None, pad_token_id=pad,
                                 temperature=None, top_k=None, top_p=None)
        comps = []
        for i in range(len(prompts)):
            row = [int(t) for t in out[i, L:]]
            cut = []
            for t in row:
                cut.append(t)
                if t in stops:
                    break
            comps.append(cut)
        return comps

    if len(a.model) == 1:
        s = json.dumps({"transformers": transformers.__version__, "completions": greedy(a.model[0])})
    else:
        s = json.dumps({"transformers": transformers.__version__, "by_model": {m: greedy(m) for m in a.model}})
    if a.out == "-":
        sys.stdout.write(s + "\n")
    else:
        with open(a.out, "w") as f:
            f.write(s + "\n")


if __name__ == "__main__":
    main()
