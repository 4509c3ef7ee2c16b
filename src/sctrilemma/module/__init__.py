from ._decoder import ZINBDecoder
from ._encoder import PerceiverEncoder
from ._inputs import GeneCrop, expressed_crop, target_sample, thin_to_depth, training_crop
from ._module import SCTrilemmaModule
from ._prior import PseudobulkPrior, gaussian_kl

__all__ = [
    "GeneCrop",
    "PerceiverEncoder",
    "PseudobulkPrior",
    "SCTrilemmaModule",
    "ZINBDecoder",
    "expressed_crop",
    "gaussian_kl",
    "target_sample",
    "thin_to_depth",
    "training_crop",
]
