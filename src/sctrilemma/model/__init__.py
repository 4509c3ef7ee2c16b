from ._model import SCTrilemma

__all__ = ["SCTrilemma"]
