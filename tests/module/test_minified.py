"""The module's minified mode: inference from cached token posteriors matches the encoder's."""

from __future__ import annotations

import pytest
import torch
from scvi import REGISTRY_KEYS
from scvi.data._constants import ADATA_MINIFY_TYPE

from sctrilemma._constants import SCT_MODULE_KEYS as KEYS
from sctrilemma.module import SCTrilemmaModule

N_GENES = 50


@pytest.fixture
def module(tiny: dict) -> SCTrilemmaModule:
    torch.manual_seed(0)
    return SCTrilemmaModule(N_GENES, **{**tiny, "crop_size": 32}).eval()


@pytest.fixture
def counts() -> torch.Tensor:
    torch.manual_seed(1)
    return torch.poisson(torch.full((6, N_GENES), 2.0))


def _cache(module: SCTrilemmaModule, counts: torch.Tensor) -> dict[str, torch.Tensor]:
    with torch.inference_mode():
        encoded = module.inference(counts)
    return {
        REGISTRY_KEYS.X_KEY: torch.zeros_like(counts),
        REGISTRY_KEYS.LATENT_QZM_KEY: encoded[KEYS.QZ_TOKENS_MEAN_KEY].flatten(1),
        REGISTRY_KEYS.LATENT_QZV_KEY: encoded[KEYS.QZ_TOKENS_LOGVAR_KEY].exp().flatten(1),
        REGISTRY_KEYS.OBSERVED_LIB_SIZE: counts.sum(1, keepdim=True),
    }


def test_cached_inference_matches_encoder(module: SCTrilemmaModule, counts: torch.Tensor):
    tensors = _cache(module, counts)
    inputs = module._get_inference_input(tensors)
    assert set(inputs) == {"qzm", "qzv", "observed_lib_size"}
    assert set(module._get_inference_input(tensors, full_forward_pass=True)) == {"x"}
    with torch.inference_mode():
        encoded, cached = module.inference(counts), module.inference(**inputs)
        torch.manual_seed(2)
        encoded_samples = module.inference(counts, n_samples=3)["z"]
        torch.manual_seed(2)
        cached_samples = module.inference(**inputs, n_samples=3)["z"]
    torch.testing.assert_close(cached["z"], encoded["z"])
    torch.testing.assert_close(cached["qz"].loc, encoded["qz"].loc)
    torch.testing.assert_close(cached["qz"].scale, encoded["qz"].scale)
    torch.testing.assert_close(cached[KEYS.Z_TOKENS_KEY], encoded[KEYS.Z_TOKENS_KEY])
    assert cached[KEYS.CROP_KEY] is None
    # the same noise: the cached path draws as the encoder's path does
    assert cached_samples.shape == (3, counts.shape[0], module.n_hidden)
    torch.testing.assert_close(cached_samples, encoded_samples)


def test_expression_uses_cached_library(module: SCTrilemmaModule, counts: torch.Tensor):
    tensors = _cache(module, counts)
    with torch.inference_mode():
        _, generative = module(tensors, compute_loss=False)
        _, reference = module({REGISTRY_KEYS.X_KEY: counts}, compute_loss=False)
    torch.testing.assert_close(generative[KEYS.PX_KEY].mu, reference[KEYS.PX_KEY].mu)
    torch.testing.assert_close(generative[KEYS.PX_KEY].mu.sum(-1), counts.sum(-1))


def test_loss_refused_without_counts(module: SCTrilemmaModule, counts: torch.Tensor):
    tensors = _cache(module, counts)
    module.minified_data_type = ADATA_MINIFY_TYPE.LATENT_POSTERIOR
    with pytest.raises(ValueError, match="SCTrilemmaModule.loss function currently does not support minified data"):
        module(tensors)
