"""Reads back what papergym-native's --report-to trackers wrote, with each tracker's own reader;
prints one JSON object (test/trackers.test.ts).

  read_trackers.py tensorboard LOGDIR
  read_trackers.py mlflow TRACKING_URI RUN_NAME [EXPERIMENT]
  read_trackers.py wandb RUN_DIR
"""
import json
import sys


def tensorboard(logdir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    ea = EventAccumulator(logdir, size_guidance={"scalars": 0, "tensors": 0})
    ea.Reload()
    tags = ea.Tags()
    scalars = {t: [[e.step, e.value] for e in ea.Scalars(t)] for t in tags["scalars"]}
    texts = {}
    for t in tags["tensors"]:
        texts[t] = [tensor_util.make_ndarray(e.tensor_proto).item().decode("utf8") for e in ea.Tensors(t)]
    return {"scalars": scalars, "texts": texts}


def mlflow_run(uri, run_name, experiment="papergym-native"):
    from mlflow.tracking import MlflowClient

    c = MlflowClient(tracking_uri=uri)
    exp = c.get_experiment_by_name(experiment)
    runs = c.search_runs([exp.experiment_id], filter_string=f"attributes.run_name = '{run_name}'")
    r = runs[0]
    hist = {k: [[m.step, m.value] for m in c.get_metric_history(r.info.run_id, k)] for k in r.data.metrics}

    def walk(path=None):
        out = []
        for f in c.list_artifacts(r.info.run_id, path):
            out += walk(f.path) if f.is_dir else [f.path]
        return out

    return {"status": r.info.status, "params": r.data.params, "metrics": hist, "artifacts": sorted(walk()), "runs": len(runs)}


def wandb_records(path):
    """The records of a W&B run file (.wandb), parsed with W&B's own protobuf (wandb_internal_pb2.Record).

    wandb >= 0.2x has no Python reader of this file any more (its Go core writes it); the framing is
    LevelDB's log format after a 7-byte header (b":W&B", uint16 LE 0xBEE1, version byte): 32 KiB
    blocks of chunks {uint32 CRC, uint16 LE length, type 1 FULL / 2 FIRST / 3 MIDDLE / 4 LAST}.
    """
    from wandb.proto import wandb_internal_pb2

    with open(path, "rb") as fh:
        raw = fh.read()
    if raw[:4] != b":W&B" or int.from_bytes(raw[4:6], "little") != 0xBEE1:
        raise SystemExit(f"{path}: not a W&B run file")
    block = 32768
    pos, buf, out = 7, b"", []
    while pos + 7 <= len(raw):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        length = int.from_bytes(raw[pos + 4 : pos + 6], "little")
        kind = raw[pos + 6]
        data = raw[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 2):
            buf = data
        elif kind in (3, 4):
            buf += data
        if kind in (1, 4):
            rec = wandb_internal_pb2.Record()
            rec.ParseFromString(buf)
            out.append(rec)
    return out


def wandb_run(run_dir):
    import glob
    import os

    (d,) = glob.glob(os.path.join(run_dir, "wandb", "offline-run-*"))
    (f,) = glob.glob(os.path.join(d, "run-*.wandb"))
    history, artifacts, config, exit_code = [], [], {}, None
    for rec in wandb_records(f):
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            history.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item})
        elif kind == "artifact":
            artifacts.append(rec.artifact.name)
        elif kind == "config":
            for i in rec.config.update:
                config[i.key or "/".join(i.nested_key)] = json.loads(i.value_json)
        elif kind == "run":
            for i in rec.run.config.update:
                config[i.key or "/".join(i.nested_key)] = json.loads(i.value_json)
        elif kind == "exit":
            exit_code = rec.exit.exit_code
    return {"dir": d, "history": history, "artifacts": artifacts, "config": config, "exit_code": exit_code}


if __name__ == "__main__":
    kind = sys.argv[1]
    if kind == "tensorboard":
        out = tensorboard(sys.argv[2])
    elif kind == "mlflow":
        out = mlflow_run(*sys.argv[2:])
    elif kind == "wandb":
        out = wandb_run(sys.argv[2])
    else:
        raise SystemExit(f"unknown kind {kind}")
    print(json.dumps(out, default=str))
