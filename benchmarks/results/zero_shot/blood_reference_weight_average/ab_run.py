"""Scratch: the blood reference script with the weight average on or off (A/B), any seed."""

import runpy
import sys

from sctrilemma import SCTrilemma

average = sys.argv.pop(1) == "avg"
original = SCTrilemma.train


def train(self, *args, **kwargs):
    kwargs.setdefault("weight_averaging", average)
    return original(self, *args, **kwargs)


SCTrilemma.train = train
sys.argv[0] = "scripts/train_blood_reference.py"
runpy.run_path("scripts/train_blood_reference.py", run_name="__main__")
