from ._progress import ReportedEarlyStopping, TimeBudgetProgressBar
from ._threads import CpuThreadTuner, ThreadChooser, ThreadTunedLoader
from ._trainingplan import SCTrilemmaTrainingPlan, warmup_cosine
from ._weight_averaging import ExponentialWeightAverage

__all__ = [
    "CpuThreadTuner",
    "ExponentialWeightAverage",
    "ReportedEarlyStopping",
    "SCTrilemmaTrainingPlan",
    "ThreadChooser",
    "ThreadTunedLoader",
    "TimeBudgetProgressBar",
    "warmup_cosine",
]
