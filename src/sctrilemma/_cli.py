"""Command-line interface: ``sctrilemma train``, ``embed``, ``score`` and ``example``.

This module imports only the standard library at start-up: ``--help``, argument errors and checks of
the input and output paths answer at once. torch, scvi-tools and anndata are imported when a command
runs.
"""

from __future__ import annotations

import argparse
import logging
import sys

from sctrilemma._cli_checks import (
    EMBEDDING_KEY,
    TIME_BUDGET_MAX_EPOCHS,
    CommandError,
    check_dir_out,
    check_file_out,
    check_h5ad,
    check_h5ad_keys,
    check_model_dir,
    check_model_out,
    check_readable_file,
    read_h5ad,
)
from sctrilemma._cli_types import MAX_TIME_FORMAT, positive_int, seed, time_budget, unit_fraction


def _pairs(values: list[str] | None, option: str) -> dict[str, str]:
    pairs = {}
    for value in values or []:
        if "=" not in value:
            raise CommandError(f"{option} expects NAME=VALUE, got {value!r}.")
        name, _, target = value.partition("=")
        pairs[name] = target
    return pairs


# ---------------------------------------------------------------------- commands (heavy imports inside)
def _train(args: argparse.Namespace) -> None:
    source = check_h5ad(args.input)
    out = check_model_out(args.out, args.overwrite)
    check_h5ad_keys(source, {"--donor-key": args.donor_key, "--dataset-key": args.dataset_key})
    pretrained = None if args.pretrained is None else check_model_dir(args.pretrained, "--pretrained")
    if pretrained is not None and args.preset is not None:
        raise CommandError("--preset does not apply with --pretrained: the reference fixes the model; drop one.")
    import scvi

    from sctrilemma import SCTrilemma

    scvi.settings.seed = args.seed
    adata = read_h5ad(source)
    if pretrained is not None:  # the reference's set-up, with the user's donor and dataset columns
        keys = {"donor_key": args.donor_key, "dataset_key": args.dataset_key}
        model = SCTrilemma.from_pretrained(adata, pretrained, layer=args.layer, **keys)
    else:
        SCTrilemma.setup_anndata(adata, layer=args.layer, donor_key=args.donor_key, dataset_key=args.dataset_key)
        model = SCTrilemma(adata) if args.preset is None else SCTrilemma(adata, preset=args.preset)
    max_epochs = args.max_epochs
    time_budget = {}
    if args.max_time is not None:
        time_budget["max_time"] = args.max_time
        if max_epochs is None and args.max_steps is None:
            max_epochs = TIME_BUDGET_MAX_EPOCHS
    model.train(max_epochs=max_epochs, max_steps=args.max_steps, batch_size=args.batch_size, **time_budget)
    model.save(out, overwrite=args.overwrite)
    print(f"Saved the trained model to {out}")


# Columns of predict_labels written to .obs as sctrilemma_<column> by `sctrilemma embed`.
LABEL_COLUMNS = ("prediction", "probability", "uncertainty", "is_unknown")


def _embed(args: argparse.Namespace) -> None:
    source = check_h5ad(args.input)
    model_dir = check_model_dir(args.model)
    target = check_file_out(args.out)
    from sctrilemma import SCTrilemma

    out = read_h5ad(source)
    # Zero-shot: the query may have another gene set (IDs or symbols) and unseen donors; `out` is not modified.
    model = SCTrilemma.load_query_data(out, model_dir, layer=args.layer, min_overlap=args.min_overlap)
    embedding = model.get_latent_representation(batch_size=args.batch_size)
    out.obsm[EMBEDDING_KEY] = embedding
    labelled = ""
    if model.label_classifier_ is not None:  # a reference with a label classifier labels the cells too
        labels = model.predict_labels(batch_size=args.batch_size)
        for column in LABEL_COLUMNS:
            out.obs[f"sctrilemma_{column}"] = labels[column].to_numpy()
        unknown = labels["is_unknown"].mean()
        labelled = f" and labels to .obs['sctrilemma_prediction'] ({100 * unknown:.1f}% unknown)"
    out.write_h5ad(target, compression="gzip")
    print(
        f"Wrote {embedding.shape[0]} x {embedding.shape[1]} embeddings to {target} (.obsm[{EMBEDDING_KEY!r}]){labelled}"
    )


