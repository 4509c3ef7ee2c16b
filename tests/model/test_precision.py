"""The ``precision`` setting: bf16 embeddings and reconstructions of a trained model stay close to fp32."""

from __future__ import annotations

import numpy as np
import pytest

from sctrilemma import SCTrilemma
from sctrilemma.data import example_reference_dir


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_bf16_embedding_of_the_shipped_reference(example_adata):
    model = SCTrilemma.load_query_data(example_adata[:300].copy(), example_reference_dir())
    assert model.precision == "auto"
    fp32 = model.get_latent_representation()
    expression = model.get_normalized_expression(indices=np.arange(20), library_size=1.0, return_numpy=True)
    model.precision = "bf16"
    bf16 = model.get_latent_representation()
    expression_bf16 = model.get_normalized_expression(indices=np.arange(20), library_size=1.0, return_numpy=True)
    assert not np.array_equal(fp32, bf16)  # bf16 really ran
    centre = fp32.mean(0)
    cosine = _cosine(bf16 - centre, fp32 - centre)
    print(f"bf16 vs fp32 embeddings: min cosine {_cosine(bf16, fp32).min():.6f}, centred {cosine.min():.6f}")
    assert _cosine(bf16, fp32).min() > 0.999
    assert cosine.min() > 0.99
    assert _cosine(expression_bf16, expression).min() > 0.999
    model.precision = "fp32"
    np.testing.assert_allclose(model.get_latent_representation(), fp32, rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="`precision` must be one of"):
        model.precision = "half"
