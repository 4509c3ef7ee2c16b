"""Gene matching: Ensembl version suffixes, symbols, symbol columns, strategy choice, projection, errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from sctrilemma.data._genes import GeneMatch, find_symbol_column, match_genes, strip_version

VOCAB = np.asarray(
    [f"ENSG{n:011d}" for n in (141510, 105369, 167286, 198851, 156738, 163736, 277632, 111640)], dtype=object
)
SYMBOLS = np.asarray(["TP53", "CD79A", "CD3D", "CD3E", "MS4A1", "PPBP", "CCL3", "GAPDH"], dtype=object)


def _mapping(match: GeneMatch) -> dict[int, int]:
    return dict(zip(match.query_index.tolist(), match.vocab_index.tolist(), strict=True))


# ------------------------------------------------------------------ strip_version
def test_strip_version_removes_ensembl_suffixes_only() -> None:
    names = [
        "ENSG00000141510.17",
        "ENSG00000141510-2",
        "ENSG00000141510",
        "ENSMUSG00000002111.8",
        "MT-CO1",
        "HLA-A",
        "NKX2-1",  # a human symbol ending in "-<digits>": not an Ensembl ID, must stay
        "RP11-349A22.5",  # a clone-based symbol ending in ".<digits>"
        "AC093673.5",
    ]
    stripped = strip_version(names)
    assert isinstance(stripped, np.ndarray)
    assert stripped.tolist() == [
        "ENSG00000141510",
        "ENSG00000141510",
        "ENSG00000141510",
        "ENSMUSG00000002111",
        "MT-CO1",
        "HLA-A",
        "NKX2-1",
        "RP11-349A22.5",
        "AC093673.5",
    ]


def test_find_symbol_column() -> None:
    assert find_symbol_column(pd.DataFrame(columns=["gene_ids", "feature_name"])) == "feature_name"
    assert find_symbol_column(pd.DataFrame(columns=["gene_symbol"])) == "gene_symbol"
    assert find_symbol_column(pd.DataFrame(columns=["highly_variable", "means"])) is None


# ------------------------------------------------------------------ strategies
def test_match_by_ensembl_with_version_suffixes() -> None:
    vocabulary = np.asarray([f"{g}.{i + 1}" for i, g in enumerate(VOCAB)], dtype=object)  # versioned vocabulary too
    query = [f"{VOCAB[5]}.3", "ENSG00000999999.1", f"{VOCAB[0]}-2", VOCAB[7], f"{VOCAB[2]}.12"]
    match = match_genes(query, vocabulary)
    assert match.by == "ensembl"
    assert match.n_query == 5
    assert match.n_matched == 4
    assert _mapping(match) == {0: 5, 2: 0, 3: 7, 4: 2}
    assert match.n_found == 4
    assert match.vocabulary_fraction == pytest.approx(4 / 8)


def test_match_by_symbols_is_case_insensitive() -> None:
    query = ["gapdh", "Cd3e", "MS4A1", "NotAGene", "tp53"]
    match = match_genes(query, VOCAB, vocabulary_symbols=SYMBOLS)
    assert match.by == "symbol"
    assert _mapping(match) == {0: 7, 1: 3, 2: 4, 4: 0}
    assert match.vocabulary_fraction == pytest.approx(4 / 8)


def test_match_by_symbol_column() -> None:
    query = [f"probe_{i}" for i in range(4)]
    symbols = ["PPBP", "ccl3", "unknown", "CD79A"]
    match = match_genes(query, VOCAB, query_symbols=symbols, vocabulary_symbols=SYMBOLS, min_fraction=0.3)
    assert match.by == "symbol"
    assert _mapping(match) == {0: 5, 1: 6, 3: 1}


def test_query_symbols_ignored_without_vocabulary_symbols() -> None:
    query = [VOCAB[0], VOCAB[1], "x", "y"]
    match = match_genes(query, VOCAB, query_symbols=SYMBOLS[2:6], min_fraction=0.0)
    assert match.by == "ensembl"
    assert _mapping(match) == {0: 0, 1: 1}


@pytest.mark.parametrize(
    ("query", "symbols", "expected_by", "expected"),
    [
        # var_names are Ensembl IDs matching 3 genes; the symbol column matches 5: symbols win
        (
            [VOCAB[0], VOCAB[1], VOCAB[2], "ENSG00000000001", "ENSG00000000002"],
            ["TP53", "CD79A", "CD3D", "CD3E", "MS4A1"],
            "symbol",
            {0: 0, 1: 1, 2: 2, 3: 3, 4: 4},
        ),
        # var_names match 4 by Ensembl ID (with versions); the symbol column only 1: Ensembl wins
        (
            [f"{VOCAB[4]}.1", f"{VOCAB[5]}.2", f"{VOCAB[6]}.1", f"{VOCAB[7]}.9", "ENSG00000000002"],
            ["MS4A1", "?", "?", "?", "?"],
            "ensembl",
            {0: 4, 1: 5, 2: 6, 3: 7},
        ),
    ],
)
def test_best_strategy_is_chosen(query, symbols, expected_by, expected) -> None:
    match = match_genes(query, VOCAB, query_symbols=symbols, vocabulary_symbols=SYMBOLS, min_fraction=0.0)
    assert match.by == expected_by
    assert _mapping(match) == expected


# ------------------------------------------------------------------ projection and expressed fraction
@pytest.mark.parametrize("sparse", [False, True])
def test_project_sums_duplicates_and_orders_by_vocabulary(sparse: bool) -> None:
    # query genes: VOCAB[3] twice (two versions), VOCAB[0], an unknown gene, VOCAB[6]
    query = [f"{VOCAB[3]}.1", VOCAB[0], "ENSG00000999999", f"{VOCAB[3]}.2", VOCAB[6]]
    counts = np.asarray([[1, 2, 3, 4, 5], [0, 7, 100, 11, 0], [6, 0, 0, 0, 9]], dtype=np.int32)
    match = match_genes(query, VOCAB, min_fraction=0.3)
    assert match.n_matched == 4
    projected = match.project(sp.csr_matrix(counts) if sparse else counts, VOCAB.size)
    assert sp.issparse(projected)
    assert projected.shape == (3, VOCAB.size)
    expected = np.zeros((3, VOCAB.size), dtype=np.float32)
    expected[:, 0] = counts[:, 1]
    expected[:, 3] = counts[:, 0] + counts[:, 3]  # duplicates summed: 5, 11, 6
    expected[:, 6] = counts[:, 4]
    np.testing.assert_array_equal(projected.toarray(), expected)
    np.testing.assert_array_equal(projected.toarray()[:, 3], [5, 11, 6])


def test_only_the_models_share_is_judged() -> None:
    # a full-transcriptome query: six of the eight model genes among 5,000 others, some versioned
    others = [f"ENSG9{n:010d}" for n in range(5000)]
    query = [*others[:2000], f"{VOCAB[0]}.4", VOCAB[1], VOCAB[2], *others[2000:], VOCAB[3], f"{VOCAB[4]}.1", VOCAB[5]]
    match = match_genes(query, VOCAB, min_fraction=0.75)
    assert match.n_query == 5006
    assert (match.n_matched, match.n_found) == (6, 6)
    assert match.vocabulary_fraction == pytest.approx(6 / 8)
    with pytest.raises(ValueError, match=r"holds only 6 of the model's 8 genes \(75\.0%.*`min_overlap`.*--min-overlap"):
        match_genes(query, VOCAB, min_fraction=0.8)


def test_duplicates_count_once_towards_the_share() -> None:
    query = [f"{VOCAB[0]}.1", f"{VOCAB[0]}.2", VOCAB[1], "ENSG00000999999"]
    match = match_genes(query, VOCAB, min_fraction=0.25)
    assert match.n_matched == 3
    assert match.n_found == 2
    assert match.vocabulary_fraction == pytest.approx(2 / 8)


# ------------------------------------------------------------------ errors
def test_mouse_ensembl_ids_are_another_species() -> None:
    query = [f"ENSMUSG{n:011d}" for n in range(1, 40)]
    with pytest.raises(ValueError, match="another species") as info:
        match_genes(query, VOCAB, vocabulary_symbols=SYMBOLS)
    assert "ENSMUSG" in str(info.value)
    assert "holds only 0 of the model's 8 genes" in str(info.value)


def test_mouse_symbols_are_reported() -> None:
    query = ["Cd3e", "Ms4a1", "Actb", "Gapdh", "Lyz2", "Cd19"]
    with pytest.raises(ValueError, match="mouse symbols"):
        match_genes(query, VOCAB)  # a vocabulary without symbols
    with pytest.raises(ValueError, match="mouse symbols"):
        match_genes(query, VOCAB, vocabulary_symbols=["TP53", "X1", "X2", "X3", "X4", "X5", "X6", "X7"])


def test_symbols_against_ensembl_only_vocabulary() -> None:
    query = ["CD3E", "MS4A1", "GAPDH", "TP53", "PPBP"]
    with pytest.raises(ValueError, match="knows only Ensembl IDs"):
        match_genes(query, VOCAB)
    # the same query works once the vocabulary has symbols
    assert match_genes(query, VOCAB, vocabulary_symbols=SYMBOLS).n_matched == 5


def test_mouse_symbols_against_a_human_vocabulary_with_symbols() -> None:
    from sctrilemma.data import load_example

    var = load_example().var
    human = var["gene_symbol"].astype(str).to_numpy()
    mouse_style = [s[:1].upper() + s[1:].lower() for s in human]  # e.g. CD3E -> Cd3e, MS4A1 -> Ms4a1
    assert np.mean([s != h for s, h in zip(mouse_style, human, strict=True)]) > 0.9
    with pytest.raises(ValueError, match="mouse symbols"):
        match_genes(mouse_style, var.index.to_numpy(), vocabulary_symbols=human)


def test_symbols_against_a_vocabulary_of_symbols_name_the_smaller_panel() -> None:
    vocabulary = ["CD3E", "MS4A1", "GAPDH", "TP53", "PPBP", "LYZ", "NKG7", "CD14"]
    with pytest.raises(ValueError, match="both named by symbol") as info:
        match_genes(["CD3E", "MS4A1", "OTHER"], vocabulary)
    assert "Ensembl" not in str(info.value)
    assert "best match by name" in str(info.value)
    assert "min_overlap" in str(info.value)