def _score(args: argparse.Namespace) -> None:
    source = check_h5ad(args.input)
    reconstruction = _pairs(args.reconstruction, "--reconstruction")
    gene_sets = _pairs(args.gene_sets, "--gene-sets")
    for name, path in gene_sets.items():
        check_readable_file(path, f"--gene-sets {name}=", "expected a gene-set library in GMT format")
    out = check_dir_out(args.out)
    obs_keys = {"--label-key": args.label_key, "--donor-key": args.donor_key, "--condition-key": args.condition_key}
    check_h5ad_keys(source, obs_keys)
    check_h5ad_keys(source, {"--symbol-key": args.symbol_key}, group="var")
    from sctrilemma.benchmark import Scorecard

    adata = read_h5ad(source)
    scorecard = Scorecard(
        adata,
        embedding_keys=args.embedding_key,
        label_key=args.label_key,
        donor_key=args.donor_key,
        condition_key=args.condition_key,
        reconstruction_keys=reconstruction,
        counts_layer=args.layer,
        gene_sets=gene_sets,
        symbol_key=args.symbol_key,
        n_repeats=args.n_repeats,
        seed=args.seed,
    )
    scorecard.benchmark()
    out.mkdir(parents=True, exist_ok=True)
    scorecard.get_results().to_csv(out / "scorecard.csv", index=False)
    (out / "scorecard.md").write_text(scorecard.to_markdown() + "\n")
    scorecard.plot_results(out / "scorecard.png")
    print(scorecard.to_markdown())
    print(f"Wrote {out / 'scorecard.csv'}, {out / 'scorecard.md'} and {out / 'scorecard.png'}")


def _example(args: argparse.Namespace) -> None:
    out = check_dir_out(args.out)
    import scvi

    from sctrilemma import SCTrilemma
    from sctrilemma.data import load_example
    from sctrilemma.metrics import nmi_ari_kmeans
    from sctrilemma.plotting import umap_figure

    scvi.settings.seed = args.seed
    out.mkdir(parents=True, exist_ok=True)
    adata = load_example()
    SCTrilemma.setup_anndata(adata, donor_key="donor")
    model = SCTrilemma(adata, preset="small")
    model.train(max_epochs=args.max_epochs)
    model.save(out / "model", overwrite=True)
    result = load_example()
    result.obsm[EMBEDDING_KEY] = model.get_latent_representation(adata)
    figure = umap_figure(result, EMBEDDING_KEY, color=("cell_type", "donor"))
    figure.savefig(out / "umap.png", dpi=120, bbox_inches="tight")
    result.write_h5ad(out / "example_embedded.h5ad", compression="gzip")
    print(f"Wrote {out / 'example_embedded.h5ad'} (.obsm[{EMBEDDING_KEY!r}]), {out / 'umap.png'} and {out / 'model'}")
    quality = nmi_ari_kmeans(result.obsm[EMBEDDING_KEY], result.obs["cell_type"].to_numpy())
    print(
        f"k-means NMI {quality['nmi']:.3f}, ARI {quality['ari']:.3f} of the embedding against obs['cell_type'] "
        "(mean of 20 seeded k-means runs, k = number of cell types)"
    )


