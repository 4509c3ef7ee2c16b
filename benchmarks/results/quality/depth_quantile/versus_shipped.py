"""Scratch: each quantile's difference to the shipped 0.1 (mean ± SD over seeds), from ``embedding_depth.py --json``.

Usage: ``python versus_shipped.py kang_zilionis.json [...]``.
"""

import json
import sys

import pandas as pd

rows = [row for path in sys.argv[1:] for row in json.load(open(path))]
scores = pd.DataFrame(rows).pivot_table(index=["dataset", "seed", "metric"], columns="variant", values="value")
shipped = scores["q0.1"]
for variant in ("unthinned", "q0.25", "q0.5", "q0.75"):
    difference = (scores[variant] - shipped).groupby(["dataset", "metric"]).agg(["mean", "std"])
    table = difference.apply(lambda r: f"{r['mean']:+.3f} ± {r['std']:.3f}", axis=1).unstack("metric")
    print(f"### {variant} minus q0.1 (shipped)\n\n{table.to_markdown()}\n")
print(
    f"### q0.1 (shipped), mean over seeds\n\n{shipped.groupby(['dataset', 'metric']).mean().unstack('metric').round(3).to_markdown()}"
)
