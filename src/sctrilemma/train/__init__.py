from ._threads import CpuThreadTuner
from ._trainingplan import SCTrilemmaTrainingPlan, warmup_cosine

__all__ = ["CpuThreadTuner", "SCTrilemmaTrainingPlan", "warmup_cosine"]
