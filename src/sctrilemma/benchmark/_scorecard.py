"""The trilemma scorecard: identity, context invariance and expression fidelity of any embedding."""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from scvi.utils import track

from sctrilemma import metrics
from sctrilemma._validation import check_counts, check_obs_keys

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from anndata import AnnData
    from matplotlib.figure import Figure

logger = logging.getLogger(__name__)

IDENTITY, CONTEXT, FIDELITY = "identity", "context invariance", "expression fidelity"
DEMANDS = (IDENTITY, CONTEXT, FIDELITY)
# Every other metric is higher-is-better; these are labelled "(lower is better)" in the Markdown table and the plot.
LOWER_IS_BETTER = frozenset({"depth_r2"})


@dataclass(frozen=True)
class Identity:
    """Identity metrics to compute (paper RQ1/RQ2)."""

    nmi_ari: bool = True
    asw_label: bool = True
    clisi: bool = True
    isolated_labels: bool = True
    celltype_retrieval: bool = True


@dataclass(frozen=True)
class ContextInvariance:
    """Context-invariance metrics to compute (paper RQ1/RQ3, plus sequencing-depth R^2, lower is better)."""

    bras: bool = True
    ilisi: bool = True
    pcr_comparison: bool = True
    residual_donor_invariance: bool = True
    conditional_donor_bras: bool = True
    local_donor_mixing: bool = True
    depth_r2: bool = True


@dataclass(frozen=True)
class ExpressionFidelity:
    """Expression-fidelity metrics to compute for methods with a reconstruction (paper RQ4)."""

    de_concordance: bool = True
    reconstruction_agreement: bool = True
    hvg_pearson: bool = True
    pathways: bool = True


@dataclass(frozen=True)
class Skipped:
    """A metric that could not be computed, and why."""

    method: str
    metric: str
    reason: str


