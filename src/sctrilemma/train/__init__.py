from ._threads import CpuThreadTuner, ThreadChooser, ThreadTunedLoader
from ._trainingplan import SCTrilemmaTrainingPlan, warmup_cosine

__all__ = ["CpuThreadTuner", "SCTrilemmaTrainingPlan", "ThreadChooser", "ThreadTunedLoader", "warmup_cosine"]
