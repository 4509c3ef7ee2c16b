from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import fisher_exact, spearmanr

from sctrilemma.metrics._pathways import (
    RESULT_COLUMNS,
    overrepresentation_test,
    pathway_concordance,
    pathway_jaccard,
    pathway_score_spearman,
    read_gmt,
    top_regulated_genes,
    top_terms,
)

SHARED_HALLMARK = Path("/work/shared/genesets/msigdb_hallmark_v7.0.symbols.gmt")
UNIVERSE = [f"G{i}" for i in range(40)]
LIBRARY = {
    "ALPHA": {"G0", "G1", "G2", "G3", "G4", "G5"},
    "BETA": {"G3", "G4", "G10", "G11", "G12", "G13", "G14", "G15"},
    "GAMMA": {"G0", "G20", "G21"},
    "DELTA": {f"G{i}" for i in range(20, 40)},
    "EMPTY_HIT": {"G30", "G31"},
}
QUERY = ["G0", "G1", "G2", "G3", "G4", "G10", "G11", "G20", "G0"]  # duplicate on purpose


def _write_tiny_gmt(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.gmt"
    path.write_text(
        "SET_A\tfirst set\tG1\tG2\tG3\n"
        "\n"
        "SET_B\t\tG2\tG4\n"
        "fructose 1,6-bisphosphate (GO:1)\thttp://x\tG5,1.0\tG6,0.5\tG7\n",
        encoding="utf-8",
    )
    return path


def test_read_gmt_tiny_file(tmp_path: Path) -> None:
    sets = read_gmt(_write_tiny_gmt(tmp_path))
    assert list(sets) == ["SET_A", "SET_B", "fructose 1,6-bisphosphate (GO:1)"]
    assert sets["SET_A"] == {"G1", "G2", "G3"}
    assert sets["SET_B"] == {"G2", "G4"}  # empty description column
    assert sets["fructose 1,6-bisphosphate (GO:1)"] == {"G5", "G6", "G7"}  # weights dropped, comma in name kept


def test_read_gmt_bad_files_raise(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="is not a file"):
        read_gmt(tmp_path / "missing.gmt")
    spaces = tmp_path / "spaces.gmt"
    spaces.write_text("SET_A desc G1 G2\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 1: expected 'term<TAB>description<TAB>gene"):
        read_gmt(spaces)
    duplicated = tmp_path / "dup.gmt"
    duplicated.write_text("A\t\tG1\nB\t\tG2\nA\t\tG3\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 3: term 'A' appears twice"):
        read_gmt(duplicated)


def _hypergeometric_tail(x: int, n_background: int, m: int, k: int) -> float:
    """P(X >= x) by direct summation of exact binomial coefficients."""
    total = sum(
        Fraction(math.comb(m, i) * math.comb(n_background - m, k - i), math.comb(n_background, k))
        for i in range(x, min(m, k) + 1)
    )
    return float(total)


def _bh(p_values: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg written out: q_(i) = min_{j >= i} p_(j) n / j."""
    n = len(p_values)
    order = np.argsort(p_values)
    adjusted = np.empty(n)
    running = 1.0
    for position in range(n - 1, -1, -1):
        running = min(running, p_values[order[position]] * n / (position + 1))
        adjusted[order[position]] = running
    return adjusted


def test_overrepresentation_numbers_match_independent_computation() -> None:
    result = overrepresentation_test(QUERY, LIBRARY, background=UNIVERSE)
    assert tuple(result.columns) == RESULT_COLUMNS
    assert "EMPTY_HIT" not in set(result["term"])  # no overlapping gene -> not reported (as Enrichr)
    assert result["rank"].tolist() == list(range(1, len(result) + 1))
    assert result["p_value"].is_monotonic_increasing
    n_background, k = 40, 8  # eight distinct query genes
    for row in result.itertuples():
        members = LIBRARY[row.term]
        x, m = len(members & set(QUERY)), len(members)
        assert (row.overlap, row.set_size) == (x, m)
        table = [[x, m - x], [k - x, n_background - m - k + x]]
        reference = fisher_exact(table, alternative="greater").pvalue
        assert row.p_value == pytest.approx(reference, rel=1e-10)
        assert row.p_value == pytest.approx(_hypergeometric_tail(x, n_background, m, k), rel=1e-10)
        odds = x * (n_background - m - k + x) / max((m - x) * (k - x), 1)
        assert row.odds_ratio == pytest.approx(odds)
        assert row.combined_score == pytest.approx(-math.log(reference) * odds, rel=1e-9)
        assert row.overlap_genes == ";".join(sorted(members & set(QUERY)))
    np.testing.assert_allclose(result["adjusted_p_value"], _bh(result["p_value"].to_numpy()), rtol=1e-12)
    assert result["term"].iloc[0] == "ALPHA"  # 5 of 6 members in an 8-gene query


def test_background_as_size_equals_background_as_genes() -> None:
    by_genes = overrepresentation_test(QUERY, LIBRARY, background=UNIVERSE)
    by_size = overrepresentation_test(QUERY, LIBRARY, background=40)
    pd.testing.assert_frame_equal(by_genes, by_size)
    # A smaller universe drops the genes outside it from the query and from the sets.
    restricted = overrepresentation_test(QUERY, LIBRARY, background=UNIVERSE[:20])
    assert set(restricted["term"]) == {"ALPHA", "BETA", "GAMMA"}
    assert restricted.set_index("term").loc["GAMMA", "set_size"] == 1  # G20, G21 lie outside the universe
    alpha = restricted.set_index("term").loc["ALPHA"]
    reference = fisher_exact([[5, 1], [2, 12]], alternative="greater").pvalue  # N=20, m=6, k=7, x=5
    assert alpha["p_value"] == pytest.approx(reference, rel=1e-10)


def test_overrepresentation_bad_input_raises() -> None:
    with pytest.raises(ValueError, match="No query gene lies in `background`"):
        overrepresentation_test(["X1", "X2"], LIBRARY, background=UNIVERSE)
    with pytest.raises(ValueError, match="smaller than the query"):
        overrepresentation_test(QUERY, LIBRARY, background=5)
    with pytest.raises(ValueError, match="single string"):
        overrepresentation_test("G1", LIBRARY, background=UNIVERSE)
    with pytest.raises(ValueError, match="`gene_sets` is empty"):
        overrepresentation_test(QUERY, {}, background=UNIVERSE)


def test_no_overlap_gives_empty_result() -> None:
    result = overrepresentation_test(["G39"], {"A": {"G1"}}, background=UNIVERSE)
    assert result.empty
    assert tuple(result.columns) == RESULT_COLUMNS


def test_top_regulated_genes_by_hand() -> None:
    names = ["A", "B", "C", "D", "E", "B"]
    logfc = np.array([0.5, 2.0, -1.0, 0.5, np.nan, 3.0])
    assert top_regulated_genes(logfc, names, direction="up", n_genes=3) == ["B", "A", "D"]  # B once, ties in order
    assert top_regulated_genes(logfc, names, direction="down", n_genes=3) == ["C"]  # only negative changes qualify
    with pytest.raises(ValueError, match="`direction='left'`"):
        top_regulated_genes(logfc, names, direction="left")
    with pytest.raises(ValueError, match="`gene_names` has 2"):
        top_regulated_genes(logfc, names[:2], direction="up")


def _result(scores: dict[str, float]) -> pd.DataFrame:
    """A hand-made enrichment result: better scores get smaller p-values."""
    terms = list(scores)
    values = np.array([scores[t] for t in terms])
    rank = np.argsort(np.argsort(-values))  # 0 = best
    p = 10.0 ** -(len(terms) - rank)
    return pd.DataFrame({"term": terms, "p_value": p, "adjusted_p_value": p, "combined_score": values})


def test_pathway_jaccard_and_score_spearman_by_hand() -> None:
    observed = _result({"T1": 10.0, "T2": 8.0, "T3": 5.0, "T4": 1.0})
    assert top_terms(observed, n_terms=2) == ["T1", "T2"]
    assert pathway_jaccard(observed, observed, n_terms=3) == 1.0
    assert pathway_score_spearman(observed, observed, n_terms=3) == pytest.approx(1.0)
    shifted = _result({"T2": 9.0, "T3": 7.0, "T1": 0.5})
    assert pathway_jaccard(observed, shifted, n_terms=2) == pytest.approx(1 / 3)  # {T1,T2} vs {T2,T3}
    reversed_scores = _result({"T1": 1.0, "T2": 2.0, "T3": 3.0})
    assert pathway_score_spearman(observed, reversed_scores, n_terms=3) == pytest.approx(-1.0)
    # A term absent from one result scores zero there.
    other = _result({"T1": 3.0, "T2": 2.0, "T5": 1.0})
    expected = spearmanr([10.0, 8.0, 5.0, 0.0], [3.0, 2.0, 0.0, 1.0]).statistic  # union T1, T2, T3, T5
    assert pathway_score_spearman(observed, other, n_terms=3) == pytest.approx(expected)
    disjoint = _result({"T7": 3.0, "T8": 2.0, "T9": 1.0})
    assert pathway_jaccard(observed, disjoint, n_terms=3) == 0.0
    assert np.isnan(pathway_score_spearman(observed.head(1), observed.head(1), n_terms=3))  # < 3 terms
    with pytest.raises(ValueError, match="lacks columns"):
        pathway_jaccard(observed, observed.drop(columns="combined_score"))


def _concordance_case() -> tuple[np.ndarray, list[str], dict[str, set[str]]]:
    rng = np.random.default_rng(0)
    names = [f"G{i}" for i in range(60)]
    logfc = rng.normal(0, 0.05, size=60)
    logfc[:10] = np.linspace(3.0, 2.0, 10)  # strongly up
    logfc[50:] = -np.linspace(3.0, 2.0, 10)  # strongly down
    library = {
        "UP_1": {"G0", "G1", "G2", "G3", "G21"},
        "UP_2": {"G4", "G5", "G6", "G22"},
        "UP_3": {"G7", "G8", "G23", "G24", "G25"},
        "DOWN_1": {"G50", "G51", "G52", "G26"},
        "DOWN_2": {"G53", "G54", "G27"},
        "DOWN_3": {"G55", "G56", "G57", "G58", "G28", "G29"},
        "FILLER": {f"G{i}" for i in range(20, 40)},
    }
    return logfc, names, library


def test_pathway_concordance_identical_and_reversed() -> None:
    logfc, names, library = _concordance_case()
    same = pathway_concordance(logfc, logfc, names, library, n_genes=10, n_terms=3)
    for key in ("pathway_jaccard", "pathway_jaccard_up", "pathway_jaccard_down"):
        assert same[key] == 1.0
    assert same["pathway_score_spearman"] == pytest.approx(1.0)
    # Reversed changes put the down-regulated programmes on top of the "up" list and vice versa.
    flipped = pathway_concordance(logfc, -logfc, names, library, n_genes=10, n_terms=3)
    assert flipped["pathway_jaccard"] == 0.0
    assert flipped["pathway_score_spearman"] < 0
    # Deterministic.
    assert pathway_concordance(logfc, -logfc, names, library, n_genes=10, n_terms=3) == flipped
    with pytest.raises(ValueError, match="compute both over the same genes"):
        pathway_concordance(logfc, logfc[:-1], names, library)


@pytest.mark.skipif(not SHARED_HALLMARK.is_file(), reason=f"shared gene sets not present at {SHARED_HALLMARK}")
def test_shared_hallmark_library() -> None:
    hallmark = read_gmt(SHARED_HALLMARK)
    assert len(hallmark) == 50
    tnfa = hallmark["HALLMARK_TNFA_SIGNALING_VIA_NFKB"]
    assert {"JUNB", "NFKBIA", "TNFAIP3"} <= tnfa
    universe = set().union(*hallmark.values())
    query = sorted(tnfa)[:40]
    result = overrepresentation_test(query, hallmark, background=universe)
    assert result["term"].iloc[0] == "HALLMARK_TNFA_SIGNALING_VIA_NFKB"
    assert result["adjusted_p_value"].iloc[0] < 1e-30
