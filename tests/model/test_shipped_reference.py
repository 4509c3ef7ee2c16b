"""The small reference shipped with the package embeds unseen donors zero-shot, from gene symbols."""

from __future__ import annotations

from sklearn.metrics import balanced_accuracy_score
from sklearn.neighbors import KNeighborsClassifier

from sctrilemma import SCTrilemma
from sctrilemma.data import example_reference_dir, load_example
from sctrilemma.data._example import HELD_OUT_DONORS, REFERENCE_DONORS


def test_zero_shot_query_with_symbols_separates_cell_types():
    reference_dir = example_reference_dir()
    adata = load_example()
    reference_cells = adata[adata.obs["donor"].isin(REFERENCE_DONORS)].copy()
    query = adata[adata.obs["donor"].isin(HELD_OUT_DONORS)].copy()
    # the query knows genes only by symbol: no Ensembl IDs anywhere
    query.var_names = query.var["gene_symbol"].astype(str).to_numpy()
    query.var_names_make_unique()
    query.var = query.var.drop(columns="gene_symbol")

    query_model = SCTrilemma.load_query_data(query, reference_dir)
    assert query_model.adata.uns["sctrilemma_gene_match"]["by"] == "symbol"
    query_embedding = query_model.get_latent_representation()
    reference_embedding = SCTrilemma.load_query_data(reference_cells, reference_dir).get_latent_representation()

    knn = KNeighborsClassifier(n_neighbors=15, metric="cosine")
    knn.fit(reference_embedding, reference_cells.obs["cell_type"].to_numpy())
    predicted = knn.predict(query_embedding)
    accuracy = balanced_accuracy_score(query.obs["cell_type"].to_numpy(), predicted)
    chance = 1 / query.obs["cell_type"].nunique()
    print(f"zero-shot kNN balanced accuracy {accuracy:.3f} (chance {chance:.2f})")
    assert accuracy >= 0.95  # 0.993 for the committed reference (PROVENANCE.md)
