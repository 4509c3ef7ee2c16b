from ._label_transfer import LabelClassifier
from ._model import SCTrilemma
from ._presets import PRESETS as _PRESETS

#: Each preset's settings in three groups, ``"model"`` (:class:`~sctrilemma.SCTrilemma`'s keyword arguments),
#: ``"plan"`` (``train(plan_kwargs=...)``) and ``"train"`` (:meth:`~sctrilemma.SCTrilemma.train`'s arguments and
#: trainer keywords). Pass the same key in the same place to override a value; ``None`` there takes the preset's
#: value. The ``"train"`` group's length is ``max_steps`` (that many steps, or one pass over the training cells where
#: that is longer) or ``max_epochs_cap`` (scVI's epoch heuristic for the data's size, capped).
PRESETS = _PRESETS

__all__ = ["PRESETS", "LabelClassifier", "SCTrilemma"]
