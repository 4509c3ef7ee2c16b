"""Thinning every cell to a common depth before it is embedded (``embedding_depth_quantile``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sctrilemma.module import SCTrilemmaModule, _inputs, thin_to_depth


def test_cells_deeper_than_the_depth_keep_a_binomial_share_of_their_counts(counts: torch.Tensor) -> None:
    library = counts.sum(1)
    depth = float(library.quantile(0.25))
    thinned = thin_to_depth(counts, depth)
    deep = library > depth
    assert torch.equal(thinned[~deep], counts[~deep])  # shallower cells are left as they are
    assert (thinned <= counts).all()
    assert (thinned == thinned.round()).all()
    # Each molecule is kept with probability depth / library: the thinned depths average `depth`, each cell's within
    # a few binomial standard deviations of it.
    rate = depth / library[deep]
    z = (thinned[deep].sum(1) - depth) / (library[deep] * rate * (1 - rate)).sqrt()
    assert abs(float(z.mean())) < 4 / z.numel() ** 0.5
    assert 0.7 < float(z.std()) < 1.3
    # Every gene keeps its expected share: summed over cells, counts times each cell's rate.
    expected = (counts[deep] * rate.unsqueeze(1)).sum(0)
    busy = expected > 400
    assert busy.sum() > 20
    np.testing.assert_allclose(thinned[deep].sum(0)[busy], expected[busy], rtol=0.2)


def test_a_cell_is_thinned_the_same_way_in_any_batch_and_pass(
    counts: torch.Tensor, monkeypatch: pytest.MonkeyPatch
) -> None:
    depth = float(counts.sum(1).median())
    thinned = thin_to_depth(counts, depth)
    assert torch.equal(thin_to_depth(counts, depth), thinned)  # the same counts, the same draw
    order = torch.randperm(counts.shape[0], generator=torch.Generator().manual_seed(0))[:40]
    assert torch.equal(thin_to_depth(counts[order], depth), thinned[order])
    monkeypatch.setattr(_inputs, "MOLECULES_PER_PASS", 5_000)  # a few cells per pass
    assert torch.equal(thin_to_depth(counts, depth), thinned)
    # thinned to nothing (a depth far below one count), a cell keeps its own counts
    assert torch.equal(thin_to_depth(counts[:5], 1e-6), counts[:5])
    # two cells with different counts get different draws even where their counts of one gene agree
    assert not torch.equal(
        thin_to_depth(counts[:1].repeat(2, 1) * torch.tensor([[1.0], [2.0]]), depth)[1], 2 * thinned[0]
    )


def test_the_embedding_reads_each_cell_at_the_fitted_depth(counts: torch.Tensor, module_sizes: dict) -> None:
    module = SCTrilemmaModule(counts.shape[1], **module_sizes, prior="normal", embedding_depth_quantile=0.1)
    library = counts.sum(1).numpy()
    assert float(module.embedding_depth) == 0.0  # nothing is thinned before the depth is fitted
    module.fit_embedding_depth(library)
    assert float(module.embedding_depth) == pytest.approx(np.quantile(library, 0.1))
    module.eval()
    with torch.no_grad():
        embedded = module.inference(counts)["qz"].loc
        depth = float(module.embedding_depth)
        module.embedding_depth.zero_()
        assert torch.allclose(module.inference(thin_to_depth(counts, depth))["qz"].loc, embedded, atol=1e-6)
        assert not torch.allclose(module.inference(counts)["qz"].loc, embedded, atol=1e-3)
    # Training reads the counts as before (its own random thinning is `min_depth_fraction`'s).
    module.embedding_depth.fill_(depth)
    crop = module.train().inference(counts)["crop"]
    assert torch.equal(crop.counts.sum(1), counts.gather(1, crop.genes).sum(1))


def test_the_depth_is_saved_and_a_state_saved_without_it_embeds_unthinned(
    counts: torch.Tensor, module_sizes: dict
) -> None:
    module = SCTrilemmaModule(counts.shape[1], **module_sizes, prior="normal", embedding_depth_quantile=0.5)
    module.fit_embedding_depth(counts.sum(1).numpy())
    state = module.state_dict()
    assert float(state["embedding_depth"]) > 0
    restored = SCTrilemmaModule(counts.shape[1], **module_sizes, prior="normal", embedding_depth_quantile=0.5)
    restored.load_state_dict(state)
    assert torch.equal(restored.embedding_depth, module.embedding_depth)
    del state["embedding_depth"]
    restored.load_state_dict(state)  # strict, as scvi-tools loads
    assert float(restored.embedding_depth) == 0.0
    with pytest.raises(ValueError, match="embedding_depth_quantile"):
        SCTrilemmaModule(100, **module_sizes, embedding_depth_quantile=1.5)


def test_training_fits_the_small_presets_depth_and_a_query_keeps_the_references(small_adata, tiny, tmp_path) -> None:
    from sctrilemma import SCTrilemma

    first_donor = (small_adata.obs["donor"] == small_adata.obs["donor"].iloc[0]).to_numpy()
    reference, query = small_adata[~first_donor].copy(), small_adata[first_donor].copy()
    SCTrilemma.setup_anndata(reference, donor_key="donor")
    paper = SCTrilemma(reference, preset="paper", **tiny)
    paper.train(max_steps=1, batch_size=32, enable_progress_bar=False)
    assert float(paper.module.embedding_depth) == 0.0  # the paper's model reads every cell as it is
    model = SCTrilemma(reference, preset="small", **tiny)
    model.train(max_steps=2, batch_size=32, enable_progress_bar=False)
    depth = np.quantile(np.asarray(reference.X.sum(1)).ravel(), 0.1)
    assert float(model.module.embedding_depth) == pytest.approx(depth, rel=1e-6)
    model.train(max_steps=1, batch_size=32, enable_progress_bar=False)  # training again keeps it
    assert float(model.module.embedding_depth) == pytest.approx(depth, rel=1e-6)
    model.save(tmp_path, overwrite=True)
    query_model = SCTrilemma.load_query_data(query.copy(), tmp_path)
    assert float(query_model.module.embedding_depth) == pytest.approx(depth, rel=1e-6)
    np.testing.assert_allclose(
        query_model.get_latent_representation(), model.get_latent_representation(query), atol=1e-5
    )
