"""scvi-tools 1.4.2 ``tests/model/test_models_with_minified_data.py``: not ported yet.

Latent-mode minification (``minify_adata``) needs the module's inference to read cached posterior parameters
(``BaseMinifiedModeModuleClass``: ``_regular_inference``/``_cached_inference``). scVI's workflow caches
``get_latent_representation(return_dist=True)``; SCTrilemma's is the pooled ``(n_obs, n_hidden)`` posterior, which
cannot drive the decoder: that needs the ``K`` latent tokens, cached as ``(n_obs, K * n_hidden)`` arrays, and an
``inference`` that reads them (being rewritten). The port waits for that. SCANVI tests have no counterpart.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.skip(
    reason="minify_adata is not implemented: the decoder needs cached token posteriors, not the pooled one"
)

SCVI_TESTS = (
    "test_scvi_with_minified_adata_one_sample",
    "test_scvi_with_minified_adata_one_sample_with_layer",
    "test_scvi_with_minified_adata_n_samples",
    "test_scvi_with_minified_adata_get_normalized_expression",
    "test_scvi_with_minified_adata_get_normalized_expression_non_default_gene_list",
    "test_validate_unsupported_if_minified",
    "test_validate_supported_if_minified_keep_count",
    "test_scvi_with_minified_adata_save_then_load",
    "test_scvi_with_minified_adata_save_then_load_with_non_minified_adata",
    "test_scvi_save_then_load_with_minified_adata",
    "test_scvi_with_minified_adata_get_latent_representation",
    "test_scvi_with_minified_adata_posterior_predictive_sample",
    "test_scvi_with_minified_adata_get_feature_correlation_matrix",
    "test_scvi_minified_model_load_with_user_provided_minified_adata",
    "test_scvi_non_minified_model_load_with_adata_having_latent_params",
)


@pytest.mark.parametrize("name", SCVI_TESTS)
def test_minified(name: str) -> None:
    """Placeholder for each scvi-tools minified-data test (skipped with the module's reason)."""
