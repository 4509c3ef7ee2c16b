"""Label transfer: a calibrated classifier on the embedding, with an unknown class for types a reference lacks."""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from anndata import AnnData
    from numpy.typing import ArrayLike

UNKNOWN = "unknown"
# A cell's distance is the median over itself and its nearest query cells, so that novelty is a property of a group.
NOVELTY_NEIGHBORS = 15
# The query's own distance to a class: this quantile of the distances of the cells it labels with the class.
SHIFT_QUANTILE = 0.1
# Classes labelling fewer query cells than this do not enter the query's shift.
MIN_SHIFT_CELLS = 10
# A cell is novel when its distance is this many times the query's own distance to the classes, or more where the
# reference's own cells of its class spread further: their TAIL_QUANTILE over their SHIFT_QUANTILE.
NOVELTY_FACTOR = 1.5
TAIL_QUANTILE = 0.99


@dataclass
class LabelClassifier:
    """A multinomial logistic regression on the embedding, with what it needs to call cells unknown.

    Fitted by :meth:`~sctrilemma.model.LabelClassifier.fit` on the labelled reference cells' embedding and stored
    with a saved model, so that it labels a query without the reference's cells.

    Attributes
    ----------
    classes
        The labels, ``(n_classes,)``.
    mean, scale
        Standardisation of the embedding's features, ``(n_features,)`` each.
    coef, intercept
        The regression's weights on standardised features, ``(n_classes, n_features)`` and ``(n_classes,)``.
    centroids
        Each class's mean standardised embedding, ``(n_classes, n_features)``.
    precision
        Inverse of the pooled within-class covariance (Ledoit-Wolf shrinkage), ``(n_features, n_features)``.
    class_scales
        Per class, the median Mahalanobis distance of the reference's cells to their class centre.
    reference_shift
        The reference's own cells' distance as :meth:`~sctrilemma.model.LabelClassifier.predict` measures a
        query's, for scale.
    class_factors
        Per class, how many times the query's own distance a cell must lie from the class to be novel.
    labels_key
        The ``obs`` column the labels came from, if any.
    """

    classes: np.ndarray
    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: np.ndarray
    centroids: np.ndarray
    precision: np.ndarray
    class_scales: np.ndarray
    reference_shift: float
    class_factors: np.ndarray
    labels_key: str | None = None

    @classmethod
    def fit(
        cls, embedding: ArrayLike, labels: ArrayLike, *, labels_key: str | None = None, seed: int = 0
    ) -> LabelClassifier:
        """Fit on labelled cells; missing labels are left out.

        The regression's strength is chosen by five-fold cross-validation of the log-loss, so that its
        probabilities are calibrated on held-out cells.

        Parameters
        ----------
        embedding
            ``(n_cells, n_features)`` embedding of the reference cells.
        labels
            ``(n_cells,)`` their labels.
        labels_key
            The ``obs`` column of the labels, recorded for the user.
        seed
            Seed of the cross-validation's folds.

        Raises
        ------
        ValueError
            For shapes that disagree, fewer than two labels, or a label with fewer than two cells.
        """
        from sklearn.covariance import LedoitWolf
        from sklearn.linear_model import LogisticRegressionCV
        from sklearn.model_selection import StratifiedKFold

        x = np.asarray(embedding, dtype=np.float64)
        y = pd.Series(np.asarray(labels, dtype=object))
        if x.ndim != 2 or y.size != x.shape[0]:
            raise ValueError(f"{y.size} labels for an embedding of shape {x.shape}: pass one label per cell.")
        labelled = y.notna().to_numpy()
        x, y = x[labelled], y[labelled].astype(str).to_numpy()
        classes, codes, counts = np.unique(y, return_inverse=True, return_counts=True)
        if classes.size < 2 or counts.min() < 2:
            found = ", ".join(f"{label!r}: {count}" for label, count in zip(classes, counts, strict=True))
            raise ValueError(f"A classifier needs at least two labels with two cells each; got {{{found}}}.")
        mean, scale = x.mean(0), np.maximum(x.std(0), 1e-8)
        z = (x - mean) / scale
        folds = StratifiedKFold(n_splits=int(min(5, counts.min())), shuffle=True, random_state=seed)
        with warnings.catch_warnings():  # scikit-learn 1.8 announces new defaults for arguments not used here
            warnings.simplefilter("ignore", FutureWarning)
            regression = LogisticRegressionCV(Cs=8, cv=folds, scoring="neg_log_loss", max_iter=2000).fit(z, codes)
        coef, intercept = regression.coef_, regression.intercept_
        if classes.size == 2:  # one logit for the second class: the same probabilities as two opposite halves
            coef, intercept = np.concatenate([-coef, coef]) / 2, np.concatenate([-intercept, intercept]) / 2
        centroids = np.stack([z[codes == k].mean(0) for k in range(classes.size)])
        precision = LedoitWolf().fit(z - centroids[codes]).precision_
        distance = _mahalanobis(z, centroids[codes], precision)
        class_scales = np.maximum([np.median(distance[codes == k]) for k in range(classes.size)], 1e-12)
        own = _neighbourhood_median(z, distance / class_scales[codes])  # as predict measures a query's cells
        return cls(
            classes=classes.astype(object),
            mean=mean,
            scale=scale,
            coef=coef,
            intercept=intercept,
            centroids=centroids,
            precision=precision,
            class_scales=class_scales,
            reference_shift=_query_shift(own, codes, classes.size),
            class_factors=np.array([_class_factor(own[codes == k]) for k in range(classes.size)]),
            labels_key=labels_key,
        )

    @property
    def n_features(self) -> int:
        """Features of the embedding the classifier reads."""
        return int(self.mean.size)

    def predict_proba(self, embedding: ArrayLike) -> np.ndarray:
        """Class probabilities ``(n_cells, n_classes)``, in the order of ``classes``."""
        z = self._standardised(embedding)
        logits = z @ self.coef.T + self.intercept
        logits -= logits.max(1, keepdims=True)
        probability = np.exp(logits)
        return probability / probability.sum(1, keepdims=True)

    def predict(
        self,
        embedding: ArrayLike,
        *,
        max_uncertainty: float = 0.5,
        novelty: bool = True,
        unknown_label: str = UNKNOWN,
        index: pd.Index | None = None,
    ) -> pd.DataFrame:
        """Each cell's label, probability and uncertainty, with an unknown class.

        A cell is unknown when its largest class probability is below ``1 - max_uncertainty``, or (``novelty``)
        when it lies further from the centre of its predicted class than the query's own cells of the known types
        do. Distances are Mahalanobis distances under the reference's within-class covariance, in units of the
        reference cells' median distance to their class centre, and each cell's is the median over itself and its
        15 nearest query cells, so that a group is judged, not a lone cell. The query's own distance (its shift:
        another chemistry or lab moves every class) is, per class, the lower tail (10 %) of the distances of the
        cells labelled with it, which are that class's own cells wherever the query has them; the median over
        classes. A cell further than 1.5 times that is novel, or further than the reference's own cells of its
        class spread (their 99th percentile over their 10th) where that is wider. A cell's label therefore depends
        on the query it comes with; its embedding does not. A type the reference lacks is found only where the
        embedding sets it apart from the known types.

        Parameters
        ----------
        embedding
            ``(n_cells, n_features)`` embedding of the query cells, by the model the classifier was fitted on.
        max_uncertainty
            Cells with uncertainty (one minus the largest probability) above this are unknown; ``1`` switches
            the rule off.
        novelty
            Call cells unknown that lie further from their predicted class than the query's own known cells.
        unknown_label
            The label given to unknown cells.
        index
            Index of the returned frame (e.g. the query's ``obs_names``).

        Returns
        -------
        One row per cell: ``prediction`` (with ``unknown_label``), ``nearest_label`` (the classifier's label before the
        unknown rules), ``probability``, ``uncertainty``, ``novelty_score`` (the cell's distance over the novelty
        threshold of its class; above 1 is novel), ``is_novel`` and ``is_unknown``. ``attrs["query_shift"]`` is the
        query's own distance, relative to the reference's cells (about 1 for a query like the reference; larger for one
        measured differently).
        """
        if not 0 <= max_uncertainty <= 1:
            raise ValueError(f"`max_uncertainty` must lie in [0, 1], got {max_uncertainty}.")
        probabilities = self.predict_proba(embedding)
        winner = probabilities.argmax(1)
        probability = probabilities[np.arange(winner.size), winner]
        z = self._standardised(embedding)
        distance = _mahalanobis(z, self.centroids[winner], self.precision) / self.class_scales[winner]
        ratio = _neighbourhood_median(z, distance)
        shift = _query_shift(ratio, winner, self.classes.size)
        score = ratio / (self.class_factors[winner] * shift)
        is_novel = (score > 1.0) if novelty else np.zeros(winner.size, dtype=bool)
        is_unknown = (1.0 - probability > max_uncertainty) | is_novel
        nearest = self.classes[winner]
        categories = list(dict.fromkeys([*map(str, self.classes), unknown_label]))
        result = pd.DataFrame(
            {
                "prediction": pd.Categorical(np.where(is_unknown, unknown_label, nearest), categories=categories),
                "nearest_label": pd.Categorical(nearest, categories=list(map(str, self.classes))),
                "probability": probability,
                "uncertainty": 1.0 - probability,
                "novelty_score": score,
                "is_novel": is_novel,
                "is_unknown": is_unknown,
            },
            index=index,
        )
        result.attrs["query_shift"] = shift / self.reference_shift
        return result

    def _standardised(self, embedding: ArrayLike) -> np.ndarray:
        x = np.asarray(embedding, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.n_features:
            raise ValueError(
                f"The classifier reads {self.n_features} features, the embedding has shape {x.shape}: embed the "
                "query with the model the classifier was fitted on."
            )
        return (x - self.mean) / self.scale

    def to_dict(self) -> dict[str, Any]:
        """Plain lists and numbers, for a model's saved metadata."""
        return {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> LabelClassifier:
        """The classifier :meth:`~sctrilemma.model.LabelClassifier.to_dict` wrote."""
        scalars = {"reference_shift": float(values["reference_shift"]), "labels_key": values.get("labels_key")}
        arrays = {
            k: np.asarray(v, dtype=object if k == "classes" else np.float64)
            for k, v in values.items()
            if k not in scalars
        }
        return cls(**arrays, **scalars)


def _class_factor(own: np.ndarray) -> float:
    """``NOVELTY_FACTOR``, or the spread of a class's own reference cells where it is wider."""
    tail = np.quantile(own, TAIL_QUANTILE) / max(np.quantile(own, SHIFT_QUANTILE), 1e-12)
    return float(max(NOVELTY_FACTOR, tail))


def _query_shift(ratio: np.ndarray, winner: np.ndarray, n_classes: int) -> float:
    """How far the query's own cells lie from the reference's classes, in units of the reference's spread.

    Per class, the ``SHIFT_QUANTILE`` of ``ratio`` over the cells labelled with it: the part of them nearest the
    class, its own cells where the query has them; then the median over classes. 1 where no class labels
    ``MIN_SHIFT_CELLS`` cells.
    """
    per_class = [
        np.quantile(ratio[winner == k], SHIFT_QUANTILE)
        for k in range(n_classes)
        if (winner == k).sum() >= MIN_SHIFT_CELLS
    ]
    return float(np.median(per_class)) if per_class else 1.0


def _neighbourhood_median(z: np.ndarray, score: np.ndarray) -> np.ndarray:
    """Each cell's median ``score`` over itself and its ``NOVELTY_NEIGHBORS`` nearest cells in ``z``."""
    from sklearn.neighbors import NearestNeighbors

    k = min(NOVELTY_NEIGHBORS, z.shape[0] - 1)
    if k < 1:
        return score
    neighbours = NearestNeighbors(n_neighbors=k + 1).fit(z).kneighbors(z, return_distance=False)
    return np.median(score[neighbours], axis=1)


def _mahalanobis(z: np.ndarray, centres: np.ndarray, precision: np.ndarray) -> np.ndarray:
    """Row-wise Mahalanobis distance of ``z`` to ``centres`` ``(n, d)`` under ``precision`` ``(d, d)``."""
    difference = z - centres
    return np.sqrt(np.maximum(np.einsum("nd,de,ne->n", difference, precision, difference), 0.0))


class LabelTransferMixin:
    """Cell-type labels for new cells from a classifier stored with the model."""

    label_classifier_: LabelClassifier | None = None

    def fit_label_classifier(
        self, labels_key: str, adata: AnnData | None = None, *, batch_size: int | None = None, seed: int = 0
    ) -> LabelClassifier:
        """Fit the label classifier on labelled cells' embedding and keep it with the model.

        The classifier (:class:`~sctrilemma.model.LabelClassifier`) is saved by :meth:`~sctrilemma.SCTrilemma.save` and
        carried into every query model of :meth:`~sctrilemma.SCTrilemma.load_query_data`, whose
        :meth:`~sctrilemma.SCTrilemma.predict_labels` then labels the query without the reference's cells. Cells whose
        label is missing are left out.

        Parameters
        ----------
        labels_key
            ``obs`` column with the labels.
        adata
            Labelled cells, registered with this model or with its genes; the model's training data by default.
        batch_size
            Cells per batch when embedding.
        seed
            Seed of the classifier's cross-validation folds.

        Returns
        -------
        The fitted classifier, also stored as ``label_classifier_``.
        """
        adata = self._validate_anndata(adata)
        if labels_key not in adata.obs:
            raise ValueError(f"`adata.obs` has no column {labels_key!r}; name the column that holds the labels.")
        embedding = self.get_latent_representation(adata, batch_size=batch_size)
        labels = adata.obs[labels_key].to_numpy()
        self.label_classifier_ = LabelClassifier.fit(embedding, labels, labels_key=labels_key, seed=seed)
        return self.label_classifier_

    def predict_labels(
        self,
        adata: AnnData | None = None,
        *,
        max_uncertainty: float = 0.5,
        novelty: bool = True,
        unknown_label: str = UNKNOWN,
        batch_size: int | None = None,
    ) -> pd.DataFrame:
        """Labels for ``adata``'s cells (the model's data by default) from the stored label classifier.

        Each cell gets the classifier's label with its probability; it is called ``unknown_label`` when the
        classifier is unsure or when the cell lies beyond the reference's spread of its label, judged relative
        to the query's own shift from the reference (:meth:`sctrilemma.model.LabelClassifier.predict`).

        Parameters
        ----------
        adata
            Cells to label; the model's data by default (a query of :meth:`~sctrilemma.SCTrilemma.load_query_data`).
        max_uncertainty
            Cells whose uncertainty (one minus the largest class probability) exceeds this are unknown.
        novelty
            Call cells of types the reference lacks unknown.
        unknown_label
            The label of unknown cells.
        batch_size
            Cells per batch when embedding.

        Returns
        -------
        One row per cell, indexed by ``obs_names``: ``prediction``, ``nearest_label``, ``probability``,
        ``uncertainty``, ``novelty_score``, ``is_novel`` and ``is_unknown``.

        Raises
        ------
        ValueError
            If the model has no label classifier (fit one with :meth:`~sctrilemma.SCTrilemma.fit_label_classifier`).
        """
        if self.label_classifier_ is None:
            raise ValueError(
                "This model has no label classifier. Fit one on labelled reference cells first: "
                "`reference_model.fit_label_classifier('cell_type')`, then save the reference or map the query "
                "with `load_query_data` again."
            )
        adata = self._validate_anndata(adata)
        embedding = self.get_latent_representation(adata, batch_size=batch_size)
        return self.label_classifier_.predict(
            embedding,
            max_uncertainty=max_uncertainty,
            novelty=novelty,
            unknown_label=unknown_label,
            index=adata.obs_names,
        )
