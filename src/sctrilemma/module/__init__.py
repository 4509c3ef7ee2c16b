from ._module import SCTrilemmaModule
from ._prior import PseudobulkPrior, gaussian_kl
from ._tokens import GeneCrop, expressed_crop, training_crop

__all__ = ["GeneCrop", "PseudobulkPrior", "SCTrilemmaModule", "expressed_crop", "gaussian_kl", "training_crop"]
