from ._callbacks import ExponentialWeightAverage, ReportedEarlyStopping, TimeBudgetProgressBar
from ._threads import CpuThreadTuner, ThreadChooser, ThreadTunedLoader
from ._trainingplan import SCTrilemmaTrainingPlan, warmup_cosine

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
