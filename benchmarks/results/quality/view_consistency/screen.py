"""The small preset trained as trilemma.py trains it (240 s, the preset's stop), with a second view of each training
cell in the loss: the encoder reads the cell again with its own random thinning (and random order among equal counts),
and the loss charges the distance between the two views' pooled embeddings. Does an embedding held to the same place
under another draw of the cell's counts keep cell types apart as it trains on?

The charge is scale-free: the batch's mean squared distance between the two views' pooled posterior means over the
two views' total variance across the batch's cells (0 when the views agree, about 1 when they are unrelated), times
``--consistency`` times the batch's mean reconstruction loss per cell (detached), so one value means the same share of
the loss on every data set. ``--consistency 0`` is the preset. Scored by the Scorecard beside a PCA as
``gene_panel/mild/screen_panel.py`` scores one model; each row also has the two views' disagreement averaged over the
run's last 50 training steps.

Usage (from the repository root; one arm per one-thread process, two side by side, paired by seed)::

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/results/quality/view_consistency/screen.py \
        --data zilionis2019_mouse_lung_cluey.h5ad --seeds 0 1 2 --consistency 0.05 --out screen.jsonl
"""

import sys
import warnings
from collections import deque

import torch
from scvi import REGISTRY_KEYS

sys.path.insert(0, "benchmarks")
sys.path.insert(0, "benchmarks/results/quality/gene_panel/mild")
import trilemma
from screen_panel import headline_scores, record_row, screen_arguments, screen_runs

from sctrilemma._constants import SCT_MODULE_KEYS
from sctrilemma.module import SCTrilemmaModule

warnings.filterwarnings("ignore")
RECENT_DISAGREEMENT: deque = deque(maxlen=50)


def view_disagreement(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """Mean squared distance between two views' embeddings ``(batch, d)`` over their total variance across the batch."""
    distance = (first - second).square().sum(-1).mean()
    spread = first.var(0, unbiased=False).sum() + second.var(0, unbiased=False).sum()
    return distance / spread.clamp_min(1e-8)


def charge_view_disagreement(weight: float) -> None:
    """Add ``weight`` times the views' disagreement, in units of the mean reconstruction loss, to the training loss."""
    shipped = SCTrilemmaModule.loss

    def loss_with_second_view(self, tensors, inference_outputs, generative_outputs, kl_weight=1.0):
        output = shipped(self, tensors, inference_outputs, generative_outputs, kl_weight)
        if not self.training:
            return output
        first = inference_outputs[SCT_MODULE_KEYS.QZ_TOKENS_MEAN_KEY].mean(-2)
        second = self._regular_inference(tensors[REGISTRY_KEYS.X_KEY])[SCT_MODULE_KEYS.QZ_TOKENS_MEAN_KEY].mean(-2)
        disagreement = view_disagreement(first, second)
        RECENT_DISAGREEMENT.append(float(disagreement.detach()))
        scale = output.reconstruction_loss_sum.detach() / output.n_obs_minibatch
        object.__setattr__(output, "loss", output.loss + weight * scale * disagreement)
        return output

    SCTrilemmaModule.loss = loss_with_second_view


if __name__ == "__main__":
    parser = screen_arguments()
    parser.add_argument("--consistency", type=float, required=True, help="0: the preset")
    args = parser.parse_args()
    if args.consistency > 0:
        charge_view_disagreement(args.consistency)
    for name, seed, adata, keys, role in screen_runs(args.data, args.seeds):
        RECENT_DISAGREEMENT.clear()
        model, budget = trilemma.train_sctrilemma(adata.copy(), keys[1], 240.0, seed, None, None, role)
        scores = headline_scores(adata, model, seed, *keys)
        disagreement = sum(RECENT_DISAGREEMENT) / len(RECENT_DISAGREEMENT) if RECENT_DISAGREEMENT else None
        row = {
            "data": name,
            "seed": seed,
            "consistency": args.consistency,
            "disagreement": disagreement,
            **budget,
            **scores,
        }
        record_row(row, args.out)
