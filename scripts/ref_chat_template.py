#!/usr/bin/env python3
"""Reference chat renderings from transformers' apply_chat_template (golden fixture for
test/chat.test.ts).

Usage: python3 scripts/ref_chat_template.py --tokenizer DIR --cases CONVERSATIONS.json [--out FILE|-]
       [--chat-template-jinja FILE]

For each case {name, messages, add_generation_prompt, enable_thinking?, tools?} writes
{name, text, ids}: the rendered prompt text and the token ids of
apply_chat_template(..., tokenize=True) (the template writes the special tokens; nothing else is
added). enable_thinking and tools are passed only when the case sets them; the cases file is read
with Python's json, so a `1.0` in `tools` is a float (rendered `1.0` by the template's tojson).
--chat-template-jinja: the tokenizer is loaded from a copy of DIR with FILE written beside it as
chat_template.jinja (transformers then uses it instead of tokenizer_config.json's template).
Output: JSON
{"tokenizer": basename, "transformers": version, "cases": [...]}.
"""
import argparse
import json
import os
import sys


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True, help="directory with tokenizer.json + tokenizer_config.json")
    ap.add_argument("--cases", required=True, help="JSON list of conversations")
    ap.add_argument("--out", default="-", help="output JSON file, '-' for stdout")
    ap.add_argument("--chat-template-jinja", default=None, help="write this file as chat_template.jinja beside a copy of the tokenizer")
    a = ap.parse_args()

    import shutil
    import tempfile

    import transformers
    from transformers import AutoTokenizer

    src = a.tokenizer
    tmp = None
    if a.chat_template_jinja:
        tmp = tempfile.mkdtemp(prefix="pg-chat-")
        for f in os.listdir(a.tokenizer):
            if os.path.isfile(os.path.join(a.tokenizer, f)):
                shutil.copy(os.path.join(a.tokenizer, f), tmp)
        shutil.copy(a.chat_template_jinja, os.path.join(tmp, "chat_template.jinja"))
        src = tmp
    tok = AutoTokenizer.from_pretrained(src)
    if tmp:
        shutil.rmtree(tmp)
    with open(a.cases, encoding="utf-8") as f:
        cases = json.load(f)
    out = []
    for c in cases:
        kw = {"add_generation_prompt": bool(c.get("add_generation_prompt", True))}
        if "enable_thinking" in c:
            kw["enable_thinking"] = bool(c["enable_thinking"])
        if "tools" in c:
            kw["tools"] = c["tools"]
        text = tok.apply_chat_template(c["messages"], tokenize=False, **kw)
        enc = tok.apply_chat_template(c["messages"], tokenize=True, **kw)
        ids = enc["input_ids"] if hasattr(enc, "keys") else enc
        ids = [int(i) for i in ids]
        out.append({"name": c["name"], "text": text, "ids": ids})
    doc = {"tokenizer": os.path.basename(os.path.normpath(a.tokenizer)), "transformers": transformers.__version__, "cases": out}
    # one case per line keeps the fixture diffable
    head = json.dumps({k: v for k, v in doc.items() if k != "cases"}, ensure_ascii=False)[:-1]
    s = head + ', "cases": [\n' + ",\n".join(json.dumps(c, ensure_ascii=False) for c in out) + "\n]}"
    if a.out == "-":
        sys.stdout.write(s + "\n")
    else:
        with open(a.out, "w", encoding="utf-8") as f:
            f.write(s + "\n")


if __name__ == "__main__":
    main()
