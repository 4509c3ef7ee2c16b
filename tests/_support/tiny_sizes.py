"""The tiny model sizes of the test suite, defined once (``pythonpath`` in ``pyproject.toml`` makes this importable).

Same architecture as the presets, small sizes, so that a model trains in seconds on one CPU thread.
"""

from __future__ import annotations

TINY: dict[str, int] = {
    "n_hidden": 32,
    "n_latent_tokens": 4,
    "crop_size": 256,
    "n_encoder_layers": 1,
    "n_decoder_layers": 1,
    "n_heads": 4,
    "n_prior_codes": 8,
}
