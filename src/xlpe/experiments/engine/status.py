"""``xlpe experiment status OUT``: how far a recipe's output folder has come, for tables that fill over several
sittings.

Every cached stage (:mod:`xlpe.experiments.engine.cache`) is listed as done or unfinished; a stage that trains (a model
run, a Cross-Align stage) also shows its last logged update and its training time so far. Where the stage's
parameters name a budget (``train.max_updates``: the NMT runs; Cross-Align's budget depends on the data, so it is
not shown) an unfinished run also shows how long the rest will take at its own pace.
A run the recipe shares with another (a symbolic link, e.g. ``dpe/seed1`` to the λ sweep's run) is listed as that
link; a run restored from an archive (:mod:`xlpe.experiments.engine.archive`) is marked, since it has no checkpoint.
Nothing is run or written, so it is safe beside a running recipe. Stages the recipe has not reached yet have
no folder and cannot be listed: the config decides them when the recipe runs.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

from xlpe.errors import ConfigError
from xlpe.experiments.engine.cache import stage_running

#: the file in a stage restored by ``xlpe experiment restore`` that names the checkpoints its archive left out
CHECKPOINTS_FILE = "archived_checkpoints.json"


def log_rows(train_dir: Path, name: str) -> list[dict]:
    """The rows of a training log of ``xlpe train`` (``<name>.csv`` or ``<name>.jsonl``; [] if there is none)."""
    if (train_dir / f"{name}.csv").exists():
        with open(train_dir / f"{name}.csv", newline="") as f:
            return list(csv.DictReader(f))
    if (train_dir / f"{name}.jsonl").exists():
        return [json.loads(x) for x in (train_dir / f"{name}.jsonl").read_text().splitlines() if x.strip()]
    return []


def _train_progress(d: Path, params: dict) -> dict[str, Any]:
    """Last logged update, training seconds and budget of the stage in ``d`` (its ``train/`` or itself)."""
    train = params.get("train")
    budget = train.get("max_updates") if isinstance(train, dict) else None
    out: dict[str, Any] = {"budget": int(budget)} if budget else {}
    for log_dir in (d / "train", d / "tlm", d / "ssa", d):      # NMT runs; Cross-Align stages; the stage itself
        rows = [r for r in log_rows(log_dir, "train_log") if _number(r.get("step"))]   # a line being written: skipped
        if rows:
            out["update"] = int(float(rows[-1]["step"]))
            walls = [(int(float(r["step"])), float(r["wall_time"])) for r in rows if _number(r.get("wall_time"))]
            if walls:
                out["train_seconds"] = walls[-1][1]
                # the pace over the logging intervals, validations included, leaving out the intervals more than 3x
                # slower than the median one: a pause (SIGSTOP, a suspended laptop) spoils only the interval it fell in
                steps = [(s1 - s0, w1 - w0) for (s0, w0), (s1, w1) in zip(walls, walls[1:]) if s1 > s0]
                if steps:
                    median = sorted(w / n for n, w in steps)[len(steps) // 2]
                    kept = [(n, w) for n, w in steps if w / n <= 3 * median]
                    out["seconds_per_update"] = sum(w for _, w in kept) / sum(n for n, _ in kept)
            break
    return out


def _number(x: Any) -> bool:
    try:
        float(x)
        return True
    except (TypeError, ValueError):
        return False


def stage_folders(root: Path) -> tuple[list[Path], dict[str, Path]]:
    """The stage folders under ``root`` (with ``started.json`` or ``done.json``; stale ones left out) and the
    links between stages (``name -> link``), which are not followed."""
    stages, links = [], {}
    for cur, dirs, files in os.walk(root):
        here = Path(cur)
        dirs[:] = sorted(x for x in dirs if ".stale-" not in x)
        for x in list(dirs):
            if (here / x).is_symlink():
                dirs.remove(x)
                links[(here / x).relative_to(root).as_posix()] = here / x
        if here != root and ("started.json" in files or "done.json" in files):
            stages.append(here)
    return stages, links


def folder_status(out: str | os.PathLike) -> dict[str, Any]:
    """``{"folder", "stages": [{name, state, ...}], "done", "unfinished", "links", "remaining_seconds"}`` of a
    recipe's output folder; ``state`` is ``done``, ``unfinished`` (started, not finished: running now, marked
    ``running`` when a process holds the stage's lock, or interrupted) or ``link`` (``target`` names the shared
    stage). Stale stages (``*.stale-*``) are left out."""
    root = Path(out)
    if not root.is_dir():
        raise ConfigError(f"{root}: no such folder (the --out of an `xlpe experiment` run)")
    stages: list[dict[str, Any]] = []
    dirs, links = stage_folders(root)
    for name, link in links.items():
        stages.append({"name": name, "state": "link", "target": os.path.relpath(link.resolve(), root)})
    for here in dirs:
        name = here.relative_to(root).as_posix()
        done = here / "done.json"
        marker = json.loads((done if done.exists() else here / "started.json").read_text())
        entry: dict[str, Any] = {"name": name, "state": "done" if done.exists() else "unfinished"}
        if done.exists() and "seconds" in marker.get("result", {}):
            entry["seconds"] = marker["result"]["seconds"]
        if (here / CHECKPOINTS_FILE).exists():
            entry["restored"] = True
        entry.update(_train_progress(here, marker.get("params") or {}))
        if entry["state"] == "unfinished" and stage_running(here):
            entry["running"] = True             # a process holds its lock (xlpe.experiments.engine.cache.stage_lock)
        if entry["state"] == "unfinished" and entry.get("budget") and "seconds_per_update" in entry:
            entry["remaining_seconds"] = round(entry["seconds_per_update"] * max(entry["budget"] - entry["update"], 0))
        stages.append(entry)
    stages.sort(key=lambda e: e["name"])
    count = {s: sum(e["state"] == s for e in stages) for s in ("done", "unfinished", "link")}
    return {"folder": str(root), "stages": stages, **{k: v for k, v in count.items()},
            "remaining_seconds": sum(e.get("remaining_seconds", 0) for e in stages)}


def _hm(seconds: float) -> str:
    m = round(seconds / 60)
    return f"{m // 60} h {m % 60:02d} min" if m >= 60 else f"{m} min"


def render_status(st: dict[str, Any]) -> str:
    """The status as a Markdown table, with a summary line first."""
    lines = [f"# {st['folder']}: {st['done']} stages done, {st['unfinished']} unfinished"
             + (f", {st['link']} shared by link" if st["link"] else ""), ""]
    if st["remaining_seconds"]:
        lines += [f"The unfinished runs need about {_hm(st['remaining_seconds'])} more of training at their own pace "
                  "(one after another; a recipe with jobs > 1 runs several at once).", ""]
    lines += ["Stages the recipe has not reached yet have no folder and are not listed.", "",
              "| stage | state | updates | training time | rest |", "|---|---|---|---|---|"]
    for e in st["stages"]:
        if e["state"] == "link":
            lines.append(f"| {e['name']} | = {e['target']} | | | |")
            continue
        upd = f"{e['update']:,}" if "update" in e else ""
        if "budget" in e:
            upd += f" / {e['budget']:,}" if upd else f"0 / {e['budget']:,}"
        took = _hm(e["train_seconds"]) if "train_seconds" in e else (_hm(e["seconds"]) if e.get("seconds", 0) >= 60
                                                                      else "")
        rest = _hm(e["remaining_seconds"]) if "remaining_seconds" in e else ""
        state = e["state"] + (" (restored, no checkpoint)" if e.get("restored") else "") + \
            (" (running now)" if e.get("running") else "")
        lines.append(f"| {e['name']} | {state} | {upd} | {took} | {rest} |")
    return "\n".join(lines) + "\n"
