from ._label_transfer import LabelClassifier
from ._model import SCTrilemma
from ._presets import PRESETS

__all__ = ["PRESETS", "LabelClassifier", "SCTrilemma"]
