"""Analysis methods of the module for scvi-tools' ``RNASeqMixin`` and ``VAEMixin``.

All-gene decoding, posterior predictive samples and the importance-sampled marginal log-likelihood.

Written against the module's public contract only: ``inference(x, n_samples=...)`` (``"z"``, ``"qz"`` and the
token keys), ``decode(z_tokens, pooled_sample, genes)``, ``decoder.count_distribution``, ``prior_parameters(tensors)``,
``pooling`` and ``n_input``; training (``generative``/``loss``) is untouched.
"""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING

import torch
from scvi import REGISTRY_KEYS, settings
from torch.distributions import Normal

from sctrilemma._constants import SCT_MODULE_KEYS as KEYS

if TYPE_CHECKING:
    from scvi.distributions import ZeroInflatedNegativeBinomial
    from scvi.module.base import LossOutput

# Genes decoded per call when decoding the whole vocabulary; the decoder treats genes independently,
# so chunking gives the same logits and bounds activation memory.
GENE_CHUNK = 4096


class AnalysisModuleMixin:
    """All-gene expression distribution, predictive sampling and marginal likelihood.

    Place before :class:`~scvi.module.base.BaseModuleClass` in the bases.
    ``forward(..., compute_loss=False)`` (what scvi-tools' ``RNASeqMixin`` calls for normalized
    expression, likelihood parameters and denoised samples) returns the zero-inflated negative binomial
    over **all** genes of the vocabulary, with the softmax proportions normalised over all of them and the
    mean scaled by each cell's observed total. ``forward(..., compute_loss=True)`` (training, ELBO) is the
    module's own generative path.
    """

    gene_likelihood = "zinb"

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
        """scvi-tools' forward pass; without the loss, the generative outputs cover every gene (see class docs)."""
        if compute_loss:
            return super().forward(
                tensors,
                get_inference_input_kwargs=get_inference_input_kwargs,
                get_generative_input_kwargs=get_generative_input_kwargs,
                inference_kwargs=inference_kwargs,
                generative_kwargs=generative_kwargs,
                loss_kwargs=loss_kwargs,
                compute_loss=True,
            )
        inference_inputs = self._get_inference_input(tensors, **(get_inference_input_kwargs or {}))
        inference_outputs = self.inference(**inference_inputs, **(inference_kwargs or {}))
        library = observed_library(tensors)
        return inference_outputs, self.expression_generative(inference_outputs, library, **(generative_kwargs or {}))

    def expression_generative(
        self, inference_outputs: dict, library: torch.Tensor, transform_batch: torch.Tensor | None = None
    ) -> dict[str, ZeroInflatedNegativeBinomial]:
        """ZINB ``px`` over all genes, ``(..., batch, n_input)``, from the latent tokens of ``inference_outputs``.

        ``library`` ``(batch, 1)`` is each cell's observed total. ``transform_batch`` is accepted for
        scvi-tools compatibility and has no effect: the model has no batch covariate.
        """
        del transform_batch
        z_tokens = inference_outputs[KEYS.Z_TOKENS_KEY]
        pooled = inference_outputs["z"]
        leading = z_tokens.shape[:-2]
        flat_tokens = z_tokens.reshape(-1, *z_tokens.shape[-2:])
        flat_pooled = pooled.reshape(-1, pooled.shape[-1])
        genes = torch.arange(self.n_input, device=z_tokens.device)
        logits = torch.cat(
            [
                self.decode(flat_tokens, flat_pooled, genes[start : start + GENE_CHUNK]).float()
                for start in range(0, self.n_input, GENE_CHUNK)
            ],
            dim=1,
        ).view(*leading, self.n_input, 2)
        px = self.decoder.count_distribution(logits, None, library)
        return {KEYS.PX_KEY: px}

    @torch.inference_mode()
    def drawn_expression(self, tensors: dict[str, torch.Tensor], library_size: float | None) -> torch.Tensor:
        """Expression over all genes ``(batch, n_input)`` at one posterior draw of each cell's latent tokens.

        The decoder's proportions times ``library_size``, or with ``None`` the ZINB mean (proportions times the
        observed total). Each row of the batch gets its own draw, so a cell listed twice gets two.
        """
        outputs = self.inference(**self._get_inference_input(tensors))
        q_mean, q_logvar = outputs[KEYS.QZ_TOKENS_MEAN_KEY], outputs[KEYS.QZ_TOKENS_LOGVAR_KEY]
        z_tokens = q_mean + torch.exp(0.5 * q_logvar) * torch.randn_like(q_mean)
        drawn = self.inference_outputs(z_tokens, q_mean, q_logvar, outputs.get(KEYS.CROP_KEY))
        px = self.expression_generative(drawn, observed_library(tensors))[KEYS.PX_KEY]
        return px.mu if library_size is None else px.scale * library_size

    @torch.inference_mode()
    def predictive_sample(
        self, tensors: dict[str, torch.Tensor], n_samples: int = 1, generative_kwargs: dict | None = None
    ) -> torch.Tensor:
        """Posterior predictive counts over all genes: ``(batch, n_input)``, or ``(batch, n_input, n_samples)``.

        ``n_samples`` latent samples are drawn from the posterior (its mean when ``n_samples == 1``, as in
        ``inference``), then counts from the ZINB. Shapes follow :meth:`scvi.module.VAE.sample`.
        """
        _, generative_outputs = self.forward(
            tensors,
            inference_kwargs={"n_samples": n_samples},
            generative_kwargs=generative_kwargs,
            compute_loss=False,
        )
        counts = generative_outputs[KEYS.PX_KEY].sample()
        if n_samples > 1:
            counts = counts.permute(1, 2, 0)
        return counts.cpu()

    @torch.inference_mode()
    def marginal_ll(
        self,
        tensors: dict[str, torch.Tensor],
        n_mc_samples: int,
        return_mean: bool = False,
        n_mc_samples_per_pass: int = 1,
    ) -> torch.Tensor | float:
        r"""Importance-sampled marginal log-likelihood :math:`\log p(x \mid \ell)` per cell, ``(batch,)``.

        Latent tokens are drawn from the posterior :math:`q(z \mid x)`;
        :math:`\log \frac{1}{S}\sum_s p(x \mid z_s, \ell)\, p(z_s) / q(z_s \mid x)` with the prior of
        :meth:`prior_parameters` and the all-gene ZINB conditioned on the observed library :math:`\ell` (as
        scVI with ``use_observed_lib_size=True``). Needs the pseudo-bulk codes of the cells' groups (the model
        API sets them).
        """
        if n_mc_samples_per_pass > n_mc_samples:
            warnings.warn(
                "Number of chunks is larger than the total number of samples, setting it to the number of samples",
                RuntimeWarning,
                stacklevel=settings.warnings_stacklevel,
            )
            n_mc_samples_per_pass = n_mc_samples
        x = tensors[REGISTRY_KEYS.X_KEY]
        inference_outputs = self.inference(**self._get_inference_input(tensors))
        q_mean = inference_outputs[KEYS.QZ_TOKENS_MEAN_KEY]
        qz = Normal(q_mean, torch.exp(0.5 * inference_outputs[KEYS.QZ_TOKENS_LOGVAR_KEY]))
        prior_mean, prior_logvar = self.prior_parameters(tensors)
        pz = Normal(prior_mean.to(q_mean) + torch.zeros_like(q_mean), torch.exp(0.5 * prior_logvar.to(q_mean)))
        x = x.to(q_mean.device)
        library = x.sum(1, keepdim=True)
        log_weights = []
        for start in range(0, n_mc_samples, n_mc_samples_per_pass):
            z_tokens = qz.sample((min(n_mc_samples_per_pass, n_mc_samples - start),))
            outputs = {KEYS.Z_TOKENS_KEY: z_tokens, "z": self.pooling(z_tokens)}
            px = self.expression_generative(outputs, library)[KEYS.PX_KEY]
            log_px = px.log_prob(x).sum(-1)
            log_ratio = (pz.log_prob(z_tokens) - qz.log_prob(z_tokens)).sum(dim=(-2, -1))
            log_weights.append(log_px + log_ratio)
        log_lkl = torch.logsumexp(torch.cat(log_weights, dim=0), dim=0) - math.log(n_mc_samples)
        if return_mean:
            return torch.mean(log_lkl).item()
        return log_lkl.cpu()


def observed_library(tensors: dict[str, torch.Tensor]) -> torch.Tensor:
    """Each cell's observed raw total ``(batch, 1)`` (the library the likelihood is conditioned on).

    Minified data has no counts and carries the total cached by ``minify_adata`` instead.
    """
    cached = tensors.get(REGISTRY_KEYS.OBSERVED_LIB_SIZE)
    if cached is not None:
        return cached.reshape(-1, 1)
    return tensors[REGISTRY_KEYS.X_KEY].sum(dim=1, keepdim=True)
