"""W&B bridge of papergym-native's `--report-to wandb` (lib/train/trackers/wandb.ts).

Reads one JSON command per stdin line and answers one JSON line on stdout per command:
  {"op": "init", "project", "name", "dir", "config", "tags"}   -> {"ok": true, "id", "dir", "mode"}
  {"op": "log", "step", "data"}                                  -> {"ok": true}
  {"op": "artifacts", "paths"}                                   -> {"ok": true, "logged": [...]}
  {"op": "finish", "exit_code"}                                  -> {"ok": true}; then exits
Errors answer {"ok": false, "error": "..."}. W&B's own settings come from its environment
variables (WANDB_MODE=offline|online|disabled, WANDB_API_KEY, WANDB_PROJECT, WANDB_ENTITY, WANDB_DIR).
"""
import json
import os
import sys


def reply(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    try:
        import wandb
    except Exception as e:  # noqa: BLE001
        reply({"ok": False, "error": f"python package wandb is not importable ({e}); pip install wandb"})
        return 1
    run = None
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        op = cmd.get("op")
        try:
            if op == "init":
                run = wandb.init(
                    project=os.environ.get("WANDB_PROJECT") or cmd.get("project"),
                    name=cmd.get("name"),
                    dir=os.environ.get("WANDB_DIR") or cmd.get("dir"),
                    config=cmd.get("config"),
                    tags=cmd.get("tags"),
                    reinit=True,
                )
                reply({"ok": True, "id": run.id, "dir": run.dir, "mode": run.settings.mode})
            elif op == "log":
                run.log(cmd["data"], step=int(cmd["step"]))
                reply({"ok": True})
            elif op == "artifacts":
                logged = []
                for p in cmd["paths"]:
                    if not os.path.exists(p):
                        continue
                    base = os.path.basename(os.path.normpath(p))
                    kind = "model" if os.path.isdir(p) else "report"
                    art = wandb.Artifact(f"{run.id}-{base}".replace(".", "-"), type=kind)
                    if os.path.isdir(p):
                        art.add_dir(p)
                    else:
                        art.add_file(p)
                    run.log_artifact(art)
                    logged.append(base)
                reply({"ok": True, "logged": logged})
            elif op == "finish":
                run.finish(exit_code=int(cmd.get("exit_code", 0)))
                reply({"ok": True})
                return 0
            else:
                reply({"ok": False, "error": f"unknown op {op!r}"})
        except Exception as e:  # noqa: BLE001
            reply({"ok": False, "error": f"{type(e).__name__}: {e}"})
    if run is not None:
        run.finish(exit_code=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
