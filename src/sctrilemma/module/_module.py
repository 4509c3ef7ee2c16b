"""The scTrilemma module: E-Gate tokens, Perceiver latent bottleneck, C-Route decoder, ZINB likelihood."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import numpy as np
import torch
from scvi import REGISTRY_KEYS
from scvi.data._constants import ADATA_MINIFY_TYPE
from scvi.module.base import BaseMinifiedModeModuleClass, LossOutput, auto_move_data
from torch import nn
from torch.distributions import Normal

from sctrilemma._constants import SCT_MODULE_KEYS as KEYS
from sctrilemma._constants import SCT_REGISTRY_KEYS
from sctrilemma.module._analysis import AnalysisModuleMixin
from sctrilemma.module._arguments import check_module_arguments
from sctrilemma.module._decoder import ZINBDecoder
from sctrilemma.module._encoder import PerceiverEncoder
from sctrilemma.module._inputs import (
    GeneCrop,
    GeneDetection,
    encoder_training_input,
    expressed_crop,
    target_sample,
    thin_to_depth,
    training_crop,
)
from sctrilemma.module._prior import LOGVAR_MAX, LOGVAR_MIN, PseudobulkPrior, gaussian_kl
from sctrilemma.nn import TokenPooling

if TYPE_CHECKING:
    from sctrilemma.nn._layers import DecoderQuery, GeneEncoding, Pooling

PriorKind = Literal["pseudobulk", "normal"]
GeneEmbeddingInit = Literal["normal", "pca", "auto"]
Precision = Literal["auto", "fp32", "bf16"]
PRECISIONS = ("auto", "fp32", "bf16")
# "auto" starts the gene embeddings from the data above this many genes (docs/user_guide.md).
PCA_INIT_MIN_GENES = 3000


class SCTrilemmaModule(
    AnalysisModuleMixin,
    BaseMinifiedModeModuleClass,
):
    """Gene-token Perceiver VAE of :cite:p:`sctrilemma`.

    Parameters
    ----------
    n_input
        Number of genes in the vocabulary.
    n_hidden
        Token width ``d``, shared by gene tokens, latent tokens and decoder states.
    n_latent_tokens
        Number ``K`` of learned latent queries (bottleneck tokens).
    crop_size
        Gene positions per cell.
    n_encoder_layers, n_decoder_layers
        Cross-attention blocks in the encoder and the decoder.
    n_heads
        Attention heads.
    dropout_rate
        Dropout on attention weights and in the feed-forward layers.
    ffn_multiplier
        SwiGLU hidden width as a multiple of ``n_hidden``.
    prior
        ``"pseudobulk"`` (PB-Cond) or ``"normal"`` (standard normal).
    n_prior_codes
        Width ``M`` of the pseudo-bulk code.
    gene_encoding, decoder_query, pooling
        Component switches; the paper's model is ``"gate"``, ``"gate"``, ``"mean"``.
    n_decoder_targets
        ``"crop"`` (the paper): in training the encoder reads the paper's random crop and the decoder
        reconstructs the same crop, with the softmax and library taken over the crop. A number ``T``:
        the encoder reads each cell's top-``crop_size`` expressed genes in training as in embedding,
        and the decoder reconstructs ``T`` genes per cell sampled by :func:`~sctrilemma.module.target_sample`,
        weighted so that the likelihood estimates the one over all genes with the cell's whole library. The
        genes rarely expressed in the cells trained on so far (counted by ``gene_detection``) get their own
        small share of the zero-count targets.
    posterior_logvar_init
        Initial bias of the posterior log-variance head. ``0`` (PyTorch's default, the paper) starts
        the latent tokens at unit noise; a negative value starts them less noisy, so a short run's
        decoder can read the cell from its tokens before the head has learned to shrink the noise.
    min_depth_fraction
        With ``n_decoder_targets`` a number and a value below 1, the encoder reads each training cell's
        counts binomially thinned to a random fraction of its depth (log-uniform in
        ``[min_depth_fraction, 1]``) while the decoder still reconstructs the full counts, so the
        posterior learns to be the same at any sequencing depth. ``1`` (the paper) never thins.
    gene_panel_min_fraction
        With ``n_decoder_targets`` a number and a value below 1, the encoder reads each training cell with a random
        share of its genes zeroed, the share kept log-uniform in ``[gene_panel_min_fraction, 1]``, so that it learns
        to embed cells from any subset of its genes, as a query measured on a narrower panel. ``1`` (the paper) keeps
        all.
    embedding_depth_quantile
        ``"observed"`` (the paper): the encoder reads each cell's counts as they are outside training. A quantile
        ``q``: outside training (embedding, reconstruction, validation) every cell deeper than the ``q``-quantile of the
        training cells' depths is first thinned to that depth by :func:`~sctrilemma.module.thin_to_depth`, so
        that depth no longer reaches the embedding through the encoder's input. The depth is fitted by
        :meth:`fit_embedding_depth` when training starts and saved with the weights (``embedding_depth``).
    gene_embedding_init
        How the gene embeddings start: ``"normal"`` (``N(0, 1)``, the paper), ``"pca"`` (each gene's loadings on
        the principal components of the training data, set by the model when its training starts) or ``"auto"``
        (``"pca"`` above 3,000 genes, where each gene is sampled too rarely to learn its embedding from a random start).
    encoder_genes
        ``"all"`` (the paper): the encoder's crop may take any gene. A number ``n`` (with ``n_decoder_targets`` a
        number): on data with more than ``n`` genes the crop takes each cell's top expressed genes among the ``n`` most
        variable ones only (``encoder_gene_mask``, set by the model when its training starts and saved with the
        weights), while the decoder still reconstructs every gene.
    decoder_gene_offset
        ``False`` (the paper): the decoder's gene queries read the gene embeddings the encoder reads, and both train
        them. ``True``: the decoder reads them plus an offset per gene of its own (zero at the start), and its gradient
        trains the offsets only, so the table the encoder reads does not learn each gene's level from the decoder,
        which is what let a short run's encoder read sequencing depth. ``"auto"``: ``True`` where the gene
        embeddings start at random (``gene_embedding_init`` resolves to ``"normal"``).
    embedding_centred_on_prior
        ``False`` (the paper): the embedding is the pooled posterior mean. ``True`` (with PB-Cond): the model reports
        it minus the mean prior mean of the cell's dataset (:meth:`~sctrilemma.module.PseudobulkPrior.dataset_means`).

    Notes
    -----
    The paper's components each live in one place: the E-Gate tokens and the latent bottleneck in
    :class:`~sctrilemma.module.PerceiverEncoder`, C-Route and the ZINB likelihood in
    :class:`~sctrilemma.module.ZINBDecoder`, PB-Cond in :class:`~sctrilemma.module.PseudobulkPrior`. In evaluation
    without autograd the encoder and the decoder compute the same function by an exact fast path, in the arithmetic
    of :attr:`precision`; training always runs in fp32.

    ``inference`` follows scvi-tools' minified mode: it runs the encoder on the counts (``_regular_inference``), or,
    on a batch of data minified by :meth:`~sctrilemma.SCTrilemma.minify_adata` (which carries
    ``REGISTRY_KEYS.LATENT_QZM_KEY``), reads the cached **token** posteriors, flattened to ``(n_obs, K * n_hidden)``,
    because the decoder reads the ``K`` latent tokens. The loss always runs the encoder on the counts and is
    refused on data minified without them.
    """

    def __init__(
        self,
        n_input: int,
        *,
        n_hidden: int = 512,
        n_latent_tokens: int = 64,
        crop_size: int = 4096,
        n_encoder_layers: int = 3,
        n_decoder_layers: int = 3,
        n_heads: int = 8,
        dropout_rate: float = 0.1,
        ffn_multiplier: float = 4.0,
        prior: PriorKind = "pseudobulk",
        n_prior_codes: int = 32,
        gene_encoding: GeneEncoding = "gate",
        decoder_query: DecoderQuery = "gate",
        pooling: Pooling = "mean",
        n_decoder_targets: int | Literal["crop"] = "crop",
        posterior_logvar_init: float = 0.0,
        min_depth_fraction: float = 1.0,
        embedding_depth_quantile: float | Literal["observed"] = "observed",
        gene_embedding_init: GeneEmbeddingInit = "normal",
        decoder_gene_offset: bool | Literal["auto"] = False,
        encoder_genes: int | Literal["all"] = "all",
        embedding_centred_on_prior: bool = False,
        gene_panel_min_fraction: float = 1.0,
    ) -> None:
        super().__init__()
        check_module_arguments(**locals())
        if gene_embedding_init == "auto":
            gene_embedding_init = "pca" if n_input > PCA_INIT_MIN_GENES else "normal"
        if decoder_gene_offset == "auto":
            decoder_gene_offset = gene_embedding_init == "normal"
        self.n_decoder_targets = n_decoder_targets
        self.n_input = n_input
        self.n_hidden = n_hidden
        self.n_latent_tokens = n_latent_tokens
        self.crop_size = crop_size
        self.min_depth_fraction = min_depth_fraction
        self.gene_panel_min_fraction = gene_panel_min_fraction
        self.embedding_depth_quantile = embedding_depth_quantile
        # The depth cells are thinned to outside training; 0 until fitted, and in models saved without it.
        self.register_buffer("embedding_depth", torch.zeros(()))
        self.encoder_genes = encoder_genes
        self.embedding_centred_on_prior = bool(embedding_centred_on_prior)
        # The genes the encoder's crop may take; all until fitted, and in models saved without it.
        self.register_buffer("encoder_gene_mask", torch.ones(n_input, dtype=torch.bool))
        self.register_load_state_dict_pre_hook(_default_buffers)
        self.gene_embedding_init = gene_embedding_init
        block_kwargs = {"n_heads": n_heads, "dropout_rate": dropout_rate, "ffn_multiplier": ffn_multiplier}
        self.encoder = PerceiverEncoder(
            n_input, n_hidden, n_latent_tokens, n_encoder_layers, gene_encoding=gene_encoding,
            posterior_logvar_init=posterior_logvar_init, **block_kwargs,
        )  # fmt: skip
        self.pooling = TokenPooling(n_hidden, pooling=pooling)
        self.decoder = ZINBDecoder(
            n_input, n_hidden, n_decoder_layers, decoder_query=decoder_query, gene_offset=bool(decoder_gene_offset),
            **block_kwargs,
        )  # fmt: skip
        self.gene_detection = GeneDetection(n_input)  # names the rare genes for the decoder's target sample
        # (n_datasets, n_genes): the genes each training dataset measured; set by SCTrilemma.train, not saved.
        self.register_buffer("measured_genes", None, persistent=False)
        # Built last, so that adding the prior leaves every other parameter's initialisation unchanged.
        self.prior_kind = prior
        self.prior = PseudobulkPrior(n_prior_codes, n_hidden) if prior == "pseudobulk" else None
        self.precision = "auto"

    @property
    def precision(self) -> Precision:
        """Arithmetic of evaluation (embedding, reconstruction), one of ``"fp32"``, ``"bf16"`` (autocast) or ``"auto"``.

        ``"auto"`` is bf16 on CUDA devices that support it and fp32 on CPU; training always runs in fp32. bf16
        keeps about three significant digits; ``benchmarks/vs_reference.py`` reports each cell's embedding cosine
        to fp32.
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

    def _eval_dtype(self, device: torch.device) -> torch.dtype:
        return torch.bfloat16 if self.uses_bf16(device) else torch.float32

    @property
    def gene_embedding(self) -> nn.Embedding:
        """The gene embeddings, read by the encoder for its gene tokens and by the decoder for its gene queries."""
        return self.encoder.gene_embedding

    def encode(self, crop: GeneCrop, library: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Posterior mean and clamped log-variance of the ``K`` latent tokens.

        Computed by the :class:`~sctrilemma.module.PerceiverEncoder` in the arithmetic of :attr:`precision`.
        """
        return self.encoder(crop, library, self._eval_dtype(crop.genes.device))

    def decode(self, z_tokens: torch.Tensor, pooled_sample: torch.Tensor, genes: torch.Tensor) -> torch.Tensor:
        """Decoder logits ``(batch, n, 2)`` (mean logit, zero-inflation logit) for ``genes``.

        ``genes`` is ``(batch, n)`` (per-cell targets) or ``(n,)`` (the same genes for every cell). Computed by the
        :class:`~sctrilemma.module.ZINBDecoder` in the arithmetic of :attr:`precision`.
        """
        return self.decoder(z_tokens, pooled_sample, genes, self.gene_embedding, self._eval_dtype(z_tokens.device))

    # ------------------------------------------------------------------ inference
    def _get_inference_input(self, tensors: dict[str, torch.Tensor], full_forward_pass: bool = False) -> dict:
        """Counts ``{"x"}``, or on minified data the cached ``{"qzm", "qzv", "observed_lib_size"}``."""
        if full_forward_pass or REGISTRY_KEYS.LATENT_QZM_KEY not in tensors:
            return {"x": tensors[REGISTRY_KEYS.X_KEY]}
        return {
            "qzm": tensors[REGISTRY_KEYS.LATENT_QZM_KEY],
            "qzv": tensors[REGISTRY_KEYS.LATENT_QZV_KEY],
            "observed_lib_size": tensors[REGISTRY_KEYS.OBSERVED_LIB_SIZE],
        }

    @auto_move_data
    def _cached_inference(
        self, qzm: torch.Tensor, qzv: torch.Tensor, observed_lib_size: torch.Tensor | None = None, n_samples: int = 1
    ) -> dict:
        """Inference outputs from cached token posteriors: means ``qzm`` and variances ``qzv``, ``(batch, K * d)``.

        The same outputs as the encoder's path without a ``crop`` (there are no counts): the tokens are the
        posterior mean for ``n_samples == 1`` and ``n_samples`` draws otherwise, as in evaluation mode.
        ``observed_lib_size`` is accepted for scvi-tools' interface; the likelihood reads it from the batch.
        """
        del observed_lib_size
        shape = (qzm.shape[0], self.n_latent_tokens, self.n_hidden)
        q_mean = qzm.float().reshape(shape)
        q_logvar = torch.log(qzv.float().reshape(shape)).clamp(LOGVAR_MIN, LOGVAR_MAX)
        if n_samples > 1:
            z_tokens = Normal(q_mean, torch.exp(0.5 * q_logvar)).rsample((n_samples,))
        else:
            z_tokens = q_mean
        return self.inference_outputs(z_tokens, q_mean, q_logvar, None)

    def forward(
        self,
        tensors: dict[str, torch.Tensor],
        get_inference_input_kwargs: dict | None = None,
        get_generative_input_kwargs: dict | None = None,
        inference_kwargs: dict | None = None,
        generative_kwargs: dict | None = None,
        loss_kwargs: dict | None = None,
        compute_loss: bool = True,
    ) -> tuple[dict, dict] | tuple[dict, dict, LossOutput]:
        """scvi-tools' forward pass; with the loss, the encoder always reads the counts (see the class notes).

        Raises
        ------
        ValueError
            For the loss on data minified without counts.
        """
        if compute_loss:
            if self.minified_data_type == ADATA_MINIFY_TYPE.LATENT_POSTERIOR:
                raise ValueError(f"The {type(self).__name__}.loss function currently does not support minified data.")
            # The reconstruction targets and the training crop come from the counts and the encoder's crop.
            get_inference_input_kwargs = {"full_forward_pass": True, **(get_inference_input_kwargs or {})}
        return super().forward(
            tensors,
            get_inference_input_kwargs=get_inference_input_kwargs,
            get_generative_input_kwargs=get_generative_input_kwargs,
            inference_kwargs=inference_kwargs,
            generative_kwargs=generative_kwargs,
            loss_kwargs=loss_kwargs,
            compute_loss=compute_loss,
        )

    @auto_move_data
    def _regular_inference(self, x: torch.Tensor, n_samples: int = 1, crop: GeneCrop | None = None) -> dict:
        """Encode a count batch ``x`` ``(batch, n_genes)``.

        In eval mode the tokens are each cell's top expressed genes and ``z`` is the posterior mean
        (sampled only when ``n_samples > 1``); in training mode ``z`` is sampled and the tokens are the
        paper's random training crop, or the same top expressed genes with ties broken at random when
        ``n_decoder_targets`` is a number. ``"qz"`` and ``"z"`` are the pooled cell-level quantities
        (``r`` and ``s`` of the paper); the token-level ones are under their own keys.
        """
        if crop is None and not self.training and self.embedding_depth > 0:
            x = thin_to_depth(x, float(self.embedding_depth))
        library = None  # the library of the counts the encoder reads: theirs, unless thinned for training below
        if crop is None:
            if not self.training:
                crop = expressed_crop(x, self.crop_size, among=self._encoder_genes())
            elif self.n_decoder_targets == "crop":
                crop = training_crop(x, self.crop_size)
            else:
                among = self._encoder_genes()
                read, library = encoder_training_input(x, self.min_depth_fraction, self.gene_panel_min_fraction, among)
                crop = expressed_crop(read, self.crop_size, random_ties=True)
                crop = crop if among is None else crop._replace(genes=among[crop.genes])
        q_mean, q_logvar = self.encode(crop, x.sum(dim=1, keepdim=True) if library is None else library)
        q_std = torch.exp(0.5 * q_logvar)
        if n_samples > 1:
            z_tokens = Normal(q_mean, q_std).rsample((n_samples,))
        elif self.training:
            z_tokens = q_mean + q_std * torch.randn_like(q_std)
        else:
            z_tokens = q_mean
        return self.inference_outputs(z_tokens, q_mean, q_logvar, crop)

    def _encoder_genes(self) -> torch.Tensor | None:
        """The indices of the genes the encoder reads, or ``None`` for every gene."""
        return None if bool(self.encoder_gene_mask.all()) else self.encoder_gene_mask.nonzero().squeeze(1)

    def fit_embedding_depth(self, library: np.ndarray) -> None:
        """Set ``embedding_depth`` to the ``embedding_depth_quantile`` of the training cells' depths ``library``."""
        if self.embedding_depth_quantile != "observed":
            self.embedding_depth.fill_(float(np.quantile(library, self.embedding_depth_quantile)))

    def inference_outputs(
        self, z_tokens: torch.Tensor, q_mean: torch.Tensor, q_logvar: torch.Tensor, crop: GeneCrop | None
    ) -> dict:
        """The outputs of ``inference`` from the latent tokens ``z_tokens`` and their posterior."""
        return {
            "z": self.pooling(z_tokens),
            "qz": self.pooled_posterior(q_mean, q_logvar),
            KEYS.Z_TOKENS_KEY: z_tokens,
            KEYS.QZ_TOKENS_MEAN_KEY: q_mean,
            KEYS.QZ_TOKENS_LOGVAR_KEY: q_logvar,
            KEYS.CROP_KEY: crop,
        }

    def pooled_posterior(self, q_mean: torch.Tensor, q_logvar: torch.Tensor) -> Normal:
        """Distribution of the pooled sample ``s``; its mean is the cell embedding ``r``.

        Exact for mean pooling (a mean of ``K`` independent Gaussians); for attention pooling the
        weights are taken at the posterior mean.
        """
        if self.pooling.score is None:
            weights = torch.full_like(q_mean[..., :1], 1.0 / q_mean.shape[-2])
        else:
            weights = torch.softmax(self.pooling.score(q_mean), dim=-2)
        mean = (weights * q_mean).sum(dim=-2)
        var = (weights.square() * q_logvar.exp()).sum(dim=-2)
        return Normal(mean, var.sqrt())

    def _get_generative_input(self, tensors: dict[str, torch.Tensor], inference_outputs: dict) -> dict:
        target = inference_outputs[KEYS.CROP_KEY]
        x = tensors[REGISTRY_KEYS.X_KEY].to(target.counts.device)
        measured = self._measured_genes_of(tensors, x)
        if self.n_decoder_targets != "crop":
            if self.training:
                self.gene_detection.update(x)
            rare_genes = self.gene_detection.rare_genes()
            target = target_sample(x, self.n_decoder_targets, rare_genes=rare_genes, measured=measured)
        elif not self.training:
            # The embedding crop has no zero genes; score reconstruction on a training-style crop.
            target = training_crop(x, self.crop_size, measured=measured)
        elif measured is not None:  # the crop's zero-count genes that the cell's dataset did not measure
            keep = measured.gather(1, target.genes) | (target.counts > 0)
            keep = keep if target.mask is None else keep & target.mask
            target = target._replace(counts=target.counts * keep, mask=keep)
        return {
            "z_tokens": inference_outputs[KEYS.Z_TOKENS_KEY],
            "pooled_sample": inference_outputs["z"],
            "target": target,
            "library": x.sum(1, keepdim=True),
        }

    def _measured_genes_of(self, tensors: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor | None:
        """``(batch, n_genes)`` genes measured by each cell's dataset, or ``None`` when all genes count.

        Cells of a dataset the model was not trained on (a code past :attr:`measured_genes`) count every gene.
        """
        dataset = tensors.get(SCT_REGISTRY_KEYS.DATASET_KEY)
        if self.measured_genes is None or dataset is None:
            return None
        codes = dataset.to(x.device).long().view(-1)
        unknown = codes >= self.measured_genes.shape[0]
        return self.measured_genes[codes.clamp(max=self.measured_genes.shape[0] - 1)] | unknown[:, None]

    @auto_move_data
    def generative(
        self,
        z_tokens: torch.Tensor,
        pooled_sample: torch.Tensor,
        target: GeneCrop,
        library: torch.Tensor | None = None,
        transform_batch: torch.Tensor | None = None,
    ) -> dict:
        """ZINB over the ``target`` genes.

        For the paper's crop (``target.weights`` is ``None``): softmax proportions over the crop times
        the raw total over the crop. For a weighted :func:`~sctrilemma.module.target_sample`: proportions
        of the whole transcriptome, whose softmax normaliser is estimated from the weighted targets,
        times the cell's whole raw ``library`` ``(batch, 1)``.
        ``transform_batch`` is accepted for scvi-tools compatibility and has no effect: the model
        has no batch covariate.
        """
        del transform_batch
        leading = z_tokens.shape[:-2]
        flat_tokens = z_tokens.reshape(-1, *z_tokens.shape[-2:])
        flat_pooled = pooled_sample.reshape(-1, pooled_sample.shape[-1])
        genes = target.genes.expand(*leading[:-1], *target.genes.shape).reshape(-1, target.genes.shape[-1])
        logits = self.decode(flat_tokens, flat_pooled, genes).view(*leading, -1, 2)
        if target.weights is None:
            library = (target.counts * (1.0 if target.mask is None else target.mask)).sum(-1, keepdim=True)
        elif library is None:
            raise ValueError("A weighted target sample needs the cells' whole `library`.")
        px = self.decoder.count_distribution(logits, target.genes, library, weights=target.weights, mask=target.mask)
        return {KEYS.PX_KEY: px, KEYS.TARGET_KEY: target}

    def prior_parameters(self, tensors: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Prior mean and log-variance of the cells in ``tensors``, broadcastable to ``(batch, K, n_hidden)``."""
        if self.prior is None:
            zero = torch.zeros((), device=self.decoder.px_r.device)
            return zero, zero
        return self.prior(self.prior.group_codes_for(tensors))

    # ------------------------------------------------------------------ loss
    def loss(
        self,
        tensors: dict[str, torch.Tensor],
        inference_outputs: dict,
        generative_outputs: dict,
        kl_weight: float = 1.0,
    ) -> LossOutput:
        """ZINB negative log-likelihood summed over genes plus ``kl_weight`` times the KL summed over ``K x d``."""
        px, target = generative_outputs[KEYS.PX_KEY], generative_outputs[KEYS.TARGET_KEY]
        nll = -px.log_prob(target.counts)
        if target.mask is not None:
            nll = torch.where(target.mask, nll, torch.zeros_like(nll))
        if target.weights is not None:  # an unbiased estimate of the NLL summed over all genes
            nll = nll * target.weights
        reconstruction = nll.sum(-1)
        if reconstruction.dim() > 1:  # several posterior samples
            reconstruction = reconstruction.mean(0)
        prior_mean, prior_logvar = self.prior_parameters(tensors)
        kl = gaussian_kl(
            inference_outputs[KEYS.QZ_TOKENS_MEAN_KEY],
            inference_outputs[KEYS.QZ_TOKENS_LOGVAR_KEY],
            prior_mean,
            prior_logvar,
        ).sum(dim=(-2, -1))
        return LossOutput(
            loss=torch.mean(reconstruction + kl_weight * kl), reconstruction_loss=reconstruction, kl_local=kl
        )


def _default_buffers(module: nn.Module, state_dict: dict, prefix: str, *args) -> None:
    """A state saved without the fitted buffers loads as it was trained: cells unthinned, the encoder on every gene."""
    state_dict.setdefault(f"{prefix}embedding_depth", torch.zeros(()))
    state_dict.setdefault(f"{prefix}encoder_gene_mask", torch.ones(module.n_input, dtype=torch.bool))
