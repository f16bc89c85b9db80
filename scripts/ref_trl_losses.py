#!/usr/bin/env python3
"""Reference values from TRL's own code for the papergym-native loss parity tests.

Usage: ref_trl_losses.py INPUT.json [OUTPUT.json]   (OUTPUT defaults to stdout)

INPUT holds a list of `cases`; each case has `kind` and plain nested lists:
  jsd:   studentHidden [N,H], teacherHidden [N,H], weight [V,H], mask [N], beta, temperature
         -> TRL `GKDTrainer.generalized_jsd_loss` (trl.experimental.gkd) called on
            logits = hidden @ weight.T with labels = -100 where mask == 0, reduction "batchmean";
            returns loss and d loss / d studentHidden (autograd through TRL's function).
  grpo:  hidden [B,T,H], weight [V,H], tokens [B,T], oldLogprobs [B,T], refLogprobs [B,T],
         advantages [B], mask [B,T], epsLow, epsHigh, klCoef, temperature, aggregation,
         maxCompletionLength
         -> TRL `GRPOTrainer._compute_loss` itself, run unbound on a minimal stub trainer whose
            `_get_per_token_logps_and_entropies` returns TRL's `selective_log_softmax(logits / T)`
            on logits = hidden @ weight.T (what the trainer does after its model forward). One
            optimizer window with gradient accumulation 1. Returns the loss, d loss / d hidden and
            the metrics TRL logs (kl, clip_ratio/low_mean, high_mean, region_mean).
  advantages: rewards [B], groupSize, scale ("group" | "batch" | "none")
         -> TRL's formula from `GRPOTrainer._generate_and_score_completions` (sum_then_normalize),
            which is inline in that method: reproduced here with TRL's own `nanstd`.
  adamw: params [[...]...] (flat lists), shapes, grads per step [[...]...], lr, betas, eps,
         weightDecay, maxGradNorm, schedule {type, warmupSteps, totalSteps}
         -> torch.optim.AdamW + torch.nn.utils.clip_grad_norm_ + transformers'
            get_{constant,linear,cosine}_schedule_with_warmup (LambdaLR).
Everything is computed in float64 unless the case says "dtype": "float32".
"""
import json
import sys
import types
from collections import defaultdict

import torch

from trl.experimental.gkd.gkd_trainer import GKDTrainer
from trl.trainer.grpo_trainer import GRPOTrainer
from trl.trainer.utils import nanstd, selective_log_softmax


def T(x, dtype):
    return torch.tensor(x, dtype=dtype)


def run_jsd(c, dt):
    sh = T(c["studentHidden"], dt).requires_grad_(True)
    th = T(c["teacherHidden"], dt)
    w = T(c["weight"], dt)
    mask = T(c["mask"], dt)
    labels = torch.where(mask != 0, torch.zeros_like(mask, dtype=torch.long), torch.full_like(mask, -100, dtype=torch.long))
    s_logits = (sh @ w.T).unsqueeze(0)
    t_logits = (th @ w.T).unsqueeze(0)
    loss = GKDTrainer.generalized_jsd_loss(
        s_logits, t_logits, labels=labels.unsqueeze(0), beta=c["beta"], temperature=c["temperature"], reduction="batchmean"
    )
    loss.backward()
    return {"loss": loss.item(), "gradStudentHidden": sh.grad.reshape(-1).tolist()}


class _Accel:
    num_processes = 1

    def gather(self, x):
        return x

    def gather_for_metrics(self, x):
        return x

    def reduce(self, x, reduction="sum"):
        return x


