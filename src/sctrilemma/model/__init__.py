from ._label_transfer import transfer_labels
from ._model import SCTrilemma

__all__ = ["SCTrilemma", "transfer_labels"]
