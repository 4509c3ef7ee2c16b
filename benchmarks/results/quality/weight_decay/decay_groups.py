"""Scratch screen: AdamW's weight decay on one part of the model only, the paper's 1e-4 on the rest.

Trains as ``trilemma.py`` does (small preset, 240 s, the preset's stop) and prints the Scorecard's headline figures as
``gene_panel/mild/screen_panel.py`` does. ``--match`` is a regular expression on the module's parameter names, e.g.
``'^encoder\\.gene_embedding'``; the matching parameters get ``--decay``.
"""

import argparse
import json
import re
import sys

sys.path.insert(0, "benchmarks/results/quality/gene_panel/mild")
from screen_panel import headline_scores, screen_runs, trilemma

from sctrilemma.train._trainingplan import SCTrilemmaTrainingPlan

PAPER_WEIGHT_DECAY = 1e-4


def decay_on_matching(pattern: re.Pattern, decay: float):
    """A replacement for scvi-tools' ``_optimizer_creator_fn`` that splits each group by ``pattern``."""
    original = SCTrilemmaTrainingPlan._optimizer_creator_fn

    def optimizer_creator_fn(self, optimizer_cls):
        creator = original(self, optimizer_cls)
        names = {id(p): name for name, p in self.module.named_parameters()}

        def split(params):
            params = list(params)
            groups = params if isinstance(params[0], dict) else [{"params": params}]
            out = []
            for group in groups:
                for hit in (True, False):
                    chosen = [p for p in group["params"] if bool(pattern.search(names[id(p)])) == hit]
                    if chosen:
                        out.append({**group, "params": chosen, "weight_decay": decay if hit else PAPER_WEIGHT_DECAY})
            return creator(out)

        return split

    return optimizer_creator_fn


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", nargs="+")
    parser.add_argument("--seeds", nargs="+", type=int)
    parser.add_argument("--decay", type=float, required=True)
    parser.add_argument("--match", required=True)
    parser.add_argument("--tag", required=True)
    args = parser.parse_args()
    SCTrilemmaTrainingPlan._optimizer_creator_fn = decay_on_matching(re.compile(args.match), args.decay)
    for name, seed, a, keys, role in screen_runs(args.data, args.seeds):
        model, budget = trilemma.train_sctrilemma(a.copy(), keys[1], 240.0, seed, {}, None, role)
        scores = headline_scores(a, model, seed, *keys)
        print(json.dumps({"tag": args.tag, "data": name, "seed": seed, **budget, **scores}), flush=True)
