from __future__ import annotations

import anndata as ad
import numpy as np
import pytest
import scipy.sparse as sp

from sctrilemma._cli import main
from sctrilemma.benchmark import ContextInvariance, ExpressionFidelity, Identity, Scorecard, pca_baseline, scvi_baseline

FAST = {"n_repeats": 2, "max_cells": 400, "max_per_label": 100, "progress_bar": False}


@pytest.fixture
def scored(small_adata):
    """small_adata with a perfect embedding (one-hot cell types + donor noise) and a random one."""
    rng = np.random.default_rng(0)
    types = small_adata.obs["cell_type"].astype("category").cat.codes.to_numpy()
    perfect = np.eye(types.max() + 1)[types] * 5 + rng.normal(scale=0.1, size=(small_adata.n_obs, types.max() + 1))
    small_adata.obsm["perfect"] = perfect
    small_adata.obsm["random"] = rng.normal(size=(small_adata.n_obs, 8))
    counts = small_adata.X.toarray().astype(np.float32)
    small_adata.layers["exact"] = counts  # a reconstruction equal to the data
    return small_adata


def test_scorecard_separates_good_from_random(scored):
    card = Scorecard(
        scored, ["perfect", "random"], "cell_type", "donor", reconstruction_keys={"perfect": "exact"}, **FAST
    )
    card.benchmark()
    results = card.get_results()
    assert set(results.columns) == {"method", "demand", "metric", "mean", "sd", "n_repeats"}
    means = results.set_index(["method", "metric"])["mean"]
    assert means["perfect", "nmi"] > 0.9 > means["random", "nmi"]
    assert means["perfect", "asw_label"] > means["random", "asw_label"]
    assert means["random", "bras"] > 0.8  # random points are well mixed across donors
    depth = results[results["metric"] == "depth_r2"].set_index("method")
    assert set(depth.index) == {"perfect", "random"}
    assert (depth["demand"] == "context invariance").all()
    assert (depth["n_repeats"] == 2).all()
    assert abs(depth.loc["random", "mean"]) <= 0.05
    # Cell types differ in depth in these PBMCs (monocytes hold more RNA), so a pure cell-type embedding recovers
    # part of it: depth R^2 measures all linear depth signal, biological or technical.
    assert 0.2 < depth.loc["perfect", "mean"] < 0.7
    assert means["perfect", "logfc_spearman"] == pytest.approx(1.0)
    assert means["perfect", "deg_jaccard"] == pytest.approx(1.0)
    assert means["perfect", "reconstruction_mae"] == pytest.approx(0.0, abs=1e-6)
    assert (results.loc[results["demand"] != "expression fidelity", "n_repeats"] == 2).all()
    pivot = card.get_results(pivot=True)
    assert list(pivot.index) == ["perfect", "random"]
    # pathways were requested but no gene sets given: reported, not silently dropped
    assert any(s.metric == "pathways" and "no gene sets" in s.reason for s in card.skipped)
    markdown = card.to_markdown()
    assert "| identity | nmi |" in markdown
    assert "| context invariance | depth_r2 (lower is better) |" in markdown
    assert "Skipped:" in markdown
    figure = card.plot_results()
    assert len(figure.axes) == 3


def test_undefined_metrics_are_reported(scored):
    scored.obs["one_donor"] = "d1"
    card = Scorecard(
        scored,
        ["perfect"],
        "cell_type",
        "one_donor",
        identity=Identity(nmi_ari=True, asw_label=False, clisi=False, isolated_labels=False, celltype_retrieval=False),
        context=ContextInvariance(pcr_comparison=False, residual_donor_invariance=False, local_donor_mixing=False),
        fidelity=ExpressionFidelity(),
        **FAST,
    )
    card.benchmark()
    skipped = {s.metric: s.reason for s in card.skipped}
    assert "bras" in skipped
    assert "ilisi" in skipped
    assert "nmi" in set(card.get_results()["metric"])


def test_depth_r2_follows_the_library_size_and_reports_empty_cells(scored):
    library = np.asarray(scored.X.sum(axis=1)).ravel()
    rng = np.random.default_rng(1)
    scored.obsm["depth"] = np.column_stack([np.log(library), rng.normal(size=(scored.n_obs, 3))])
    only_depth = {
        "identity": Identity(
            nmi_ari=False, asw_label=False, clisi=False, isolated_labels=False, celltype_retrieval=False
        ),
        "context": ContextInvariance(
            bras=False,
            ilisi=False,
            pcr_comparison=False,
            residual_donor_invariance=False,
            conditional_donor_bras=False,
            local_donor_mixing=False,
        ),
    }
    card = Scorecard(scored, ["depth", "random"], "cell_type", "donor", **only_depth, **FAST)
    card.benchmark()
    means = card.get_results().set_index(["method", "metric"])["mean"]
    assert means["depth", "depth_r2"] == pytest.approx(1.0)
    assert not card.skipped
    scored.layers["counts"] = scored.X.toarray()
    scored.layers["counts"][::10] = 0  # empty cells: log depth is undefined, so the metric is skipped with the reason
    card = Scorecard(scored, ["depth"], "cell_type", "donor", counts_layer="counts", **only_depth, **FAST)
    card.benchmark()
    assert [(s.method, s.metric) for s in card.skipped] == [("depth", "depth_r2")]
    assert "non-positive" in card.skipped[0].reason


