"""scvi-tools' ``TrainRunner`` without files left in the working directory."""

from __future__ import annotations

import shutil
import tempfile
from typing import TYPE_CHECKING

from scvi.model._utils import use_distributed_sampler
from scvi.train import TrainRunner

if TYPE_CHECKING:
    from typing import Any


class SCTrilemmaTrainRunner(TrainRunner):
    """:class:`~scvi.train.TrainRunner` that keeps DDP training history in a temporary directory.

    Under a DDP strategy scvi-tools' trainer writes ``lightning_logs/version_1/history.pkl`` into the working
    directory so that rank 0's history reaches the model. Unless the user passes ``logger``, ``log_save_dir`` or
    ``default_root_dir``, this runner points it at a temporary directory, removed after training.
    """

    def __init__(self, *args: Any, trainer_config: dict | None = None, **trainer_kwargs: Any) -> None:
        self._temporary_log_dir = None
        requested = {**(trainer_config or {}), **trainer_kwargs}
        chosen = any(requested.get(key) is not None for key in ("logger", "log_save_dir", "default_root_dir"))
        if use_distributed_sampler(requested.get("strategy")) and not chosen:
            self._temporary_log_dir = tempfile.mkdtemp(prefix="sctrilemma-history-")
            trainer_kwargs["log_save_dir"] = self._temporary_log_dir
        super().__init__(*args, trainer_config=trainer_config, **trainer_kwargs)

    def __call__(self):
        """Train, then remove the temporary history directory."""
        try:
            return super().__call__()
        finally:
            if self._temporary_log_dir is not None:
                shutil.rmtree(self._temporary_log_dir, ignore_errors=True)