class Scorecard:
    """Score embeddings (and reconstructions) of one AnnData on the three demands.

    Modelled on scib-metrics' ``Benchmarker``: construct, call :meth:`benchmark`, then read
    :meth:`get_results` or draw :meth:`plot_results`. Embedding metrics are averaged over seeded
    label-stratified samples (at most ``max_cells`` cells, ``max_per_label`` per label) and reported
    with their standard deviation; fidelity metrics are computed once on the first sample. A metric
    that cannot be computed is reported with the reason in the ``skipped`` list (:class:`Skipped`
    records), never dropped silently. All metrics are higher-is-better except those in
    ``LOWER_IS_BETTER`` (``depth_r2``, the cross-validated R^2 of log library size, the per-cell total
    of the count matrix, from the embedding), which the table and plot label as such.

    Parameters
    ----------
    adata
        Cells with raw counts (``X`` or ``counts_layer``) and embeddings in ``.obsm``.
    embedding_keys
        ``.obsm`` keys to score; each is one method.
    label_key
        ``obs`` column with cell types.
    donor_key
        ``obs`` column with donors (the context whose effect should vanish).
    condition_key
        ``obs`` column with a disease state or condition, if any.
    reconstruction_keys
        Maps an embedding key to the ``.layers`` key holding that method's reconstructed expected counts.
    counts_layer
        Layer with raw counts; ``None`` uses ``X``.
    gene_sets
        Maps library names to ``.gmt`` files for pathway metrics (symbols); none by default.
    symbol_key
        ``var`` column with gene symbols for pathway matching; ``var_names`` when ``None``.
    identity, context, fidelity
        Metric selections.
    n_repeats, max_cells, max_per_label, seed
        Stratified sampling (paper: 20 repeats of <= 10,000 cells with <= 500 per label).
    progress_bar
        Show progress over methods and repeats.
    """

    def __init__(
        self,
        adata: AnnData,
        embedding_keys: Sequence[str],
        label_key: str,
        donor_key: str,
        condition_key: str | None = None,
        reconstruction_keys: Mapping[str, str] | None = None,
        counts_layer: str | None = None,
        gene_sets: Mapping[str, str] | None = None,
        symbol_key: str | None = None,
        identity: Identity = Identity(),
        context: ContextInvariance = ContextInvariance(),
        fidelity: ExpressionFidelity = ExpressionFidelity(),
        n_repeats: int = 20,
        max_cells: int = 10_000,
        max_per_label: int = 500,
        seed: int = 42,
        progress_bar: bool = True,
    ) -> None:
        check_obs_keys(adata.obs, {"label_key": label_key, "donor_key": donor_key, "condition_key": condition_key})
        missing = [key for key in embedding_keys if key not in adata.obsm]
        if missing or not embedding_keys:
            raise ValueError(f"Embeddings {missing or '(none given)'} are not in adata.obsm ({list(adata.obsm)}).")
        reconstruction_keys = dict(reconstruction_keys or {})
        for method, layer in reconstruction_keys.items():
            if method not in embedding_keys or layer not in adata.layers:
                raise ValueError(
                    f"Reconstruction {method!r} -> {layer!r}: the method must be an embedding key and the "
                    f"reconstruction a layer (layers: {list(adata.layers)})."
                )
        counts = adata.X if counts_layer is None else adata.layers[counts_layer]
        check_counts(counts, where="adata.X" if counts_layer is None else f"adata.layers[{counts_layer!r}]")
        if symbol_key is not None and symbol_key not in adata.var:
            raise ValueError(f"`symbol_key={symbol_key!r}` is not a column of adata.var.")
        self.adata = adata
        self.embedding_keys = list(embedding_keys)
        self.label_key, self.donor_key, self.condition_key = label_key, donor_key, condition_key
        self.reconstruction_keys = reconstruction_keys
        self.counts = counts
        self.gene_sets = {name: metrics.read_gmt(path) for name, path in (gene_sets or {}).items()}
        self.gene_names = (adata.var_names if symbol_key is None else adata.var[symbol_key]).astype(str).to_numpy()
        self.identity, self.context, self.fidelity = identity, context, fidelity
        self.n_repeats, self.max_cells, self.max_per_label, self.seed = n_repeats, max_cells, max_per_label, seed
        self.progress_bar = progress_bar
        self.skipped: list[Skipped] = []
        self._rows: list[dict] = []

    # ------------------------------------------------------------------ metric plans
    def _embedding_metrics(self) -> list[tuple[str, str, Callable[..., float | dict[str, float]]]]:
        """``(demand, name, function(X, labels, donors, states, counts))`` of the selected embedding metrics."""
        plan = {
            (IDENTITY, "nmi_ari"): lambda X, y, d, s, c: metrics.nmi_ari_kmeans(X, y, seed=self.seed),
            (IDENTITY, "asw_label"): lambda X, y, d, s, c: metrics.asw_label(X, y),
            (IDENTITY, "clisi"): lambda X, y, d, s, c: metrics.clisi(X, y),
            (IDENTITY, "isolated_labels"): lambda X, y, d, s, c: metrics.isolated_labels(X, y, d),
            (IDENTITY, "celltype_retrieval"): lambda X, y, d, s, c: {
                k: v
                for k, v in metrics.celltype_retrieval(X, y, d, s, seed=self.seed).items()
                if k != "balanced_accuracy"
            },
            (CONTEXT, "bras"): lambda X, y, d, s, c: metrics.bras(X, y, d),
            (CONTEXT, "ilisi"): lambda X, y, d, s, c: metrics.ilisi(X, d),
            (CONTEXT, "pcr_comparison"): lambda X, y, d, s, c: metrics.pcr_comparison(c, X, d, seed=self.seed),
            (CONTEXT, "residual_donor_invariance"): lambda X, y, d, s, c: metrics.residual_donor_invariance(X, y, d, s),
            (CONTEXT, "conditional_donor_bras"): lambda X, y, d, s, c: metrics.conditional_donor_bras(X, y, d, s),
            (CONTEXT, "local_donor_mixing"): lambda X, y, d, s, c: metrics.local_donor_mixing(X, y, d, s),
            (CONTEXT, "depth_r2"): lambda X, y, d, s, c: metrics.depth_r2(
                X, np.asarray(c.sum(axis=1)).ravel(), seed=self.seed
            ),
        }
        selected = {(IDENTITY, f.name) for f in fields(self.identity) if getattr(self.identity, f.name)}
        selected |= {(CONTEXT, f.name) for f in fields(self.context) if getattr(self.context, f.name)}
        return [(demand, name, function) for (demand, name), function in plan.items() if (demand, name) in selected]

    def _record(self, method: str, demand: str, name: str, function: Callable[[], float | dict[str, float]]) -> dict:
        try:
            value = function()
        except ValueError as error:  # includes MetricSkipped: undefined for this data
            reason = str(error)
            if not any(s.method == method and s.metric == name for s in self.skipped):
                self.skipped.append(Skipped(method, name, reason))
                logger.warning("Skipped %s for %s: %s", name, method, reason)
            return {}
        values = value if isinstance(value, dict) else {name: value}
        return {(demand, key): float(v) for key, v in values.items()}

    # ------------------------------------------------------------------ running
    def benchmark(self) -> None:
        """Compute every selected metric for every method."""
        obs = self.adata.obs
        labels = obs[self.label_key].astype(str).to_numpy()
        donors = obs[self.donor_key].astype(str).to_numpy()
        states = None if self.condition_key is None else obs[self.condition_key].astype(str).to_numpy()
        samples = metrics.stratified_subsamples(
            labels,
            n_repeats=self.n_repeats,
            max_cells=self.max_cells,
            max_per_label=self.max_per_label,
            seed=self.seed,
        )
        plan = self._embedding_metrics()
        self._rows, self.skipped = [], []
        for method in track(self.embedding_keys, description="Scorecard", disable=not self.progress_bar, style="tqdm"):
            embedding = np.asarray(self.adata.obsm[method], dtype=np.float32)
            per_repeat: list[dict] = []
            for index in samples:
                X, y, d = embedding[index], labels[index], donors[index]
                s = None if states is None else states[index]
                c = self.counts[index] if self.context.pcr_comparison or self.context.depth_r2 else None
                scores: dict = {}
                for demand, name, function in plan:
                    scores.update(self._record(method, demand, name, partial(function, X, y, d, s, c)))
                per_repeat.append(scores)
            self._add_rows(method, per_repeat)
            if method in self.reconstruction_keys:
                self._add_rows(method, [self._fidelity_scores(method, samples[0], labels)])

    def _add_rows(self, method: str, per_repeat: list[dict]) -> None:
        frame = pd.DataFrame(per_repeat)
        for demand, metric in frame.columns:
            values = frame[(demand, metric)].dropna()
            self._rows.append(
                {
                    "method": method,
                    "demand": demand,
                    "metric": metric,
                    "mean": float(values.mean()) if len(values) else np.nan,
                    "sd": float(values.std(ddof=1)) if len(values) > 1 else np.nan,
                    "n_repeats": len(values),
                }
            )

    def _fidelity_scores(self, method: str, index: np.ndarray, labels: np.ndarray) -> dict:
        index = np.sort(index)
        observed = self.counts[index]
        reconstructed = self.adata.layers[self.reconstruction_keys[method]][index]
        groups = labels[index]
        scores: dict = {}
        if self.fidelity.reconstruction_agreement:
            scores.update(
                self._record(
                    method, FIDELITY, "reconstruction",
                    lambda: {
                        f"reconstruction_{k}": v
                        for k, v in metrics.reconstruction_agreement(observed, reconstructed).items()
                        if k not in ("n_genes", "n_cells")
                    },
                )
            )  # fmt: skip
        if self.fidelity.hvg_pearson:
            scores.update(
                self._record(method, FIDELITY, "hvg_pearson", lambda: metrics.hvg_pearson(observed, reconstructed))
            )
        if self.fidelity.de_concordance:
            scores.update(
                self._record(
                    method, FIDELITY, "de_concordance",
                    lambda: _mean_over_groups(
                        groups, lambda g: metrics.differential_expression_concordance(observed, reconstructed, groups, g)
                    ),
                )
            )  # fmt: skip
        if self.fidelity.pathways and self.gene_sets:
            scores.update(
                self._record(
                    method, FIDELITY, "pathways", lambda: self._pathway_scores(observed, reconstructed, groups)
                )
            )
        elif self.fidelity.pathways:
            self.skipped.append(Skipped(method, "pathways", "no gene sets given (pass `gene_sets={name: path.gmt}`)"))
        return scores

    def _pathway_scores(self, observed, reconstructed, groups: np.ndarray) -> dict[str, float]:
        def one_group(group) -> dict[str, float]:
            observed_lfc = metrics.contrast_logfc(observed, groups, group)
            reconstructed_lfc = metrics.contrast_logfc(reconstructed, groups, group)
            per_library = [
                metrics.pathway_concordance(observed_lfc, reconstructed_lfc, self.gene_names, library)
                for library in self.gene_sets.values()
            ]
            return {
                k: float(np.nanmean([r[k] for r in per_library])) for k in ("pathway_jaccard", "pathway_score_spearman")
            }

        return _mean_over_groups(groups, one_group)

    # ------------------------------------------------------------------ outputs
    def get_results(self, pivot: bool = False) -> pd.DataFrame:
        """Tidy results (method, demand, metric, mean, sd, n_repeats), or methods x metrics means with ``pivot``."""
        if not self._rows:
            raise RuntimeError("Call `benchmark()` first.")
        tidy = pd.DataFrame(self._rows)
        if not pivot:
            return tidy
        return tidy.pivot_table(index="method", columns=["demand", "metric"], values="mean", sort=False)

    def to_markdown(self) -> str:
        """The results as a Markdown table (mean +- sd), plus the skipped metrics."""
        tidy = self.get_results()
        tidy["value"] = [
            f"{m:.3f}" if np.isnan(s) else f"{m:.3f} ± {s:.3f}" for m, s in zip(tidy["mean"], tidy["sd"], strict=True)
        ]
        table = tidy.pivot_table(
            index=["demand", "metric"], columns="method", values="value", aggfunc="first", sort=False
        )
        lines = ["| demand | metric | " + " | ".join(table.columns) + " |", "|---|---|" + "---|" * len(table.columns)]
        for (demand, metric), row in table.iterrows():
            cells = " | ".join(str(v) if pd.notna(v) else "–" for v in row)
            lines.append(f"| {demand} | {_label(metric)} | {cells} |")
        lines += [
            "",
            "Mean ± SD over stratified samples; – means not applicable (fidelity needs a reconstruction). Higher is "
            "better unless the metric says otherwise.",
        ]
        if self.skipped:
            lines += ["", "Skipped:"] + [f"- {s.method}: {s.metric} — {s.reason}" for s in self.skipped]
        return "\n".join(lines)

    def plot_results(self, path: str | None = None) -> Figure:
        """One panel per demand; methods side by side for each metric (mean +- sd)."""
        import matplotlib as mpl

        mpl.use("Agg")
        import matplotlib.pyplot as plt

        tidy = self.get_results()
        methods = list(dict.fromkeys(tidy["method"]))
        demands = [d for d in DEMANDS if d in set(tidy["demand"])]
        figure, axes = plt.subplots(1, len(demands), figsize=(6 * len(demands), 4.5), squeeze=False)
        width = 0.8 / max(len(methods), 1)
        for ax, demand in zip(axes[0], demands, strict=True):
            part = tidy[tidy["demand"] == demand]
            names = list(dict.fromkeys(part["metric"]))
            for i, method in enumerate(methods):
                rows = part[part["method"] == method].set_index("metric").reindex(names)
                ax.bar(np.arange(len(names)) + i * width, rows["mean"], width, yerr=rows["sd"].fillna(0), label=method)
            ax.set_xticks(np.arange(len(names)) + width * (len(methods) - 1) / 2)
            ax.set_xticklabels([_label(name) for name in names], rotation=45, ha="right")
            ax.set_title(demand)
        handles, names = axes[0][0].get_legend_handles_labels()
        figure.tight_layout()
        figure.legend(handles, names, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize="small", frameon=False)
        if path is not None:
            figure.savefig(path, dpi=120, bbox_inches="tight")
        return figure


def _label(metric: str) -> str:
    """The metric's name, marked when lower values are better."""
    return f"{metric} (lower is better)" if metric in LOWER_IS_BETTER else metric


def _mean_over_groups(groups: np.ndarray, score: Callable[[str], dict[str, float]]) -> dict[str, float]:
    """Mean of ``score(group)`` (one group vs the rest) over the groups where it is defined."""
    results, reasons = [], []
    for group in np.unique(groups):
        try:
            results.append(score(group))
        except ValueError as error:
            reasons.append(f"{group}: {error}")
    if not results:
        raise ValueError("no group could be scored against the rest (" + "; ".join(reasons) + ")")
    frame = pd.DataFrame(results)
    return {column: float(frame[column].mean()) for column in frame.columns if column != "n_genes"}
