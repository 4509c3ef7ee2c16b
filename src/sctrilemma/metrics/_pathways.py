"""Pathway-level expression fidelity (RQ4): offline Enrichr-style over-representation and pathway concordance.

The paper submits the top-100 up- and down-regulated genes of each contrast to the Enrichr web service and
compares the top-10 terms of observed and reconstructed changes :cite:p:`sctrilemma`. Here the test runs offline
against user-supplied ``.gmt`` libraries (:func:`overrepresentation_test` documents the statistics).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
import pandas as pd
from scipy.stats import false_discovery_control, hypergeom

from sctrilemma.metrics._fidelity import _spearman

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping, Sequence
    from os import PathLike

    from numpy.typing import ArrayLike

logger = logging.getLogger(__name__)

RESULT_COLUMNS = (
    "term",
    "rank",
    "overlap",
    "set_size",
    "p_value",
    "adjusted_p_value",
    "odds_ratio",
    "combined_score",
    "overlap_genes",
)
# Enrichr's downloadable libraries may carry a membership weight after a comma ("GENE,1.0").
_WEIGHT_SUFFIX = re.compile(r",\s*[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$")


def read_gmt(path: str | PathLike[str]) -> dict[str, set[str]]:
    """Read a gene-set library in GMT format.

    Each line holds a term name, a description (may be empty) and the member genes, separated by tabs.
    Empty lines are skipped and an Enrichr-style weight suffix (``"GENE,1.0"``) is dropped.

    Parameters
    ----------
    path
        A ``.gmt`` file, e.g. MSigDB Hallmark or an Enrichr library.

    Returns
    -------
    Term name -> set of gene symbols, in file order.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"`path={str(path)!r}` is not a file; pass the path of a .gmt gene-set library.")
    gene_sets: dict[str, set[str]] = {}
    with path.open(encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            fields = line.split("\t")
            term = fields[0].strip()
            genes = {_WEIGHT_SUFFIX.sub("", gene.strip()) for gene in fields[2:]} - {""}
            if len(fields) < 3 or not term or not genes:
                raise ValueError(
                    f"{path.name}, line {line_number}: expected 'term<TAB>description<TAB>gene...' with at least one "
                    "gene; is this a tab-separated .gmt file?"
                )
            if term in gene_sets:
                raise ValueError(
                    f"{path.name}, line {line_number}: term {term!r} appears twice; term names must be unique."
                )
            gene_sets[term] = genes
    if not gene_sets:
        raise ValueError(f"{path.name} contains no gene sets.")
    return gene_sets


def _empty_result() -> pd.DataFrame:
    text = ("term", "overlap_genes")
    return pd.DataFrame({column: pd.Series(dtype=object if column in text else float) for column in RESULT_COLUMNS})


def overrepresentation_test(
    genes: Collection[str],
    gene_sets: Mapping[str, Collection[str]],
    *,
    background: Collection[str] | int,
) -> pd.DataFrame:
    r"""Enrichr-style over-representation test of a gene list against every set of a library.

    Parameters
    ----------
    genes
        Query genes (duplicates are ignored).
    gene_sets
        Term -> member genes, e.g. from :func:`read_gmt`.
    background
        The gene universe. A collection of genes restricts the query and every set to it (``N`` is its size);
        an integer gives ``N`` directly and leaves the sets unchanged (Enrichr's server uses a fixed universe).

    Returns
    -------
    One row per term with at least one overlapping gene, sorted by ``p_value`` (ties by term name), with
    columns ``term``, ``rank`` (1 = most significant), ``overlap``, ``set_size``, ``p_value``,
    ``adjusted_p_value``, ``odds_ratio``, ``combined_score`` and ``overlap_genes`` (sorted, ``;``-joined).

    Notes
    -----
    The statistics follow Enrichr (Kuleshov et al. 2016, Nucleic Acids Res. 44:W90;
    https://maayanlab.cloud/Enrichr/help#background). For a term with ``m`` genes, ``x`` of them among the ``k``
    query genes, in a universe of ``N`` genes:

    - ``p_value``: one-sided Fisher exact test for over-representation, the hypergeometric upper tail
      :math:`P(X \ge x)`, :math:`X \sim \mathrm{Hypergeom}(N, m, k)` (equal to
      ``scipy.stats.fisher_exact([[x, m - x], [k - x, N - m - k + x]], alternative="greater")``);
    - ``adjusted_p_value``: Benjamini-Hochberg over the reported terms (those with ``x >= 1``, as Enrichr);
    - ``odds_ratio``: Enrichr's :math:`x d / \max(b c, 1)` with :math:`b = m - x`, :math:`c = k - x`,
      :math:`d = N - m - k + x`;
    - ``combined_score``: :math:`-\ln(p) \cdot \mathrm{OR}`. Enrichr defines :math:`c = \ln(p) \cdot z` with
      :math:`z` the deviation from the term's expected rank, estimated on Enrichr's server from random gene lists;
      that reference is not available offline, so the odds ratio takes the place of :math:`z` (as in GSEApy's
      offline ``enrich``) and the sign is flipped so that larger means more enriched. Scores are comparable
      between results computed here, not with numbers from the Enrichr website.
    """
    if isinstance(genes, str):
        raise ValueError("`genes` is a single string; pass a list of gene symbols.")
    if not gene_sets:
        raise ValueError("`gene_sets` is empty; pass a library, e.g. `read_gmt('h.all.symbols.gmt')`.")
    query = set(genes)
    if isinstance(background, int | np.integer):
        n_background = int(background)
        universe = None
        if n_background < 1:
            raise ValueError(f"`background={n_background}` must be a positive number of genes.")
    else:
        universe = set(background)
        n_background = len(universe)
        query &= universe
    if not query:
        raise ValueError("No query gene lies in `background`; check that genes and background use the same symbols.")
    k = len(query)

    terms, overlaps, sizes, hits = [], [], [], []
    for term, members in gene_sets.items():
        members = set(members) if universe is None else set(members) & universe
        shared = query & members
        if shared:
            terms.append(term)
            overlaps.append(len(shared))
            sizes.append(len(members))
            hits.append(";".join(sorted(shared)))
    if universe is None and (k > n_background or (sizes and max(sizes) > n_background)):
        raise ValueError(
            f"`background={n_background}` is smaller than the query ({k} genes) or a gene set "
            f"({max(sizes) if sizes else 0} genes); pass the size of the gene universe or the universe itself."
        )
    if not terms:
        return _empty_result()

    x = np.asarray(overlaps, dtype=np.float64)
    m = np.asarray(sizes, dtype=np.float64)
    log_p = hypergeom.logsf(x - 1, n_background, m, k)  # log P(X >= x); stays finite where p underflows
    p_value = np.minimum(np.exp(log_p), 1.0)
    b, c, d = m - x, k - x, n_background - m - k + x
    odds_ratio = x * d / np.maximum(b * c, 1.0)
    result = pd.DataFrame(
        {
            "term": terms,
            "overlap": np.asarray(overlaps, dtype=np.int64),
            "set_size": np.asarray(sizes, dtype=np.int64),
            "p_value": p_value,
            "adjusted_p_value": false_discovery_control(p_value, method="bh"),
            "odds_ratio": odds_ratio,
            "combined_score": -np.minimum(log_p, 0.0) * odds_ratio,
            "overlap_genes": hits,
        }
    )
    result = result.sort_values(["p_value", "term"], kind="stable").reset_index(drop=True)
    result.insert(1, "rank", np.arange(1, len(result) + 1))
    return result


def top_regulated_genes(
    logfc: ArrayLike,
    gene_names: Sequence[str],
    *,
    direction: Literal["up", "down"],
    n_genes: int = 100,
) -> list[str]:
    """The ``n_genes`` genes with the largest positive (``"up"``) or negative (``"down"``) change.

    Only genes changing in the requested direction (and with a finite change) qualify, so fewer genes are
    returned when fewer change that way; ties keep gene order and repeated symbols are kept once.

    Parameters
    ----------
    logfc
        Changes ``(n_genes_total,)``, e.g. from ``contrast_logfc``.
    gene_names
        Symbols of the same genes ``(n_genes_total,)``.
    direction
        ``"up"`` or ``"down"``.
    n_genes
        How many genes to return at most.

    Returns
    -------
    Gene symbols, strongest change first.
    """
    values = np.asarray(logfc, dtype=np.float64).ravel()
    names = np.asarray(gene_names, dtype=object).ravel()
    if values.shape != names.shape:
        raise ValueError(f"`logfc` has {values.shape[0]} entries but `gene_names` has {names.shape[0]}.")
    if direction not in ("up", "down"):
        raise ValueError(f"`direction={direction!r}` must be 'up' or 'down'.")
    if n_genes < 1:
        raise ValueError(f"`n_genes={n_genes}` must be at least 1.")
    signed = values if direction == "up" else -values
    order = np.argsort(-signed, kind="stable")
    selected: list[str] = []
    seen: set[str] = set()
    for index in order:
        if len(selected) == n_genes:
            break
        if not np.isfinite(signed[index]) or signed[index] <= 0:
            continue
        name = str(names[index])
        if name not in seen:
            seen.add(name)
            selected.append(name)
    return selected


def _check_result(result: pd.DataFrame, name: str) -> None:
    missing = {"term", "p_value", "adjusted_p_value", "combined_score"} - set(result.columns)
    if missing:
        raise ValueError(f"`{name}` lacks columns {sorted(missing)}; pass the output of `overrepresentation_test`.")


def top_terms(result: pd.DataFrame, *, n_terms: int = 10) -> list[str]:
    """The ``n_terms`` highest-ranked terms: by adjusted p, then p, then term name.

    Parameters
    ----------
    result
        Output of :func:`overrepresentation_test`.
    n_terms
        How many terms.

    Returns
    -------
    Term names, best first.
    """
    _check_result(result, "result")
    ordered = result.sort_values(["adjusted_p_value", "p_value", "term"], kind="stable")
    return ordered["term"].head(n_terms).astype(str).tolist()


def pathway_jaccard(observed: pd.DataFrame, reconstructed: pd.DataFrame, *, n_terms: int = 10) -> float:
    r"""Jaccard index :math:`J_{\mathrm{path}}` of the top-``n_terms`` terms of two enrichment results.

    Parameters
    ----------
    observed, reconstructed
        Outputs of :func:`overrepresentation_test` for the observed and reconstructed top genes.
    n_terms
        Number of top terms :math:`P`, :math:`\hat P` (10 in the paper).

    Returns
    -------
    Overlap in ``[0, 1]``; NaN when neither result has a term.
    """
    _check_result(reconstructed, "reconstructed")
    top_observed = set(top_terms(observed, n_terms=n_terms))
    top_reconstructed = set(top_terms(reconstructed, n_terms=n_terms))
    union = top_observed | top_reconstructed
    return len(top_observed & top_reconstructed) / len(union) if union else float("nan")


def pathway_score_spearman(observed: pd.DataFrame, reconstructed: pd.DataFrame, *, n_terms: int = 10) -> float:
    r"""Spearman correlation :math:`\rho_{\mathrm{path}}` of combined scores over :math:`P\cup\hat P`.

    Each term of the union of both top-``n_terms`` lists takes its combined score from each result, or zero
    when the term is absent from that result (no overlapping gene), as the paper defines.

    Parameters
    ----------
    observed, reconstructed
        Outputs of :func:`overrepresentation_test`.
    n_terms
        Number of top terms per result.

    Returns
    -------
    Correlation in ``[-1, 1]``; NaN with fewer than three terms in the union or a constant score vector.
    """
    _check_result(reconstructed, "reconstructed")
    union = sorted(set(top_terms(observed, n_terms=n_terms)) | set(top_terms(reconstructed, n_terms=n_terms)))
    if len(union) < 3:
        return float("nan")
    observed_scores = observed.set_index("term")["combined_score"].reindex(union).fillna(0.0).to_numpy()
    reconstructed_scores = reconstructed.set_index("term")["combined_score"].reindex(union).fillna(0.0).to_numpy()
    return _spearman(observed_scores, reconstructed_scores)


def pathway_concordance(
    observed_logfc: ArrayLike,
    reconstructed_logfc: ArrayLike,
    gene_names: Sequence[str],
    gene_sets: Mapping[str, Collection[str]],
    *,
    background: Collection[str] | int | None = None,
    n_genes: int = 100,
    n_terms: int = 10,
) -> dict[str, float]:
    """Pathway Jaccard and pathway-score Spearman of one contrast against one library, per direction and averaged.

    For each direction the top-``n_genes`` up- (or down-) regulated genes of the observed and the
    reconstructed changes are tested with :func:`overrepresentation_test`, and the two results compared with
    :func:`pathway_jaccard` and :func:`pathway_score_spearman`. The paper further averages over libraries
    (Hallmark, Reactome, GO BP); call once per library.

    Parameters
    ----------
    observed_logfc, reconstructed_logfc
        Changes over the retained genes of a contrast, ``(n_genes_total,)`` each.
    gene_names
        Symbols of those genes ``(n_genes_total,)``.
    gene_sets
        One library, term -> genes.
    background
        Universe of the test; ``None`` uses ``gene_names`` (the genes that could have been selected). The
        paper used Enrichr's server-side universe, which is not available offline.
    n_genes
        Genes per direction (100 in the paper).
    n_terms
        Top terms compared (10 in the paper).

    Returns
    -------
    ``{"pathway_jaccard", "pathway_score_spearman"}`` (means over the directions with a defined value) and the
    same with ``_up`` / ``_down`` suffixes.
    """
    observed_values = np.asarray(observed_logfc, dtype=np.float64).ravel()
    reconstructed_values = np.asarray(reconstructed_logfc, dtype=np.float64).ravel()
    if observed_values.shape != reconstructed_values.shape:
        raise ValueError(
            f"`observed_logfc` has {observed_values.shape[0]} genes but `reconstructed_logfc` has "
            f"{reconstructed_values.shape[0]}; compute both over the same genes."
        )
    universe = list(map(str, gene_names)) if background is None else background
    scores: dict[str, float] = {}
    for direction in ("up", "down"):
        results = []
        for values in (observed_values, reconstructed_values):
            top = top_regulated_genes(values, gene_names, direction=direction, n_genes=n_genes)
            results.append(overrepresentation_test(top, gene_sets, background=universe) if top else _empty_result())
        scores[f"pathway_jaccard_{direction}"] = pathway_jaccard(*results, n_terms=n_terms)
        scores[f"pathway_score_spearman_{direction}"] = pathway_score_spearman(*results, n_terms=n_terms)
    for metric in ("pathway_jaccard", "pathway_score_spearman"):
        values = np.array([scores[f"{metric}_up"], scores[f"{metric}_down"]])
        scores[metric] = float(values[np.isfinite(values)].mean()) if np.isfinite(values).any() else float("nan")
    return scores
