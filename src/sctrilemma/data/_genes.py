"""Matching a query's genes to a model's gene vocabulary: Ensembl IDs (version suffixes stripped) or symbols."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import scipy.sparse as sp

from sctrilemma._validation import iter_row_chunks

if TYPE_CHECKING:
    from collections.abc import Sequence

logger = logging.getLogger(__name__)

SYMBOL_COLUMNS = ("gene_symbols", "gene_symbol", "feature_name", "gene_name", "gene_names", "symbol", "symbols")
_VERSION_SUFFIX = re.compile(r"[.-]\d+$")
_ENSEMBL = re.compile(r"^ENS[A-Z]*G\d{6,}")


def strip_version(gene_ids: Sequence[str]) -> np.ndarray:
    """Ensembl IDs without a trailing version such as ``.1`` or ``-1`` (other names are left as they are)."""
    return np.asarray(
        [_VERSION_SUFFIX.sub("", g) if _ENSEMBL.match(g) else g for g in map(str, gene_ids)], dtype=object
    )


def find_symbol_column(var: pd.DataFrame) -> str | None:
    """The first ``var`` column with a conventional gene-symbol name, or ``None``."""
    return next((c for c in SYMBOL_COLUMNS if c in var.columns), None)


@dataclass(frozen=True)
class GeneMatch:
    """How a query's genes map onto a vocabulary.

    Attributes
    ----------
    query_index
        Positions of matched genes in the query, ``(n_matched,)``.
    vocab_index
        Their positions in the vocabulary, ``(n_matched,)``.
    by
        ``"ensembl"`` or ``"symbol"``.
    n_query
        Genes in the query.
    n_vocabulary
        Genes in the vocabulary.
    """

    query_index: np.ndarray
    vocab_index: np.ndarray
    by: str
    n_query: int
    n_vocabulary: int

    @property
    def n_matched(self) -> int:
        """Matched query genes."""
        return int(self.query_index.size)

    @property
    def n_found(self) -> int:
        """Vocabulary genes that the query holds."""
        return int(np.unique(self.vocab_index).size)

    @property
    def vocabulary_fraction(self) -> float:
        """Share of the vocabulary's genes that the query holds."""
        return self.n_found / max(self.n_vocabulary, 1)

    def project(self, counts, n_vocab: int) -> sp.csr_matrix:
        """Counts ``(n_cells, n_query)`` in vocabulary order ``(n_cells, n_vocab)``; duplicates are summed.

        ``counts`` may be dense, sparse or backed; it is read in row chunks.
        """
        mapping = sp.csr_matrix(
            (np.ones(self.n_matched, dtype=np.float32), (self.query_index, self.vocab_index)),
            shape=(self.n_query, n_vocab),
        )
        blocks = [sp.csr_matrix(sp.csr_matrix(block) @ mapping, dtype=np.float32) for block in iter_row_chunks(counts)]
        return sp.vstack(blocks, format="csr", dtype=np.float32)