def run_grpo(c, dt):
    hidden = T(c["hidden"], dt).requires_grad_(True)
    w = T(c["weight"], dt)
    tokens = torch.tensor(c["tokens"], dtype=torch.long)
    B, Tn = tokens.shape
    mask = T(c["mask"], dt).to(torch.long)
    temperature = c["temperature"]

    stub = types.SimpleNamespace()
    stub.top_entropy_quantile = 1.0
    stub.off_policy_mask_threshold = None
    stub.importance_sampling_level = "token"
    stub.beta = c["klCoef"]
    stub.loss_type = c["aggregation"]
    stub.epsilon_low = c["epsLow"]
    stub.epsilon_high = c["epsHigh"]
    stub.use_vllm = False
    stub.vllm_importance_sampling_correction = False
    stub.model = types.SimpleNamespace(training=True)
    stub.current_gradient_accumulation_steps = 1
    stub.accelerator = _Accel()
    stub.args = types.SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=1)
    stub._entropy_bonus_enabled = False
    stub.aux_loss_enabled = False
    stub.max_completion_length = c["maxCompletionLength"]
    stub._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    stub.temperature = temperature

    def per_token_logps(model, input_ids, attention_mask, logits_to_keep, compute_entropy=False, **kw):
        logits = hidden @ w.T / temperature  # what TRL does after the forward: logits / self.temperature
        logps = selective_log_softmax(logits, tokens)
        ent = torch.zeros_like(logps)
        return logps, ent, None

    stub._get_per_token_logps_and_entropies = per_token_logps
    inputs = {
        "prompt_ids": torch.zeros(B, 0, dtype=torch.long),
        "prompt_mask": torch.zeros(B, 0, dtype=torch.long),
        "completion_ids": tokens,
        "completion_mask": mask,
        "advantages": T(c["advantages"], dt),
        "old_per_token_logps": T(c["oldLogprobs"], dt),
        "ref_per_token_logps": T(c["refLogprobs"], dt),
        "num_items_in_batch": mask.sum().to(dt),
    }
    loss = GRPOTrainer._compute_loss(stub, None, inputs)
    loss.backward()
    m = stub._metrics["train"]
    return {
        "loss": loss.item(),
        "gradHidden": hidden.grad.reshape(-1).tolist(),
        "meanKl": m["kl"][0] if "kl" in m else 0.0,
        "clipLow": m["clip_ratio/low_mean"][0],
        "clipHigh": m["clip_ratio/high_mean"][0],
        "clipRegion": m["clip_ratio/region_mean"][0],
    }


def run_advantages(c, dt):
    rewards = T(c["rewards"], dt)
    G = c["groupSize"]
    scale = c["scale"]
    mean = torch.nanmean(rewards.view(-1, G), dim=1).repeat_interleave(G, dim=0)
    if scale in ("group", "none"):
        std = nanstd(rewards.view(-1, G), dim=1).repeat_interleave(G, dim=0)
    else:
        std = nanstd(rewards).expand_as(rewards)
    adv = rewards - mean
    if scale != "none":
        adv = adv / (std + 1e-4)
    return {"advantages": adv.tolist()}


def run_adamw(c, dt):
    from transformers import (get_constant_schedule_with_warmup, get_cosine_schedule_with_warmup,
                              get_linear_schedule_with_warmup)

    params = [torch.nn.Parameter(T(p, dt).reshape(s)) for p, s in zip(c["params"], c["shapes"])]
    opt = torch.optim.AdamW(params, lr=c["lr"], betas=tuple(c["betas"]), eps=c["eps"], weight_decay=c["weightDecay"],
                            foreach=False)
    s = c["schedule"]
    if s["type"] == "constant":
        sched = get_constant_schedule_with_warmup(opt, s.get("warmupSteps", 0))
    elif s["type"] == "linear":
        sched = get_linear_schedule_with_warmup(opt, s.get("warmupSteps", 0), s["totalSteps"])
    else:
        sched = get_cosine_schedule_with_warmup(opt, s.get("warmupSteps", 0), s["totalSteps"])
    norms, lrs = [], []
    for step_grads in c["grads"]:
        for p, g in zip(params, step_grads):
            p.grad = T(g, dt).reshape(p.shape)
        lrs.append(opt.param_groups[0]["lr"])
        if c.get("maxGradNorm", 0) > 0:
            norms.append(torch.nn.utils.clip_grad_norm_(params, c["maxGradNorm"]).item())
        else:
            norms.append(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params])).item())
        opt.step()
        sched.step()
    st = opt.state_dict()["state"]
    return {
        "params": [p.detach().reshape(-1).tolist() for p in params],
        "gradNorms": norms,
        "lrs": lrs,
        "expAvg": [st[i]["exp_avg"].reshape(-1).tolist() for i in range(len(params))],
        "expAvgSq": [st[i]["exp_avg_sq"].reshape(-1).tolist() for i in range(len(params))],
    }


RUN = {"jsd": run_jsd, "grpo": run_grpo, "advantages": run_advantages, "adamw": run_adamw}


def main():
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    out = []
    for c in spec["cases"]:
        dt = torch.float32 if c.get("dtype") == "float32" else torch.float64
        r = RUN[c["kind"]](c, dt)
        r["kind"] = c["kind"]
        out.append(r)
    text = json.dumps({"trl": __import__("trl").__version__, "torch": torch.__version__, "results": out})
    if len(sys.argv) > 2:
        with open(sys.argv[2], "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
