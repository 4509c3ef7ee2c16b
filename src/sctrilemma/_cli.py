"""Command-line interface: ``sctrilemma train``, ``sctrilemma embed`` and ``sctrilemma example``."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

EMBEDDING_KEY = "X_sctrilemma"


def _train(args: argparse.Namespace) -> None:
    import anndata as ad

    from sctrilemma import SCTrilemma

    adata = ad.read_h5ad(args.input)
    SCTrilemma.setup_anndata(adata, layer=args.layer, donor_key=args.donor_key, dataset_key=args.dataset_key)
    model = SCTrilemma(adata, preset=args.preset)
    model.train(max_epochs=args.max_epochs, max_steps=args.max_steps, batch_size=args.batch_size)
    model.save(args.out, overwrite=args.overwrite)
    print(f"Saved the trained model to {args.out}")


def _embed(args: argparse.Namespace) -> None:
    import anndata as ad

    from sctrilemma import SCTrilemma

    out = ad.read_h5ad(args.input)
    # Zero-shot: the query may have another gene set (IDs or symbols) and unseen donors; `out` is not modified.
    model = SCTrilemma.load_query_data(out, args.model, layer=args.layer)
    embedding = model.get_latent_representation(batch_size=args.batch_size)
    out.obsm[EMBEDDING_KEY] = embedding
    out.write_h5ad(args.out, compression="gzip")
    print(f"Wrote {embedding.shape[0]} x {embedding.shape[1]} embeddings to {args.out} (.obsm[{EMBEDDING_KEY!r}])")


def _example(args: argparse.Namespace) -> None:
    import scvi

    from sctrilemma import SCTrilemma
    from sctrilemma.data import load_example
    from sctrilemma.plotting import umap_figure

    scvi.settings.seed = args.seed
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    adata = load_example()
    SCTrilemma.setup_anndata(adata, donor_key="donor")
    model = SCTrilemma(adata, preset="small")
    model.train(max_epochs=args.max_epochs, batch_size=128)
    model.save(out / "model", overwrite=True)
    result = load_example()
    result.obsm[EMBEDDING_KEY] = model.get_latent_representation(adata)
    figure = umap_figure(result, EMBEDDING_KEY, color=("cell_type", "donor"))
    figure.savefig(out / "umap.png", dpi=120, bbox_inches="tight")
    result.write_h5ad(out / "example_embedded.h5ad", compression="gzip")
    print(f"Wrote {out / 'example_embedded.h5ad'} (.obsm[{EMBEDDING_KEY!r}]), {out / 'umap.png'} and {out / 'model'}")


def _pairs(values: list[str] | None, option: str) -> dict[str, str]:
    pairs = {}
    for value in values or []:
        if "=" not in value:
            raise ValueError(f"{option} expects NAME=VALUE, got {value!r}.")
        name, _, target = value.partition("=")
        pairs[name] = target
    return pairs


def _score(args: argparse.Namespace) -> None:
    import anndata as ad

    from sctrilemma.benchmark import Scorecard

    adata = ad.read_h5ad(args.input)
    scorecard = Scorecard(
        adata,
        embedding_keys=args.embedding_key,
        label_key=args.label_key,
        donor_key=args.donor_key,
        condition_key=args.condition_key,
        reconstruction_keys=_pairs(args.reconstruction, "--reconstruction"),
        counts_layer=args.layer,
        gene_sets=_pairs(args.gene_sets, "--gene-sets"),
        symbol_key=args.symbol_key,
        n_repeats=args.n_repeats,
        seed=args.seed,
    )
    scorecard.benchmark()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    scorecard.get_results().to_csv(out / "scorecard.csv", index=False)
    (out / "scorecard.md").write_text(scorecard.to_markdown() + "\n")
    scorecard.plot_results(out / "scorecard.png")
    print(scorecard.to_markdown())
    print(f"Wrote {out / 'scorecard.csv'}, {out / 'scorecard.md'} and {out / 'scorecard.png'}")


def build_parser() -> argparse.ArgumentParser:
    """The ``sctrilemma`` argument parser."""
    parser = argparse.ArgumentParser(prog="sctrilemma", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    commands = parser.add_subparsers(dest="command", required=True)

    train = commands.add_parser("train", help="train a model on an .h5ad of raw counts and save it")
    train.add_argument("input", help="input .h5ad with raw counts")
    train.add_argument("--out", required=True, help="directory for the trained model")
    train.add_argument("--layer", default=None, help="layer with raw counts (default: X)")
    train.add_argument("--donor-key", default=None, help="obs column with donors")
    train.add_argument("--dataset-key", default=None, help="obs column with datasets")
    train.add_argument("--preset", default="small", choices=["small", "paper"], help="model size (default: small)")
    train.add_argument("--max-epochs", type=int, default=None, help="training epochs")
    train.add_argument("--max-steps", type=int, default=None, help="training steps (overrides --max-epochs)")
    train.add_argument("--batch-size", type=int, default=256, help="cells per step")
    train.add_argument("--overwrite", action="store_true", help="replace an existing model directory")
    train.set_defaults(func=_train)

    embed = commands.add_parser("embed", help="embed an .h5ad with a saved model")
    embed.add_argument("input", help="input .h5ad with raw counts and the model's genes")
    embed.add_argument("--model", required=True, help="directory of a saved model")
    embed.add_argument("--out", required=True, help="output .h5ad (input plus .obsm['X_sctrilemma'])")
    embed.add_argument("--layer", default=None, help="layer with raw counts (default: the model's, else X)")
    embed.add_argument("--batch-size", type=int, default=None, help="cells per batch")
    embed.set_defaults(func=_embed)

    score = commands.add_parser("score", help="score embeddings on identity, context invariance and fidelity")
    score.add_argument("input", help="input .h5ad with raw counts and embeddings in .obsm")
    score.add_argument("--embedding-key", nargs="+", required=True, help=".obsm keys to score (one per method)")
    score.add_argument("--label-key", required=True, help="obs column with cell types")
    score.add_argument("--donor-key", required=True, help="obs column with donors")
    score.add_argument("--condition-key", default=None, help="obs column with a disease state or condition")
    score.add_argument("--layer", default=None, help="layer with raw counts (default: X)")
    score.add_argument(
        "--reconstruction", nargs="*", default=None, metavar="EMBEDDING=LAYER", help="reconstructed counts per method"
    )
    score.add_argument("--gene-sets", nargs="*", default=None, metavar="NAME=GMT", help=".gmt libraries for pathways")
    score.add_argument("--symbol-key", default=None, help="var column with gene symbols (default: var_names)")
    score.add_argument("--n-repeats", type=int, default=20, help="stratified samples (default: 20)")
    score.add_argument("--seed", type=int, default=42, help="sampling seed (default: 42)")
    score.add_argument("--out", required=True, help="output directory for scorecard.csv/.md/.png")
    score.set_defaults(func=_score)

    example = commands.add_parser("example", help="train on the shipped example data; write embeddings and a UMAP")
    example.add_argument("--out", default="outputs", help="output directory (default: outputs)")
    example.add_argument("--max-epochs", type=int, default=20, help="training epochs (default: 20)")
    example.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    example.set_defaults(func=_example)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    try:
        args.func(args)
    except (ValueError, FileNotFoundError, KeyError) as error:
        print(f"sctrilemma {args.command}: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
