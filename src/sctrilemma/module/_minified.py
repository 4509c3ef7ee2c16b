"""Inference from cached token posteriors, for data minified by :meth:`~sctrilemma.SCTrilemma.minify_adata`.

scvi-tools' minified mode (:class:`~scvi.module.base.BaseMinifiedModeModuleClass`): ``inference`` reads the
posterior parameters cached in the data instead of running the encoder. scVI caches the posterior of its single
``z``; SCTrilemma's decoder reads the ``K`` latent tokens, so the cache holds the **token** posteriors, flattened to
``(n_obs, K * n_hidden)``, and the pooled posterior is recomputed from them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from scvi import REGISTRY_KEYS
from scvi.data._constants import ADATA_MINIFY_TYPE
from scvi.module.base import auto_move_data
from torch.distributions import Normal

from sctrilemma.module._prior import LOGVAR_MAX, LOGVAR_MIN

if TYPE_CHECKING:
    from scvi.module.base import LossOutput


class MinifiedModeModuleMixin:
    """Cached inference for minified data (place before :class:`~scvi.module.base.BaseMinifiedModeModuleClass`).

    A batch that carries cached token posteriors (``REGISTRY_KEYS.LATENT_QZM_KEY``, registered only on minified
    data) is encoded from them; any other batch runs the encoder. The loss always runs the encoder on the counts
    and is refused on data minified without counts (``minified_data_type="latent_posterior_parameters"``).
    """

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
        """scvi-tools' forward pass; with the loss, the encoder always reads the counts (see class docs).

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
