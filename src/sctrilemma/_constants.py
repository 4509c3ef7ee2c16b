"""Registry and tensor-dictionary keys used across sctrilemma."""

from __future__ import annotations

from typing import NamedTuple


class _RegistryKeys(NamedTuple):
    DONOR_KEY: str = "donor"
    DATASET_KEY: str = "dataset"


class _ModuleKeys(NamedTuple):
    Z_TOKENS_KEY: str = "z_tokens"
    QZ_TOKENS_MEAN_KEY: str = "qz_tokens_mean"
    QZ_TOKENS_LOGVAR_KEY: str = "qz_tokens_logvar"
    CROP_KEY: str = "crop"
    TARGET_KEY: str = "target"
    PX_KEY: str = "px"


SCT_REGISTRY_KEYS = _RegistryKeys()
SCT_MODULE_KEYS = _ModuleKeys()
