"""Zero-count decoder targets stratified by how often each gene is expressed in the training data."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sctrilemma.module import SCTrilemmaModule, target_sample
from sctrilemma.module._inputs import RARE_GENE_DETECTION, RARE_ZERO_SHARE, GeneDetection


@pytest.fixture
def rare(counts: torch.Tensor) -> torch.Tensor:
    """A made-up split: every third gene is called rare."""
    return torch.arange(counts.shape[1]) % 3 == 0


def test_rare_zero_count_genes_get_their_share_of_the_zero_positions(counts: torch.Tensor, rare: torch.Tensor) -> None:
    sample = target_sample(counts, 64, generator=torch.Generator().manual_seed(0), rare_genes=rare)
    n_rare = round(32 * RARE_ZERO_SHARE)
    zero_genes, zero_mask = sample.genes[:, 32:], sample.mask[:, 32:]
    assert (sample.counts[:, 32:][zero_mask] == 0).all()
    assert (~rare[zero_genes[:, : 32 - n_rare]] | ~zero_mask[:, : 32 - n_rare]).all()
    assert rare[zero_genes[:, 32 - n_rare :]].all()
    # A rare gene the cell expresses is drawn but masked.
    assert torch.equal(zero_mask[:, 32 - n_rare :], counts.gather(1, zero_genes[:, 32 - n_rare :]) == 0)
    # The other zero-count genes are weighted by the cell's pool of them, rare draws by the number of rare genes.
    cell_zero = counts[0] == 0
    assert sample.weights[0, 32] == pytest.approx(float((cell_zero & ~rare).sum()) / (32 - n_rare))
    rare_weights = sample.weights[:, 64 - n_rare :][zero_mask[:, 32 - n_rare :]]
    assert torch.allclose(rare_weights, torch.tensor(float(rare.sum()) / n_rare))


def test_stratified_target_sample_stays_unbiased(counts: torch.Tensor, rare: torch.Tensor) -> None:
    x = counts[:6]
    values = torch.rand(x.shape, generator=torch.Generator().manual_seed(1)) + x
    generator = torch.Generator().manual_seed(2)
    draws = torch.stack(
        [
            (sample.weights * values.gather(1, sample.genes)).sum(1)
            for sample in (target_sample(x, 64, generator=generator, rare_genes=rare) for _ in range(3000))
        ]
    )
    np.testing.assert_allclose(draws.mean(0), values.sum(1), rtol=0.01)


def test_without_rare_genes_the_sample_is_the_unstratified_one(counts: torch.Tensor) -> None:
    plain = target_sample(counts, 64, generator=torch.Generator().manual_seed(3))
    none_rare = torch.zeros(counts.shape[1], dtype=torch.bool)
    same = target_sample(counts, 64, generator=torch.Generator().manual_seed(3), rare_genes=none_rare)
    for a, b in zip(plain, same, strict=True):
        assert torch.equal(a, b)


def test_gene_detection_counts_training_cells(counts: torch.Tensor) -> None:
    detection = GeneDetection(counts.shape[1])
    assert detection.rare_genes() is None
    detection.update(counts[:40])
    detection.update(counts[40:])
    rate = (counts > 0).float().mean(0)
    assert torch.equal(detection.rare_genes(), rate < RARE_GENE_DETECTION)
    assert "detected" not in detection.state_dict()  # not saved: a loaded model counts again


def test_module_counts_expression_in_training_only(counts: torch.Tensor, module_sizes: dict) -> None:
    module = SCTrilemmaModule(counts.shape[1], **module_sizes, prior="normal", n_decoder_targets=32)
    module.eval()
    with torch.no_grad():
        module({"X": counts[:20]})
    assert int(module.gene_detection.n_cells) == 0
    module.train()
    module({"X": counts[:20]})
    assert int(module.gene_detection.n_cells) == 20
    assert torch.equal(module.gene_detection.detected, (counts[:20] > 0).sum(0))
