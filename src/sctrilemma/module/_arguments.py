"""Checks of the module's constructor arguments, each failure naming the argument and what it accepts."""

from __future__ import annotations

from typing import Any


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
    n_decoder_targets: int | None,
    min_depth_fraction: float,
    gene_panel_min_fraction: float,
    embedding_depth_quantile: float | None,
    gene_embedding_init: str,
    encoder_genes: int | None,
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
    if n_decoder_targets is not None and int(n_decoder_targets) < 4:
        raise ValueError(f"`n_decoder_targets` must be None or an integer >= 4, got {n_decoder_targets}.")
    for name, fraction in {"min_depth_fraction": min_depth_fraction,
                           "gene_panel_min_fraction": gene_panel_min_fraction}.items():  # fmt: skip
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"`{name}` must be in (0, 1], got {fraction}.")
    if gene_panel_min_fraction < 1.0 and n_decoder_targets is None:
        raise ValueError(
            "`gene_panel_min_fraction` below 1 needs `n_decoder_targets` set (the small preset): with the paper's "
            "crop the decoder reconstructs the genes the encoder reads, so hidden genes would leave its targets too."
        )
    if embedding_depth_quantile is not None and not 0.0 <= embedding_depth_quantile <= 1.0:
        raise ValueError(f"`embedding_depth_quantile` must be None or in [0, 1], got {embedding_depth_quantile}.")
    if gene_embedding_init not in ("normal", "pca", "auto"):
        raise ValueError(f"`gene_embedding_init` must be 'normal', 'pca' or 'auto', got {gene_embedding_init!r}.")
    if encoder_genes is not None and (int(encoder_genes) < 1 or n_decoder_targets is None):
        raise ValueError(
            f"`encoder_genes` must be None or a positive integer with `n_decoder_targets` set (the encoder's crop "
            f"must be its own, not the decoder's targets), got {encoder_genes} with n_decoder_targets="
            f"{n_decoder_targets}."
        )
    if decoder_gene_offset not in (True, False, "auto"):
        raise ValueError(f"`decoder_gene_offset` must be True, False or 'auto', got {decoder_gene_offset!r}.")