def test_scorecard_input_errors(scored):
    with pytest.raises(ValueError, match="not in adata.obsm"):
        Scorecard(scored, ["X_missing"], "cell_type", "donor")
    with pytest.raises(ValueError, match="`donor_key='individual'` is not a column"):
        Scorecard(scored, ["perfect"], "cell_type", "individual")
    with pytest.raises(ValueError, match="reconstruction a layer"):
        Scorecard(scored, ["perfect"], "cell_type", "donor", reconstruction_keys={"perfect": "nope"})
    lognorm = scored.copy()
    lognorm.X = sp.csr_matrix(np.log1p(lognorm.X.toarray().astype(np.float32)))
    with pytest.raises(ValueError, match="non-integer values"):
        Scorecard(lognorm, ["perfect"], "cell_type", "donor")
    with pytest.raises(RuntimeError, match="benchmark"):
        Scorecard(scored, ["perfect"], "cell_type", "donor").get_results()


def test_pca_baseline_does_not_touch_the_data(small_adata):
    before = small_adata.X.copy()
    result = pca_baseline(small_adata, n_top_genes=500, n_comps=20)
    assert result.embedding.shape == (small_adata.n_obs, 20)
    assert (small_adata.X != before).nnz == 0
    assert "X_pca" not in small_adata.obsm


def test_score_cli_writes_the_three_files(scored, tmp_path, capsys):
    path = tmp_path / "scored.h5ad"
    scored.write_h5ad(path)
    out = tmp_path / "card"
    code = main(
        [
            "score", str(path), "--embedding-key", "perfect", "random", "--label-key", "cell_type",
            "--donor-key", "donor", "--reconstruction", "perfect=exact", "--n-repeats", "2", "--out", str(out),
        ]
    )  # fmt: skip
    assert code == 0
    for name in ("scorecard.csv", "scorecard.md", "scorecard.png"):
        assert (out / name).stat().st_size > 100
    assert "identity" in (out / "scorecard.md").read_text()
    assert ad.read_h5ad(path).n_obs == scored.n_obs
    assert main(["score", str(path), "--embedding-key", "perfect", "--label-key", "x", "--donor-key", "donor",
                 "--out", str(out)]) == 2  # fmt: skip
    assert "--label-key 'x' is not a column of .obs" in capsys.readouterr().err  # checked before the file is read


@pytest.mark.parametrize("batch_key", [None, "donor"])
def test_scvi_baseline(small_adata, batch_key):
    result = scvi_baseline(small_adata, batch_key=batch_key, max_epochs=2, n_latent=5)
    assert result.embedding.shape == (small_adata.n_obs, 5)
    assert result.reconstruction.shape == small_adata.shape
    np.testing.assert_allclose(result.reconstruction.sum(1), small_adata.X.toarray().sum(1), rtol=1e-3)
    assert result.details["epochs"] == 2
    assert result.details["batch_key"] == batch_key
    assert "_scvi_batch" not in small_adata.obs


def test_interventions_on_a_trained_model(small_adata, tiny):
    from sctrilemma import SCTrilemma
    from sctrilemma.benchmark import intervention_outputs

    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    model = SCTrilemma(small_adata, **tiny, preset="paper")
    model.train(max_epochs=1, batch_size=128, enable_progress_bar=False)
    tokens = model.get_latent_tokens()
    np.testing.assert_allclose(tokens.mean(1), model.get_latent_representation(), atol=1e-5)
    library = small_adata.X.toarray().sum(1)
    decoded = model.decode_latent_tokens(tokens[:10], library_size=library[:10])
    expected = model.get_normalized_expression(
        indices=np.arange(10), gene_list=list(small_adata.var_names), library_size="observed"
    )
    np.testing.assert_allclose(decoded, expected.to_numpy(), rtol=1e-4, atol=1e-5)
    for wrong in (tokens[:2, :-1], tokens[:2, :, :-1], tokens[0]):  # too few tokens, too narrow, no cell axis
        with pytest.raises(ValueError, match="must have shape"):
            model.decode_latent_tokens(wrong)

    outputs = intervention_outputs(model, small_adata, "donor", alphas=(0.0, 1.0))
    embedding = model.get_latent_representation()
    np.testing.assert_allclose(outputs["donor_centering_0"][0], embedding, atol=1e-5)
    centered = outputs["donor_centering_1"][0]
    donors = small_adata.obs["donor"].astype(str).to_numpy()
    means = np.stack([centered[donors == d].mean(0) for d in np.unique(donors)])
    np.testing.assert_allclose(means, means[:1].repeat(len(means), 0), atol=1e-4)
    shrunk, reconstruction = outputs["centroid_shrinkage_1"]
    assert len(np.unique(shrunk.round(5), axis=0)) < small_adata.n_obs / 10  # cells collapse onto centroids
    assert reconstruction.shape == small_adata.shape
    np.testing.assert_allclose(reconstruction.sum(1), library, rtol=1e-3)
