from ._label_transfer import LabelClassifier
from ._model import SCTrilemma

__all__ = ["LabelClassifier", "SCTrilemma"]