def _lookup(names: np.ndarray, vocabulary: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions of ``names`` found in ``vocabulary`` and their vocabulary positions (first occurrence)."""
    vocab = pd.Index(vocabulary)
    first = ~vocab.duplicated(keep="first")
    found = pd.Series(np.flatnonzero(first), index=vocab[first]).reindex(names)
    keep = found.notna().to_numpy()
    return np.flatnonzero(keep), found.to_numpy()[keep].astype(np.int64)


def match_genes(
    query_var_names: Sequence[str],
    vocabulary: Sequence[str],
    *,
    query_symbols: Sequence[str] | None = None,
    vocabulary_symbols: Sequence[str] | None = None,
    min_fraction: float = 0.5,
) -> GeneMatch:
    """Match query genes to a vocabulary, choosing Ensembl IDs or symbols automatically.

    Tries the query's names as Ensembl IDs (version suffixes stripped on both sides), as symbols
    against ``vocabulary_symbols``, and ``query_symbols`` against those too; keeps whichever finds
    most of the vocabulary's genes and logs a report. The query may measure any other genes besides:
    only the share of the vocabulary it holds is judged.

    Parameters
    ----------
    query_var_names
        The query's ``var_names``.
    vocabulary
        The model's genes (Ensembl IDs).
    query_symbols
        Symbols of the query genes (e.g. ``var["gene_symbols"]``), if any.
    vocabulary_symbols
        Symbols of the vocabulary genes, if known.
    min_fraction
        Minimum share of the vocabulary's genes that the query must hold.

    Returns
    -------
    The best :class:`GeneMatch`.

    Raises
    ------
    ValueError
        If the query holds less than ``min_fraction`` of the vocabulary; the message says how many
        genes were found, the likely cause and the option that lowers the threshold.
    """
    names = np.asarray(list(map(str, query_var_names)), dtype=object)
    vocab = strip_version(vocabulary)
    if vocabulary_symbols is not None:
        _refuse_mouse_symbols(
            names if query_symbols is None else np.asarray(query_symbols, dtype=object), vocabulary_symbols
        )
    candidates = {"ensembl": _lookup(strip_version(names), vocab)}
    if vocabulary_symbols is not None:
        vocab_symbols = np.asarray([str(s).upper() for s in vocabulary_symbols], dtype=object)
        candidates["symbol"] = _lookup(np.asarray([n.upper() for n in names], dtype=object), vocab_symbols)
        if query_symbols is not None:
            symbols = np.asarray([str(s).upper() for s in query_symbols], dtype=object)
            candidates["symbol column"] = _lookup(symbols, vocab_symbols)
    by, (query_index, vocab_index) = max(candidates.items(), key=lambda item: np.unique(item[1][1]).size)
    match = GeneMatch(query_index, vocab_index, "symbol" if by.startswith("symbol") else by, names.size, vocab.size)
    by = by if by != "ensembl" or _looks_ensembl(vocab) else "name"  # a vocabulary of symbols matched as named
    logger.info(
        "The query holds %d of the model's %d genes (%.1f%%), matched by %s; %d of its %d genes are not used.",
        match.n_found, vocab.size, 100 * match.vocabulary_fraction, by, names.size - match.n_matched, names.size,
    )  # fmt: skip
    if match.vocabulary_fraction < min_fraction:
        raise ValueError(
            f"The query holds only {match.n_found} of the model's {vocab.size} genes "
            f"({100 * match.vocabulary_fraction:.1f}%, best match by {by}); at least {100 * min_fraction:.0f}% are "
            f"needed. {_likely_cause(names, query_symbols, vocabulary_symbols, vocab)} If the query is of the model's "
            "species and measures fewer of its genes on purpose (a targeted panel), lower the threshold with "
            "`min_overlap` (`--min-overlap` for `sctrilemma embed`): its cells are then embedded from the genes "
            "it holds."
        )
    return match


def _title_case_fraction(names) -> float:
    words = [str(n) for n in names if len(str(n)) > 1 and str(n)[:1].isalpha()]
    return (
        float(np.mean([w[:1].isupper() and w[1:] == w[1:].lower() and w[1:] != w[1:].upper() for w in words]))
        if words
        else 0.0
    )


def _refuse_mouse_symbols(query_names, vocabulary_symbols) -> None:
    """Case-insensitive symbol matching would map mouse symbols (``Cd3e``) onto human ones (``CD3E``)."""
    if _title_case_fraction(query_names) > 0.5 and _title_case_fraction(vocabulary_symbols) < 0.1:
        raise ValueError(
            "The query's gene symbols look like mouse symbols (e.g. 'Cd3e') while the model's are human "
            "(e.g. 'CD3E'): the model covers another species. Map the genes to human orthologs first."
        )


def _looks_ensembl(names) -> bool:
    sample = names[: min(len(names), 2000)]
    return bool(np.mean([bool(_ENSEMBL.match(str(n))) for n in sample]) > 0.5)


def _likely_cause(names: np.ndarray, query_symbols, vocabulary_symbols, vocabulary: np.ndarray) -> str:
    sample = names[: min(names.size, 2000)]
    if any(str(n).startswith(("ENSMUSG", "ENSRNOG", "ENSDARG")) for n in sample):
        return "The query's Ensembl IDs are not human (e.g. ENSMUSG...): the model covers another species."
    if not _looks_ensembl(sample):
        mixed_case = np.mean([str(n)[:1].isupper() and str(n)[1:].islower() for n in sample if len(str(n)) > 1]) > 0.5
        if mixed_case:
            return "The query's symbols look like mouse symbols (e.g. 'Cd3e'): the model covers another species."
        if vocabulary_symbols is None and not _looks_ensembl(vocabulary):
            return "The query's genes and the model's are both named by symbol: the query measures fewer of them."
        if vocabulary_symbols is None:
            return (
                "The query names look like gene symbols but the model knows only Ensembl IDs: "
                "set `var_names` to Ensembl IDs."
            )
        if query_symbols is None:
            return "Check that `var_names` are gene symbols or Ensembl IDs of the model's species."
    return "Check that the query measures the same species and uses Ensembl IDs or gene symbols."
