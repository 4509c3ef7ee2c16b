"""Scratch: each quantile's difference to the shipped 0.1 (mean ± SD over seeds), from ``embedding_depth.py --json``.

Usage (repository root): ``python benchmarks/results/quality/depth_quantile/versus_shipped.py kang_zilionis.json [...]``.
"""

import json
import sys

sys.path.insert(0, "benchmarks")
from embedding_depth import paired_table

rows = [row for path in sys.argv[1:] for row in json.load(open(path))]
print(paired_table(rows, baseline="q0.1"))
