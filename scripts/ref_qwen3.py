#!/usr/bin/env python3
"""Reference outputs from transformers (+ peft) for the native decoder parity tests (Qwen3, Qwen2.5, Llama-3;
the architecture comes from the checkpoint's config.json through AutoModelForCausalLM).

Usage: python3 scripts/ref_qwen3.py JOB.json
JOB = {
  "model": "<checkpoint dir>",      # every task may override it with its own "model"
  "inputs": {"input_ids": [[...]], "attention_mask": [[...]], "labels": [[...]]},   # right-padded batch
  "tasks": [
    {"kind": "make_peft_adapter", "out": DIR, "r": 4, "alpha": 8, "target_modules": [...] or "regex",
     "use_rslora": false, "seed": 1, "b_std": 0.05,
     "extra": {"exclude_modules": ..., "layers_to_transform": ..., "layers_pattern": ..., "rank_pattern": {...},
               "alpha_pattern": {...}, "lora_dropout": ...}},   # peft LoRA with random nonzero A and B, saved
    {"kind": "forward", "adapter": DIR or null, "out": PREFIX, "grads": true, "dtype": "float32"},
    {"kind": "read_adapter_config", "adapter": DIR, "out": FILE}   # peft's LoraConfig.from_pretrained(DIR),
        # its fields as JSON (sets as sorted lists), plus "lora_modules": {module: {"r", "scaling"}} of
        # PeftModel.from_pretrained(base, DIR) (what peft builds from the config)
  ]
}
A forward task loads the base model with transformers (dtype, default float32; eager attention), wraps it with
PeftModel.from_pretrained(adapter) when given, and writes
  PREFIX.logits.bin  float32 little-endian logits [B, T, V]
  PREFIX.json        {"shape": [B, T, V], "loss": CE, "grads": {peft_key: {"offset", "shape"}}}
  PREFIX.grads.bin   float32 LoRA grads of the mean next-token cross-entropy (labels != -100),
                     keys in saved-adapter form (base_model.model....lora_A.weight, no ".default").
"""
import json
import sys


def main():
    job = json.load(open(sys.argv[1]))
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    inp = job["inputs"]
    ids = torch.tensor(inp["input_ids"], dtype=torch.long)
    mask = torch.tensor(inp["attention_mask"], dtype=torch.long)
    labels = torch.tensor(inp["labels"], dtype=torch.long) if inp.get("labels") is not None else None

    def base(dtype="float32", model=None):
        return AutoModelForCausalLM.from_pretrained(model or job["model"], dtype=getattr(torch, dtype), attn_implementation="eager").eval()

    for task in job["tasks"]:
        tm = task.get("model")  # a task may name another checkpoint than the job's
        if task["kind"] == "make_peft_adapter":
            from peft import LoraConfig, get_peft_model
            torch.manual_seed(task.get("seed", 0))
            extra = dict(task.get("extra", {}))
            extra.setdefault("lora_dropout", 0.0)
            cfg = LoraConfig(r=task["r"], lora_alpha=task["alpha"], target_modules=task["target_modules"],
                             use_rslora=task.get("use_rslora", False), bias="none", task_type="CAUSAL_LM", **extra)
            pm = get_peft_model(base(model=tm), cfg)
            g = torch.Generator().manual_seed(task.get("seed", 0))
            with torch.no_grad():
                for n, p in pm.named_parameters():
                    if "lora_B" in n:
                        p.copy_(task.get("b_std", 0.05) * torch.randn(p.shape, generator=g))
            pm.save_pretrained(task["out"])
        elif task["kind"] == "forward":
            model = base(task.get("dtype", "float32"), tm)
            if task.get("adapter"):
                from peft import PeftModel
                model = PeftModel.from_pretrained(model, task["adapter"], is_trainable=True)
                model.eval()
            want_grads = bool(task.get("grads")) and labels is not None and task.get("adapter")
            for p in model.parameters():
                p.requires_grad_(False)
            lora = {}
            if want_grads:
                for n, p in model.named_parameters():
                    if "lora_" in n:
                        p.requires_grad_(True)
                        lora[n.replace(".default", "")] = p
            with torch.set_grad_enabled(bool(want_grads)):
                out = model(input_ids=ids, attention_mask=mask, labels=labels)
                loss = out.loss
                if want_grads:
                    loss.backward()
            logits = out.logits.detach().float().contiguous()
            prefix = task["out"]
            logits.numpy().astype("<f4").tofile(prefix + ".logits.bin")
            meta = {"shape": list(logits.shape), "loss": float(loss.detach()) if loss is not None else None, "grads": {}}
            if want_grads:
                off = 0
                with open(prefix + ".grads.bin", "wb") as f:
                    for k in sorted(lora):
                        gr = lora[k].grad.detach().float().contiguous()
                        f.write(gr.numpy().astype("<f4").tobytes())
                        meta["grads"][k] = {"offset": off, "shape": list(gr.shape)}
                        off += gr.numel()
            json.dump(meta, open(prefix + ".json", "w"))
        elif task["kind"] == "read_adapter_config":
            import dataclasses
            from peft import LoraConfig, PeftModel
            cfg = LoraConfig.from_pretrained(task["adapter"])
            out = {}
            for f in dataclasses.fields(cfg):
                v = getattr(cfg, f.name)
                if isinstance(v, set):
                    v = sorted(v)
                elif hasattr(v, "value"):  # enums (task_type, peft_type)
                    v = v.value
                try:
                    json.dumps(v)
                except TypeError:
                    v = repr(v)
                out[f.name] = v
            pm = PeftModel.from_pretrained(base(model=tm), task["adapter"])
            mods = {}
            for n, m in pm.named_modules():
                if hasattr(m, "lora_A") and "default" in getattr(m, "r", {}):
                    key = n.replace("base_model.model.", "", 1)
                    mods[key] = {"r": m.r["default"], "scaling": m.scaling["default"]}
            out["lora_modules"] = mods
            json.dump(out, open(task["out"], "w"), indent=1)
        else:
            raise SystemExit(f"unknown task kind {task['kind']}")
    print("ok")


if __name__ == "__main__":
    main()