# ---------------------------------------------------------------------- parser
class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows ``(default: ...)`` for options with a real default; ``None`` defaults are explained in the help text."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False or action.required or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    """The ``sctrilemma`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="sctrilemma",
        description="scTrilemma: train, embed with and score a gene-token Perceiver VAE for single-cell RNA-seq.",
        epilog="Run `sctrilemma COMMAND --help` for the options of a command.",
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    commands = parser.add_subparsers(dest="command", required=True, title="commands", metavar="COMMAND")

    def command(name: str, summary: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=summary, description=summary, formatter_class=_HelpFormatter)

    train = command("train", "train a model on an .h5ad of raw counts and save it")
    train.add_argument("input", help="input .h5ad with raw counts")
    train.add_argument("--out", required=True, help="directory for the trained model (checked before training)")
    train.add_argument("--overwrite", action="store_true", help="replace a model already saved in --out")
    train.add_argument("--layer", default=None, help="layer with raw counts (default: X)")
    train.add_argument("--donor-key", default=None, help="obs column with donors (default: one donor)")
    train.add_argument(
        "--dataset-key", default=None, help="obs column with studies or technologies (default: one dataset)"
    )
    train.add_argument(
        "--preset",
        default=None,
        choices=["small", "paper"],
        help="model size (default: small on every machine, as in SCTrilemma(adata); paper is the published model)",
    )
    train.add_argument(
        "--pretrained",
        default=None,
        metavar="DIR",
        help="start from the weights of a saved reference (`blood` for the shipped one) and fine-tune it on the input; "
        "the reference fixes the model's genes and size, so --preset does not apply",
    )
    train.add_argument(
        "--max-epochs",
        type=positive_int,
        default=None,
        help="training epochs (default with neither this nor --max-steps: 1,200 steps for the small preset, or one "
        "pass over the cells where that is longer; for the paper preset scVI's heuristic capped at 50 epochs, i.e. 50 "
        "up to 20,000 cells, fewer above)",
    )
    train.add_argument(
        "--max-steps", type=positive_int, default=None, help="training steps; overrides --max-epochs (default: unset)"
    )
    train.add_argument(
        "--max-time",
        type=time_budget,
        default=None,
        metavar="TIME",
        help=f"time budget for training: {MAX_TIME_FORMAT}; training stops when it is spent, or earlier at "
        f"--max-epochs or --max-steps if given (default: no budget; a budget without either trains up to "
        f"{TIME_BUDGET_MAX_EPOCHS:,} epochs, i.e. until the time is spent)",
    )
    train.add_argument(
        "--seed", type=seed, default=0, help="random seed (scvi.settings.seed), set before the model is built"
    )
    train.add_argument(
        "--batch-size",
        type=positive_int,
        default=None,
        help="cells per step (default: the preset's, 64 for small and 256 for paper)",
    )
    train.set_defaults(func=_train)

    embed = command("embed", "embed an .h5ad with a saved model (zero-shot; genes are matched to the model's)")
    embed.add_argument("input", help="input .h5ad with raw counts")
    embed.add_argument(
        "--model",
        required=True,
        help="directory of a saved model (from `sctrilemma train --out`), or `blood` for the shipped blood reference",
    )
    embed.add_argument(
        "--out",
        required=True,
        help="output .h5ad (input plus .obsm['X_sctrilemma'] and, with a labelled reference, .obs['sctrilemma_*'] "
        "labels: prediction, probability, uncertainty, is_unknown)",
    )
    embed.add_argument("--layer", default=None, help="layer with raw counts (default: the model's, else X)")
    embed.add_argument(
        "--min-overlap",
        type=unit_fraction,
        default=0.5,
        help="least share of the model's genes the input must hold (default 0.5; lower it for a targeted panel)",
    )
    embed.add_argument(
        "--batch-size",
        type=positive_int,
        default=None,
        help="cells per batch (default: scvi.settings.batch_size, 128)",
    )
    embed.set_defaults(func=_embed)

    score = command("score", "score embeddings on identity, context invariance and expression fidelity")
    score.add_argument("input", help="input .h5ad with raw counts and embeddings in .obsm")
    score.add_argument("--embedding-key", nargs="+", required=True, help=".obsm keys to score (one per method)")
    score.add_argument("--label-key", required=True, help="obs column with cell types")
    score.add_argument("--donor-key", required=True, help="obs column with donors")
    score.add_argument("--condition-key", default=None, help="obs column with a disease state (default: none)")
    score.add_argument("--layer", default=None, help="layer with raw counts (default: X)")
    score.add_argument(
        "--reconstruction",
        nargs="*",
        default=None,
        metavar="EMBEDDING=LAYER",
        help="reconstructed counts per method (default: none)",
    )
    score.add_argument(
        "--gene-sets", nargs="*", default=None, metavar="NAME=GMT", help=".gmt libraries for pathways (default: none)"
    )
    score.add_argument("--symbol-key", default=None, help="var column with gene symbols (default: var_names)")
    score.add_argument("--n-repeats", type=positive_int, default=20, help="stratified samples")
    score.add_argument("--seed", type=int, default=42, help="sampling seed")
    score.add_argument("--out", required=True, help="output directory for scorecard.csv/.md/.png")
    score.set_defaults(func=_score)

    example = command("example", "train on the shipped example data; write embeddings and a UMAP")
    example.add_argument("--out", default="outputs", help="output directory")
    example.add_argument("--max-epochs", type=positive_int, default=20, help="training epochs")
    example.add_argument("--seed", type=seed, default=0, help="random seed")
    example.set_defaults(func=_example)
    return parser


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 for bad arguments, inputs or data)."""
    args = build_parser().parse_args(argv)
    level = logging.INFO if args.verbose else logging.WARNING
    # The handler's own level also filters records that libraries' loggers set to INFO propagate to the root.
    handler = logging.StreamHandler()
    handler.setLevel(level)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])
    try:
        args.func(args)
    except (CommandError, ValueError, FileNotFoundError, KeyError) as error:
        print(f"sctrilemma {args.command}: error: {_one_line(error)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
