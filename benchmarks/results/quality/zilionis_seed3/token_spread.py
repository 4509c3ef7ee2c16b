"""Zilionis as trilemma.py trains it (with the stop): what each of the K latent tokens holds, against their mean.

Usage (from the repository root)::

    OMP_NUM_THREADS=1 python benchmarks/results/quality/zilionis_seed3/token_spread.py 3 4

Per seed: k-means NMI (20 single starts, all cells) of the pooled embedding (the tokens' mean, read relative to the
prior as shipped), of a 50-component PCA of all token means side by side, and of each token's mean alone; per token,
its total variance over cells and the share of it between the cell types' centroids; and how much the tokens agree
on where the types lie: the mean cosine, over pairs of tokens, of their type-centroid offsets (each type's centroid
minus the mean of the centroids).
"""

import sys
import warnings

import numpy as np
from sklearn.decomposition import PCA
from zilionis import LABEL_KEY, between_share, kmeans_nmi, load, train

warnings.filterwarnings("ignore")
adata = load()
labels = adata.obs[LABEL_KEY].astype(str).to_numpy()
types = np.unique(labels)


def type_offsets(x: np.ndarray) -> np.ndarray:
    """Each type's centroid minus the mean of the centroids, flattened."""
    centroids = np.stack([x[labels == t].mean(0) for t in types])
    return (centroids - centroids.mean(0)).ravel()


for seed in (int(s) for s in sys.argv[1:]):
    model, facts = train(adata, seed)
    pooled = model.get_latent_representation()
    tokens = np.asarray(model.get_latent_tokens())  # (cells, K, d)
    side_by_side = PCA(50, random_state=0).fit_transform(tokens.reshape(tokens.shape[0], -1))
    print(
        f"seed {seed}: {facts['steps']} steps; k-means NMI pooled {kmeans_nmi(pooled, labels, seed):.3f}, "
        f"tokens side by side (PCA 50) {kmeans_nmi(side_by_side, labels, seed):.3f}; "
        f"types' share of the pooled variance {between_share(pooled, labels):.3f}"
    )
    per_token = [
        (
            kmeans_nmi(tokens[:, k], labels, seed),
            float(((tokens[:, k] - tokens[:, k].mean(0)) ** 2).sum(1).mean()),
            between_share(tokens[:, k], labels),
        )
        for k in range(tokens.shape[1])
    ]
    print("per token NMI: " + ", ".join(f"{n:.2f}" for n, _, _ in per_token))
    print("per token variance: " + ", ".join(f"{v:.1f}" for _, v, _ in per_token))
    print("per token types' share: " + ", ".join(f"{b:.2f}" for _, _, b in per_token))
    offsets = np.stack([type_offsets(tokens[:, k]) for k in range(tokens.shape[1])])
    unit = offsets / np.linalg.norm(offsets, axis=1, keepdims=True)
    cosines = unit @ unit.T
    pairs = cosines[np.triu_indices(tokens.shape[1], 1)]
    print(f"tokens' agreement on the types' offsets: mean cosine {pairs.mean():.3f} (min {pairs.min():.3f})")
    ratio = ((pooled - pooled.mean(0)) ** 2).sum(1).mean() / np.mean([v for _, v, _ in per_token])
    print(f"variance of the tokens' mean over the mean of their variances {ratio:.3f}")
