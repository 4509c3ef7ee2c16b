from ._trainingplan import SCTrilemmaTrainingPlan, warmup_cosine

__all__ = ["SCTrilemmaTrainingPlan", "warmup_cosine"]
