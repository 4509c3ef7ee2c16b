"""Where the early stop falls on Baron's and Zilionis's curves, and what the curve does after it.

Reads the curves of ``learning_curve.py`` (SCTrilemma trained the 240 s without the stop, scored at steps, the stop
replayed from its validation losses; scVI beside it at 30-240 s) and prints, per data set and seed, the metrics at
the scored step nearest the replayed stop, at the end of the 240 s, and their range over the scored steps.

Usage: python summarise.py DIR
"""

import json
import sys
from pathlib import Path

METRICS = ("nmi", "ari", "bras", "depth_r2", "logfc_spearman")


def nearest(curve: list[dict], step: int) -> dict:
    return min(curve, key=lambda row: abs(row["step"] - step))


def main(folder: Path) -> None:
    for data in ("baron2016", "zilionis2019"):
        print(f"\n## {data}\n")
        print(
            "| seed | replayed stop: step (s) | at the stop: " + " / ".join(METRICS) + " | at 240 s (step) | "
            "range over steps 100-end | scVI at 240 s |"
        )
        print("|---|---|---|---|---|---|")
        for seed in (0, 1, 2):
            ours_path = folder / f"{data}_sctrilemma_seed{seed}.json"
            scvi_path = folder / f"{data}_scvi_seed{seed}.json"
            if not ours_path.exists():
                continue
            ours = json.loads(ours_path.read_text())
            curve = sorted(ours["curve"], key=lambda row: row["step"])
            stop = ours["replayed_stop"]
            at_stop = nearest(curve, stop["step"]) if stop else None
            end = curve[-1]
            ranges = " ; ".join(
                f"{min(r[m] for r in curve if r['step'] >= 100):.3f}-{max(r[m] for r in curve if r['step'] >= 100):.3f}"
                for m in METRICS
            )
            scvi = json.loads(scvi_path.read_text())["curve"][-1] if scvi_path.exists() else None
            print(
                f"| {seed} | {stop['step']} ({stop['train_s']:.0f} s) | "
                + (" / ".join(f"{at_stop[m]:.3f}" for m in METRICS) + f" (step {at_stop['step']})" if at_stop else "–")
                + f" | {' / '.join(f'{end[m]:.3f}' for m in METRICS)} ({end['step']}) | {ranges} | "
                + (" / ".join(f"{scvi[m]:.3f}" for m in METRICS) if scvi else "–")
                + " |"
            )
        print("\nper step (mean over seeds of " + ", ".join(METRICS) + "):")
        rows: dict[int, list[dict]] = {}
        for seed in (0, 1, 2):
            path = folder / f"{data}_sctrilemma_seed{seed}.json"
            if path.exists():
                for row in json.loads(path.read_text())["curve"]:
                    rows.setdefault(row["step"], []).append(row)
        for step in sorted(rows):
            if len(rows[step]) == 3:
                means = [sum(r[m] for r in rows[step]) / 3 for m in METRICS]
                print(f"  {step}: " + " / ".join(f"{v:.3f}" for v in means))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
