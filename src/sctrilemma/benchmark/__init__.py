from ._baselines import BaselineResult, pca_baseline, scvi_baseline
from ._interventions import intervention_outputs
from ._scorecard import ContextInvariance, ExpressionFidelity, Identity, Scorecard, Skipped

__all__ = [
    "BaselineResult",
    "ContextInvariance",
    "ExpressionFidelity",
    "Identity",
    "Scorecard",
    "Skipped",
    "intervention_outputs",
    "pca_baseline",
    "scvi_baseline",
]
