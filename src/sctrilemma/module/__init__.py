from ._decoder import ZINBDecoder
from ._depth import thin_to_depth
from ._encoder import PerceiverEncoder
from ._module import SCTrilemmaModule
from ._prior import PseudobulkPrior, gaussian_kl
from ._tokens import GeneCrop, expressed_crop, target_sample, training_crop

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
