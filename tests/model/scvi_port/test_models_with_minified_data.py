"""scvi-tools 1.4.2 ``tests/model/test_models_with_minified_data.py``: not ported yet.

Latent-mode minification (``minify_adata``) needs the module's inference to read cached posterior parameters
(``BaseMinifiedModeModuleClass``: ``_regular_inference``/``_cached_inference``). SCTrilemma's posterior is
``K`` latent tokens, which would be cached as ``(n_obs, K * n_hidden)`` arrays, and its ``inference`` is being
rewritten; the port waits for that. SCANVI tests have no counterpart (no labels).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.skip(
    reason="minify_adata is not implemented: the module's inference cannot yet read cached token posteriors"
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
