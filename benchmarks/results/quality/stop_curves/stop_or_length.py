"""The preset's early stop against the full default length, paired in one run per seed.

Reads the curves of ``learning_curve.py --no-early-stopping --steps ... 1200`` (SCTrilemma trained its default 1,200
steps without the stop, scored at steps and at the validation where the stop would have ended the run) and prints,
per data set and seed, the metrics at the replayed stop and at step 1,200, and their paired difference.

Usage: python stop_or_length.py DIR
"""

import json
import statistics
import sys
from pathlib import Path

METRICS = ("nmi", "ari", "bras", "depth_r2", "logfc_spearman")


def main(folder: Path) -> None:
    print("| data set | seed | stop: step | at the stop: " + " / ".join(METRICS) + " | at 1,200 steps | difference |")
    print("|---|---|---|---|---|---|")
    for data in ("kang2018", "cellbench", "baron2016", "zilionis2019"):
        differences = []
        for path in sorted(folder.glob(f"{data}_seed*.json")):
            run = json.loads(path.read_text())
            curve = run["curve"]
            end = max(curve, key=lambda row: row["step"])
            stopped = [row for row in curve if row.get("replayed_stop")]
            at_stop = stopped[0] if stopped else end  # no stop: the run is the same either way
            difference = [end[m] - at_stop[m] for m in METRICS]
            differences.append(difference)
            print(
                f"| {data} | {run['seed']} | {at_stop['step'] if stopped else 'none'} | "
                + " / ".join(f"{at_stop[m]:.3f}" for m in METRICS)
                + f" | {' / '.join(f'{end[m]:.3f}' for m in METRICS)} | "
                + " / ".join(f"{d:+.3f}" for d in difference)
                + " |"
            )
        if len(differences) > 1:
            columns = list(zip(*differences, strict=True))
            print(
                f"| {data} | mean ± SD | | | | "
                + " / ".join(f"{statistics.mean(c):+.3f} ± {statistics.stdev(c):.3f}" for c in columns)
                + " |"
            )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
