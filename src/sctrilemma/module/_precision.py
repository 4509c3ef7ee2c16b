"""The arithmetic of evaluation (embedding and reconstruction): fp32, or bf16 autocast where it pays."""

from __future__ import annotations

from typing import Literal

import torch

Precision = Literal["auto", "fp32", "bf16"]
PRECISIONS = ("auto", "fp32", "bf16")


class EvalPrecisionMixin:
    """The module's :attr:`precision` switch; training always runs in fp32."""

    @property
    def precision(self) -> Precision:
        """Arithmetic of evaluation, one of ``"fp32"``, ``"bf16"`` (autocast) or ``"auto"``.

        ``"auto"`` is bf16 on CUDA devices that support it and fp32 on CPU. bf16 keeps about three
        significant digits; ``benchmarks/vs_reference.py`` reports each cell's embedding cosine to fp32.
        """
        return self._precision

    @precision.setter
    def precision(self, value: Precision) -> None:
        if value not in PRECISIONS:
            raise ValueError(f"`precision` must be one of {PRECISIONS}, got {value!r}.")
        self._precision = value

    def uses_bf16(self, device: torch.device) -> bool:
        """Whether evaluation on ``device`` runs under bf16 autocast."""
        if self.precision == "auto":
            return device.type == "cuda" and torch.cuda.is_bf16_supported()
        return self.precision == "bf16"

    def _eval_autocast(self, device: torch.device) -> torch.autocast:
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=self.uses_bf16(device))
