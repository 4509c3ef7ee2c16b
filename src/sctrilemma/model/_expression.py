"""Reconstructed expression from the decoder (``get_normalized_expression``)."""

from __future__ import annotations

import functools
import warnings
from contextlib import contextmanager
from typing import TYPE_CHECKING, Literal

import numpy as np
import pandas as pd
import torch
from scvi import settings
from scvi.model.base import RNASeqMixin

from sctrilemma._constants import SCT_MODULE_KEYS
from sctrilemma.model._utils import gene_names
from sctrilemma.module._analysis import observed_library

if TYPE_CHECKING:
    from collections.abc import Generator, Iterator, Sequence
    from numbers import Number

    from anndata import AnnData
    from mudata import MuData


# Bytes of decoded rows that differential expression keeps for reuse within one call (beyond them it decodes as needed).
DECODED_ROWS_BYTES = 1 << 30


class ExpressionMixin:
    """Decoder outputs for any of the model's genes; scVI's expression methods where the module's differ.

    Place before :class:`~scvi.model.base.RNASeqMixin`: its differential expression, likelihood parameters and
    feature correlations run through these methods and the module's all-gene ``forward(compute_loss=False)``.
    """

    # Within one differential_expression call: (id of the data, library size) -> (decoded rows, which cells have one)
    _decoded_rows: dict | None = None

    @functools.wraps(RNASeqMixin.differential_expression, assigned=())
    def differential_expression(self, *args, **kwargs) -> pd.DataFrame:
        """:meth:`scvi.model.base.RNASeqMixin.differential_expression`, with the same arguments and results.

        A side of a comparison with more cells than ``n_samples_overall`` draws rows of posterior-mean expression,
        one per cell, and one call over several groups (``groupby``) draws many of the same cells again. Each such
        cell is decoded once per call (for up to ``DECODED_ROWS_BYTES`` of rows) and its row reused; the values are
        the same. Sides with several samples per cell draw from the posterior and are decoded as drawn.
        """
        with self._decoding_each_cell_once():
            return super().differential_expression(*args, **kwargs)

    @contextmanager
    def _decoding_each_cell_once(self) -> Generator[None, None, None]:
        outer = self._decoded_rows is not None
        if not outer:
            self._decoded_rows = {}
        try:
            yield
        finally:
            if not outer:
                self._decoded_rows = None

    def _posterior_mean_rows(
        self, adata, cells: np.ndarray, library_size: float | str, batch_size: int | None, data_loader_kwargs
    ) -> np.ndarray:
        """Posterior-mean expression of the distinct ``cells``, decoded once per cell within differential expression."""
        parent = super().get_normalized_expression

        def decode(subset: np.ndarray) -> np.ndarray:
            return parent(
                adata=adata,
                indices=subset,
                library_size="latent" if isinstance(library_size, str) else library_size,
                batch_size=batch_size,
                return_numpy=True,
                data_loader_kwargs=data_loader_kwargs,
            )

        if self._decoded_rows is None:
            return decode(cells)
        key = (id(adata), library_size)
        entry = self._decoded_rows.get(key)
        if entry is None:
            if key in self._decoded_rows:  # too large to keep
                return decode(cells)
            values = decode(cells)
            if adata.n_obs * values.shape[1] * values.itemsize > DECODED_ROWS_BYTES:
                self._decoded_rows[key] = None
                return values
            rows, have = np.empty((adata.n_obs, values.shape[1]), dtype=values.dtype), np.zeros(adata.n_obs, bool)
            rows[cells], have[cells] = values, True
            self._decoded_rows[key] = (rows, have)
            return values
        rows, have = entry
        missing = cells[~have[cells]]
        if missing.size:
            rows[missing], have[missing] = decode(missing), True
        return rows[cells]

    @property
    def precision(self) -> str:
        """Arithmetic of embedding and reconstruction (not of training), one of ``"auto"``, ``"fp32"`` or ``"bf16"``.

        ``"auto"`` (the default) is bf16 autocast on CUDA and fp32 on CPU; ``"bf16"`` also uses bf16 on
        CPUs. On those with AMX or AVX-512 BF16 it embeds paper-sized models several times faster, at cosine
        similarity above 0.999 to fp32 (``benchmarks/vs_reference.py``); the small preset gains nothing from it.
        A runtime setting, not saved with the model. Set it before :meth:`get_latent_representation` or
        :meth:`get_normalized_expression`.
        """
        return self.module.precision

    @precision.setter
    def precision(self, value: str) -> None:
        self.module.precision = value

    @torch.inference_mode()
    def get_normalized_expression(
        self,
        adata: AnnData | MuData | None = None,
        indices: Sequence[int] | None = None,
        transform_batch: Sequence[Number | str] | None = None,
        gene_list: Sequence[str] | None = None,
        library_size: float | Literal["observed", "latent"] = 1,
        n_samples: int = 1,
        n_samples_overall: int | None = None,
        weights: Literal["uniform", "importance"] | None = None,
        batch_size: int | None = None,
        return_mean: bool = True,
        return_numpy: bool | None = None,
        silent: bool = True,
        dataloader: Iterator[dict[str, torch.Tensor | None]] | None = None,
        data_loader_kwargs: dict | None = None,
        **importance_weighting_kwargs,
    ) -> pd.DataFrame | np.ndarray:
        r"""Decoded expression of every gene, as :meth:`scvi.model.base.RNASeqMixin.get_normalized_expression`.

        The decoder's softmax normalises over **all** the model's genes (decoded in chunks; genes are
        decoded independently, so this is exact), so with ``library_size=1`` each cell's row sums to 1.

        Parameters
        ----------
        adata
            Data with the model's genes; defaults to the training data.
        indices
            Cells to use; all by default.
        transform_batch
            Accepted for scvi-tools compatibility; the model has no batch covariate, so it has no effect.
        gene_list
            Genes to return, by ``var_names`` (e.g. Ensembl IDs) or, where the model knows gene symbols
            (``model.gene_symbols_``), by symbol; columns follow this order. All genes by default.
        library_size
            A number scales the proportions (``1``: proportions, ``1e4``: CP10K-like values).
            ``"observed"`` (or ``"latent"``, its scVI name; the model has no latent library) gives expected
            counts: proportions times each cell's observed raw total, the ZINB mean.
        n_samples
            Posterior samples of the latent tokens; ``1`` uses the posterior mean.
        n_samples_overall, weights, batch_size, return_mean, return_numpy, silent, dataloader, data_loader_kwargs
            As in scvi-tools.
        **importance_weighting_kwargs
            Passed to :meth:`~scvi.model.base.RNASeqMixin.get_importance_weights`.

        Returns
        -------
        ``(n_cells, n_genes)`` DataFrame indexed by cell names with gene (``var_names``) columns, or an
        array (``(n_samples, n_cells, n_genes)`` when ``n_samples > 1`` and ``return_mean=False``).

        Notes
        -----
        With ``n_samples_overall`` (how ``differential_expression`` samples each group), the rows that scVI's
        method would keep are drawn first and only they are decoded: the same distribution of rows, at a fraction
        of the decoding.

        On a zero-shot query (:meth:`load_query_data`) ``gene_list`` may name reference genes the query
        did not measure (``adata.var["measured"]`` is ``False``). Their values are imputed: the decoder
        predicts them from the cell's latent tokens as it learned on the reference data. They are only
        as good as the reference's coverage of that cell state and gene, carry no information from the
        query's own measurement of the gene, and should not be used as observations in differential
        expression tests.
        """
        if isinstance(library_size, str) and library_size not in ("observed", "latent"):
            raise ValueError(
                f"`library_size` must be a number, 'observed' or 'latent', got {library_size!r}; "
                "pass `library_size=1` for proportions or 'observed' for expected counts."
            )
        if weights == "importance":
            raise ValueError(
                "`weights='importance'` is not supported: it needs scVI's importance weights of a single latent z. "
                "Use `weights='uniform'` (the default)."
            )
        if dataloader is None:
            adata = self._validate_anndata(adata)
            self._check_cells_have_counts(adata, indices)
            genes = gene_names(adata, self.registry_)
            columns = slice(None) if gene_list is None else self._gene_positions(genes, gene_list)
        else:
            genes, columns = None, slice(None)
        if n_samples > 1 and not return_mean:
            if return_numpy is False:
                warnings.warn(
                    "`return_numpy` must be `True` if `n_samples > 1` and `return_mean` is `False`, "
                    "returning an `np.ndarray`.",
                    UserWarning,
                    stacklevel=settings.warnings_stacklevel,
                )
            return_numpy = True
        self.module.eval()
        if n_samples_overall is not None and dataloader is None and weights in (None, "uniform"):
            return self._drawn_rows(adata, indices, n_samples_overall, library_size, batch_size, data_loader_kwargs)[
                ..., columns
            ]
        values = super().get_normalized_expression(
            adata=adata,
            indices=indices,
            transform_batch=None,  # no batch covariate: any value (e.g. a donor name) has no effect
            gene_list=None,
            library_size="latent" if isinstance(library_size, str) else library_size,
            n_samples=n_samples,
            n_samples_overall=n_samples_overall,
            weights=weights,
            batch_size=batch_size,
            return_mean=return_mean,
            return_numpy=True,
            silent=silent,
            dataloader=dataloader,
            data_loader_kwargs=data_loader_kwargs,
            **importance_weighting_kwargs,
        )[..., columns]
        if return_numpy or dataloader is not None or n_samples_overall is not None:
            return values
        cells = np.arange(adata.n_obs) if indices is None else np.asarray(indices)
        return pd.DataFrame(values, index=adata.obs_names[cells], columns=pd.Index(genes[columns]))

    def _drawn_rows(
        self,
        adata: AnnData | MuData,
        indices: Sequence[int] | None,
        n_samples_overall: int,
        library_size: float | str,
        batch_size: int | None,
        data_loader_kwargs: dict | None,
    ) -> np.ndarray:
        """``n_samples_overall`` rows of expression drawn as scVI draws them, decoding only the rows drawn.

        scVI decodes ``n_samples_overall // n_cells + 1`` posterior samples of every cell (the posterior mean when
        that is one) and keeps ``n_samples_overall`` of these rows, drawn uniformly with replacement. The same
        NumPy draw picks the rows first here, and only those are decoded: the same distribution, and with one sample
        per cell the same values, at a fraction of the decoding (what differential expression spends its time on).
        """
        cells = np.arange(adata.n_obs) if indices is None else np.asarray(indices)
        n_samples = n_samples_overall // len(cells) + 1
        # NumPy's global generator, as scVI draws (``scvi.settings.seed`` seeds it)
        rows = np.random.choice(n_samples * len(cells), n_samples_overall)  # noqa: NPY002
        drawn, inverse = np.unique(rows, return_inverse=True)
        if n_samples == 1:
            return self._posterior_mean_rows(adata, cells[drawn], library_size, batch_size, data_loader_kwargs)[inverse]
        scale = None if isinstance(library_size, str) else library_size
        loader = self._make_data_loader(
            adata=adata, indices=cells[drawn % len(cells)], batch_size=batch_size, **(data_loader_kwargs or {})
        )
        values = np.concatenate([self.module.drawn_expression(tensors, scale).cpu().numpy() for tensors in loader])
        return values[inverse]

    def _gene_positions(self, genes: np.ndarray, gene_list: Sequence[str] | str) -> np.ndarray:
        """Positions in ``genes`` of ``gene_list`` entries given by name or, where symbols are known, by symbol."""
        if isinstance(gene_list, str):
            gene_list = [gene_list]
        names = pd.Index(genes)
        symbols = None
        if self.gene_symbols_ is not None and np.array_equal(genes, self.gene_names_):
            symbols = pd.Index(self.gene_symbols_)
        positions, missing = [], []
        for gene in gene_list:
            position = names.get_indexer([gene])[0]
            if position < 0 and symbols is not None and gene in symbols:
                position = int(np.flatnonzero(symbols == gene)[0])
            if position < 0:
                missing.append(gene)
            positions.append(position)
        if missing:
            by = "`var_names` or gene symbols" if symbols is not None else "`var_names` (the model knows no symbols)"
            raise ValueError(
                f"{len(missing)} genes of `gene_list` are not among the model's genes, e.g. {missing[:3]}; "
                f"name genes by {by}."
            )
        return np.asarray(positions, dtype=int)

    @torch.inference_mode()
    def get_latent_library_size(
        self,
        adata: AnnData | MuData | None = None,
        indices: Sequence[int] | None = None,
        give_mean: bool = True,
        batch_size: int | None = None,
        dataloader: Iterator[dict[str, torch.Tensor | None]] | None = None,
        **data_loader_kwargs,
    ) -> np.ndarray:
        """Each cell's library size ``(n_cells, 1)``: its observed raw total.

        The likelihood is conditioned on the observed total (as scVI with ``use_observed_lib_size=True``), so
        there is no latent library posterior and ``give_mean`` has no effect.
        """
        del give_mean
        if dataloader is None:
            self._check_if_trained(warn=False)
            adata = self._validate_anndata(adata)
            dataloader = self._make_data_loader(
                adata=adata, indices=indices, batch_size=batch_size, **data_loader_kwargs
            )
        return torch.cat([observed_library(tensors).float().cpu() for tensors in dataloader]).numpy()

    @torch.inference_mode()
    def posterior_predictive_sample(
        self,
        adata: AnnData | MuData | None = None,
        indices: Sequence[int] | None = None,
        transform_batch: Sequence[Number | str] | None = None,
        n_samples: int = 1,
        gene_list: Sequence[str] | None = None,
        batch_size: int | None = None,
        dataloader: Iterator[dict[str, torch.Tensor | None]] | None = None,
        silent: bool = True,
        **data_loader_kwargs,
    ):
        """Counts from the posterior predictive, as :meth:`scvi.model.base.RNASeqMixin.posterior_predictive_sample`.

        Latent tokens are sampled from the posterior (its mean when ``n_samples == 1``), counts from the
        all-gene ZINB with each cell's observed total. ``transform_batch`` and ``silent`` have no effect.

        Returns
        -------
        a ``sparse.GCXS`` array ``(n_cells, n_genes)``, or ``(n_cells, n_genes, n_samples)`` when ``n_samples > 1``.
        """
        import sparse

        del transform_batch, silent
        columns = slice(None)
        if dataloader is None:
            adata = self._validate_anndata(adata)
            self._check_cells_have_counts(adata, indices)
            if gene_list is not None:
                columns = np.sort(self._gene_positions(gene_names(adata, self.registry_), gene_list))
            dataloader = self._make_data_loader(
                adata=adata, indices=indices, batch_size=batch_size, **data_loader_kwargs
            )
        self.module.eval()
        samples = [
            sparse.GCXS.from_numpy(self.module.predictive_sample(tensors, n_samples=n_samples)[:, columns].numpy())
            for tensors in dataloader
        ]
        return sparse.concatenate(samples, axis=0)

    @torch.inference_mode()
    def get_latent_tokens(
        self,
        adata: AnnData | MuData | None = None,
        indices: Sequence[int] | None = None,
        batch_size: int | None = None,
        return_dist: bool = False,
    ) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        """Posterior means of the ``K`` latent tokens, ``(n_cells, n_latent_tokens, n_hidden)``.

        Their mean over tokens is :meth:`get_latent_representation`; :meth:`decode_latent_tokens` maps
        (possibly edited) tokens back to expression. ``return_dist=True`` returns the posterior means and
        variances, each of that shape: what :meth:`minify_adata` caches (the decoder needs the tokens, so the
        pooled posterior of ``get_latent_representation(return_dist=True)`` cannot replace them).
        """
        adata = self._validate_anndata(adata)
        self._check_cells_have_counts(adata, indices)
        self.module.eval()
        means, variances = [], []
        for tensors in self._make_data_loader(adata=adata, indices=indices, batch_size=batch_size):
            outputs = self.module.inference(**self.module._get_inference_input(tensors))
            means.append(outputs[SCT_MODULE_KEYS.QZ_TOKENS_MEAN_KEY].cpu())
            variances.append(outputs[SCT_MODULE_KEYS.QZ_TOKENS_LOGVAR_KEY].exp().cpu())
        if return_dist:
            return torch.cat(means).numpy(), torch.cat(variances).numpy()
        return torch.cat(means).numpy()

    @torch.inference_mode()
    def decode_latent_tokens(
        self,
        tokens: np.ndarray,
        gene_list: Sequence[str] | None = None,
        library_size: float | np.ndarray = 1.0,
        batch_size: int = 256,
    ) -> np.ndarray:
        """Expected expression decoded from latent tokens (e.g. after an intervention on them).

        Parameters
        ----------
        tokens
            ``(n_cells, n_latent_tokens, n_hidden)``, as from :meth:`get_latent_tokens`.
        gene_list
            Genes to decode (the softmax normalises over them); all model genes by default.
        library_size
            A number, or per-cell totals ``(n_cells,)``; ``1`` gives proportions.
        batch_size
            Cells per batch.

        Returns
        -------
        ``(n_cells, n_genes)`` array.
        """
        genes = pd.Index(self.gene_names_)
        chosen = np.arange(genes.size) if gene_list is None else genes.get_indexer(list(gene_list))
        if (chosen < 0).any():
            raise ValueError("Some genes of `gene_list` are not among the model's genes.")
        tokens = np.asarray(tokens, dtype=np.float32)
        expected = (self.module.n_latent_tokens, self.module.n_hidden)
        if tokens.ndim != 3 or tokens.shape[1:] != expected:
            raise ValueError(f"`tokens` must have shape (n_cells, {expected[0]}, {expected[1]}), got {tokens.shape}.")
        library = np.broadcast_to(np.asarray(library_size, dtype=np.float32), (tokens.shape[0],))
        genes_t = torch.as_tensor(chosen, device=self.device)
        self.module.eval()
        out = []
        for start in range(0, tokens.shape[0], batch_size):
            block = torch.as_tensor(tokens[start : start + batch_size], device=self.device)
            logits = self.module.decode(block, self.module.pooling(block), genes_t)
            proportions = torch.softmax(logits[..., 0].float(), dim=-1).cpu().numpy()
            out.append(proportions * library[start : start + batch_size, None])
        return np.concatenate(out)
