"""Reconstructed expression from the decoder (``get_normalized_expression``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import numpy as np
import pandas as pd
import torch
from scvi import REGISTRY_KEYS

from sctrilemma._constants import SCT_MODULE_KEYS
from sctrilemma.model._utils import gene_names

if TYPE_CHECKING:
    from collections.abc import Sequence

    from anndata import AnnData
    from mudata import MuData
    from scvi.data import AnnDataManager


class ExpressionMixin:
    """Decoder outputs for any of the model's genes."""

    @property
    def precision(self) -> str:
        """Arithmetic of embedding and reconstruction (not of training), one of ``"auto"``, ``"fp32"`` or ``"bf16"``.

        ``"auto"`` (the default) is bf16 autocast on CUDA and fp32 on CPU; ``"bf16"`` also uses bf16 on
        CPUs, several times faster on those with AMX or AVX-512 BF16, with embeddings at cosine
        similarity above 0.999 to fp32 in ``benchmarks/vs_reference.py``. A runtime setting, not saved
        with the model. Set it before :meth:`get_latent_representation` or :meth:`get_normalized_expression`.
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
        gene_list: Sequence[str] | None = None,
        library_size: float | Literal["observed"] = "observed",
        n_samples: int = 1,
        return_mean: bool = True,
        return_numpy: bool = False,
        batch_size: int | None = None,
    ) -> pd.DataFrame | np.ndarray:
        r"""Reconstructed expression from the decoder.

        The decoder's softmax normalises over a decoded gene set: the data's top-``crop_size`` genes by
        total counts plus ``gene_list``. Ratios between genes do not depend on that set.

        Parameters
        ----------
        adata
            Data with the model's genes; defaults to the training data.
        indices
            Cells to use; all by default.
        gene_list
            Genes (``var_names``) to return; the decoded set by default.
        library_size
            ``"observed"``: each cell's raw total, giving expected counts (the ZINB mean); a number
            scales the proportions instead (``1`` gives proportions, ``1e4`` CP10K-like values).
        n_samples
            Posterior samples of the latent tokens; ``1`` uses the posterior mean.
        return_mean
            Average over samples (otherwise an array ``(n_samples, n_cells, n_genes)``).
        return_numpy
            Return an array instead of a DataFrame.
        batch_size
            Cells per batch.

        Returns
        -------
        ``(n_cells, n_genes)`` DataFrame indexed by cell names with gene columns, or an array.

        Notes
        -----
        On a zero-shot query (:meth:`load_query_data`) ``gene_list`` may name reference genes the query
        did not measure (``adata.var["measured"]`` is ``False``). Their values are imputed: the decoder
        predicts them from the cell's latent tokens as it learned on the reference data. They are only
        as good as the reference's coverage of that cell state and gene, carry no information from the
        query's own measurement of the gene, and should not be used as observations in differential
        expression tests.
        """
        adata = self._validate_anndata(adata)
        self._check_cells_have_counts(adata, indices)
        genes = gene_names(adata, self.registry_)
        manager = self.get_anndata_manager(adata, required=True)
        cell_indices = np.arange(adata.n_obs) if indices is None else np.asarray(indices)
        decoded = self._default_reconstruction_genes(manager, cell_indices)
        if gene_list is None:
            output = decoded
        else:
            position = pd.Index(genes)
            missing = [g for g in gene_list if g not in position]
            if missing:
                raise ValueError(
                    f"{len(missing)} genes of `gene_list` are not among the model's genes, e.g. {missing[:3]}."
                )
            output = position.get_indexer(list(gene_list))
            decoded = np.union1d(decoded, output)
        if isinstance(library_size, str) and library_size != "observed":
            raise ValueError(f"`library_size` must be 'observed' or a number, got {library_size!r}.")
        columns_in_decoded = np.searchsorted(decoded, output)
        device = self.device
        decoded_t = torch.as_tensor(decoded, device=device)
        self.module.eval()
        results = []
        for tensors in self._make_data_loader(adata=adata, indices=cell_indices, batch_size=batch_size):
            x = tensors[REGISTRY_KEYS.X_KEY].to(device)
            inference = self.module.inference(x, n_samples=n_samples)
            z_tokens = inference[SCT_MODULE_KEYS.Z_TOKENS_KEY]
            pooled = inference["z"]
            flat_tokens = z_tokens.reshape(-1, *z_tokens.shape[-2:])
            logits = self.module.decode(flat_tokens, pooled.reshape(-1, pooled.shape[-1]), decoded_t)
            proportions = torch.softmax(logits[..., 0].float(), dim=-1)[:, columns_in_decoded]
            if library_size == "observed":
                library = x.sum(1, keepdim=True).repeat(n_samples, 1)
            else:
                library = torch.tensor(float(library_size), device=device)
            results.append((proportions * library).view(n_samples, x.shape[0], -1).cpu().numpy())
        values = np.concatenate(results, axis=1)
        if return_mean or n_samples == 1:
            values = values.mean(0)
        if return_numpy or values.ndim == 3:
            return values
        return pd.DataFrame(values, index=adata.obs_names[cell_indices], columns=genes[output])

    @torch.inference_mode()
    def get_latent_tokens(
        self,
        adata: AnnData | MuData | None = None,
        indices: Sequence[int] | None = None,
        batch_size: int | None = None,
    ) -> np.ndarray:
        """Posterior means of the ``K`` latent tokens, ``(n_cells, n_latent_tokens, n_hidden)``.

        Their mean over tokens is :meth:`get_latent_representation`; :meth:`decode_latent_tokens` maps
        (possibly edited) tokens back to expression.
        """
        adata = self._validate_anndata(adata)
        self._check_cells_have_counts(adata, indices)
        self.module.eval()
        tokens = [
            self.module.inference(tensors[REGISTRY_KEYS.X_KEY].to(self.device))[
                SCT_MODULE_KEYS.QZ_TOKENS_MEAN_KEY
            ].cpu()
            for tensors in self._make_data_loader(adata=adata, indices=indices, batch_size=batch_size)
        ]
        return torch.cat(tokens).numpy()

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
        expected = (tokens.shape[1], self.module.n_hidden)
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

    def _default_reconstruction_genes(self, manager: AnnDataManager, indices: np.ndarray) -> np.ndarray:
        """Sorted indices of the top-``crop_size`` genes by total counts over ``indices``."""
        matrix = manager.get_from_registry(REGISTRY_KEYS.X_KEY)
        totals = np.zeros(matrix.shape[1])
        for start in range(0, indices.size, 4096):
            block = matrix[np.sort(indices[start : start + 4096])]
            totals += np.asarray(block.sum(axis=0)).ravel()
        n = min(self.module.crop_size, totals.size)
        return np.sort(np.argsort(-totals, kind="stable")[:n])
