"""Checks of the module's constructor arguments, each failure naming the argument and what it accepts."""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable


def check_module_arguments(
    *,
    prior: str,
    n_input: int,
    n_hidden: int,
    n_latent_tokens: int,
    crop_size: int,
    n_encoder_layers: int,
    n_decoder_layers: int,
    n_heads: int,
    n_decoder_targets: int | str,
    min_depth_fraction: float,
    gene_panel_min_fraction: float,
    embedding_depth_quantile: float | str,
    gene_embedding_init: str,
    encoder_genes: int | str,
    decoder_gene_offset: bool | str,
    **other_arguments: Any,
) -> None:
    """Raise a ``ValueError`` for the first invalid argument of :class:`~sctrilemma.module.SCTrilemmaModule`.

    Called with the constructor's ``locals()``; ``other_arguments`` are those that need no check.
    """
    del other_arguments
    if prior not in ("pseudobulk", "normal"):
        raise ValueError(f"`prior` must be 'pseudobulk' or 'normal', got {prior!r}.")
    for name, value in {"n_input": n_input, "n_hidden": n_hidden, "n_latent_tokens": n_latent_tokens,
                        "crop_size": crop_size, "n_encoder_layers": n_encoder_layers,
                        "n_decoder_layers": n_decoder_layers, "n_heads": n_heads}.items():  # fmt: skip
        if int(value) < 1:
            raise ValueError(f"`{name}` must be a positive integer, got {value}.")
    _check_number_or(n_decoder_targets, "crop", "n_decoder_targets", "an integer >= 4", lambda n: n >= 4)
    for name, fraction in {"min_depth_fraction": min_depth_fraction,
                           "gene_panel_min_fraction": gene_panel_min_fraction}.items():  # fmt: skip
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"`{name}` must be in (0, 1], got {fraction}.")
    if gene_panel_min_fraction < 1.0 and n_decoder_targets == "crop":
        raise ValueError(
            "`gene_panel_min_fraction` below 1 needs `n_decoder_targets` a number (the small preset): with the paper's "
            "crop the decoder reconstructs the genes the encoder reads, so hidden genes would leave its targets too."
        )
    _check_number_or(embedding_depth_quantile, "observed", "embedding_depth_quantile", "a number in [0, 1]",
                     lambda q: 0.0 <= q <= 1.0)  # fmt: skip
    if gene_embedding_init not in ("normal", "pca", "auto"):
        raise ValueError(f"`gene_embedding_init` must be 'normal', 'pca' or 'auto', got {gene_embedding_init!r}.")
    _check_number_or(encoder_genes, "all", "encoder_genes", "a positive integer", lambda n: n >= 1)
    if encoder_genes != "all" and n_decoder_targets == "crop":
        raise ValueError(
            f"`encoder_genes={encoder_genes}` needs `n_decoder_targets` a number (the encoder's crop must be its own, "
            "not the decoder's targets); pass `encoder_genes='all'` or a number of `n_decoder_targets`."
        )
    if decoder_gene_offset not in (True, False, "auto"):
        raise ValueError(f"`decoder_gene_offset` must be True, False or 'auto', got {decoder_gene_offset!r}.")


def _check_number_or(value: Any, word: str, name: str, number: str, accepts: Callable[[float], bool]) -> None:
    """A ``ValueError`` unless ``value`` is ``word`` or a number that ``accepts``."""
    if value == word:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not accepts(value):
        raise ValueError(f"`{name}` must be {word!r} or {number}, got {value!r}.")
