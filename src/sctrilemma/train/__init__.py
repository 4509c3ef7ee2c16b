from ._threads import CpuThreadTuner, ThreadChooser, ThreadTunedLoader
from ._trainingplan import SCTrilemmaTrainingPlan, warmup_cosine
from ._weight_averaging import ExponentialWeightAverage

__all__ = [
    "CpuThreadTuner",
    "ExponentialWeightAverage",
    "SCTrilemmaTrainingPlan",
    "ThreadChooser",
    "ThreadTunedLoader",
    "warmup_cosine",
]
