"""Named architecture presets; explicit constructor arguments override them."""

from __future__ import annotations

from typing import Literal

Preset = Literal["paper", "small"]

PRESETS: dict[str, dict[str, int | float]] = {
    # The paper's configuration (Appendix B, Table "Architecture settings").
    "paper": {
        "n_hidden": 512,
        "n_latent_tokens": 64,
        "crop_size": 4096,
        "n_encoder_layers": 3,
        "n_decoder_layers": 3,
        "n_heads": 8,
        "dropout_rate": 0.1,
    },
    # Same architecture, sized to train on a laptop CPU in minutes.
    "small": {
        "n_hidden": 64,
        "n_latent_tokens": 16,
        "crop_size": 512,
        "n_encoder_layers": 2,
        "n_decoder_layers": 1,
        "n_heads": 4,
        "dropout_rate": 0.1,
    },
}


def resolve_preset(preset: str, overrides: dict[str, int | float | None]) -> dict[str, int | float]:
    """The preset's sizes with every non-``None`` override applied."""
    if preset not in PRESETS:
        raise ValueError(f"`preset` must be one of {sorted(PRESETS)}, got {preset!r}.")
    return {**PRESETS[preset], **{k: v for k, v in overrides.items() if v is not None}}
