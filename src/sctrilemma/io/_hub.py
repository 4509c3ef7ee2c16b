"""scvi-hub files for a saved model, and pulling a reference from a Hugging Face repository.

scvi-tools' :class:`~scvi.hub.HubModel` reads a model directory's metadata and model card and loads the model with
the class the metadata names, so a directory written by :meth:`~sctrilemma.SCTrilemma.save` plus these two files
loads with ``HubModel(directory).load_model(adata=query)``. scvi-hub's own helpers (``HubMetadata.from_dir``,
``HubModelCardHelper.from_dir``) and its pull read or fetch ``model.pt``; :func:`write_hub_files` and
:func:`pull_hub_reference` do the same for the safe ``model.safetensors`` format. Needs ``huggingface_hub``
(``pip install "sctrilemma[hub]"``).

To publish a reference, upload its whole directory with ``huggingface_hub``, e.g.
``HfApi().upload_folder(folder_path=model_dir, repo_id="owner/name")`` after :func:`write_hub_files`. scvi-hub's
``HubModel.push_to_huggingface_hub`` uploads the weights only with ``push_anndata=False``, and then leaves out every
``.h5ad`` file, the embedded reference cells (``reference_cells.h5ad``) included.
"""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sctrilemma.io._reference import read_reference

if TYPE_CHECKING:
    import os

    from scvi.hub import HubModel

# What a pull fetches: the weights, scvi-hub's metadata and model card, the figures, the embedded reference cells
# (for label transfer), and the training data if the repository has it and it is asked for.
HUB_FILES = ("model.safetensors", "_scvi_required_metadata.json", "README.md", "metrics.json", "reference_cells.h5ad")
HUB_DATA_FILES = ("adata.h5ad",)


def write_hub_files(
    model_dir: str | os.PathLike,
    *,
    license_info: str,
    description: str,
    training_data: str,
    intended_use: str,
    references: str = "",
    evaluation: str = "",
    metrics: dict[str, Any] | None = None,
    tissues: list[str] | None = None,
    training_data_url: str | None = None,
    training_code_url: str | None = None,
    overwrite: bool = False,
) -> HubModel:
    """Write scvi-hub's metadata and model card beside a saved model, so that :class:`~scvi.hub.HubModel` loads it.

    Parameters
    ----------
    model_dir
        A directory written by :meth:`~sctrilemma.SCTrilemma.save` (``model.safetensors``).
    license_info
        The licence of the weights, as Hugging Face names it (e.g. ``"cc-by-4.0"``).
    description
        What the model is, for the card's first section.
    training_data
        The cells it was trained on: studies, donors, chemistries, cell counts and their provenance.
    intended_use
        What the model is for, and what it is not for.
    references
        Citations, for the card.
    evaluation
        Markdown (e.g. a benchmark's table) for the card's evaluation section; none when empty.
    metrics
        Figures to report (written to ``metrics.json`` and shown on the card).
    tissues
        Tissues of the training data.
    training_data_url, training_code_url
        Where the training data and the script that trained the model can be found.
    overwrite
        Replace existing hub files.

    Returns
    -------
    The :class:`~scvi.hub.HubModel` of the directory; its ``save()`` has been called.
    """
    from huggingface_hub import ModelCard, ModelCardData
    from scvi.hub import HubMetadata, HubModel
    from scvi.hub._constants import _SCVI_HUB

    model_dir = Path(model_dir)
    metadata = read_reference(model_dir).metadata
    registry, model_name = metadata["registry"], metadata["model_name"]
    anndata_version = version("anndata")
    hub_metadata = HubMetadata(
        scvi_version=registry["scvi_version"],
        anndata_version=anndata_version,
        model_cls_name=model_name,
        training_data_url=training_data_url,
        model_parent_module="sctrilemma",
    )
    tags = [
        "biology",
        "genomics",
        "single-cell",
        "sctrilemma",
        _SCVI_HUB.MODEL_CLS_NAME_TAG.format(model_name),
        _SCVI_HUB.SCVI_VERSION_TAG.format(registry["scvi_version"]),
        _SCVI_HUB.ANNDATA_VERSION_TAG.format(anndata_version),
        _SCVI_HUB.MODALITY_TAG.format("rna"),
        *(_SCVI_HUB.TISSUE_TAG.format(tissue) for tissue in tissues or []),
    ]
    header = ModelCardData(license=license_info, library_name=_SCVI_HUB.HF_LIBRARY_NAME, tags=tags)
    texts = {"description": description, "training_data": training_data, "intended_use": intended_use,
             "references": references, "evaluation": evaluation}  # fmt: skip
    card = ModelCard(_card_text(header.to_yaml(), metadata, texts, metrics, training_data_url, training_code_url))
    hub_model = HubModel(str(model_dir), metadata=hub_metadata, model_card=card)
    hub_model.save(overwrite=overwrite)
    if metrics is not None:
        (model_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
    return hub_model


def _card_text(
    header: str,
    metadata: dict[str, Any],
    texts: dict[str, str],
    metrics: dict[str, Any] | None,
    training_data_url: str | None,
    training_code_url: str | None,
) -> str:
    """The model card's Markdown: the YAML header, then what a user needs to judge and load the model.

    ``texts`` holds the card's prose: ``description``, ``training_data``, ``intended_use``, ``references`` and
    ``evaluation``.
    """
    registry = metadata["registry"]
    n_genes = len(metadata["genes"])
    labels = "labels = model.predict_labels()\n" if metadata.get("label_classifier") else ""
    sections = [
        f"---\n{header}\n---",
        f"# {metadata['model_name']} reference (sctrilemma)\n\n{texts['description']}",
        f"## Training data\n\n{texts['training_data']}"
        + (f"\n\nData: {training_data_url}" if training_data_url else ""),
        f"## Intended use\n\n{texts['intended_use']}",
        "## Loading\n\n```python\nimport sctrilemma\n\n"
        "hub_model = sctrilemma.io.pull_hub_reference(REPO, revision=REVISION)\n"
        "model = sctrilemma.SCTrilemma.load_query_data(query_adata, hub_model.local_dir)\n"
        f'query_adata.obsm["X_sctrilemma"] = model.get_latent_representation()\n{labels}```',
        f"## Model\n\n{n_genes:,} genes; set-up arguments `{json.dumps(registry['setup_args'])}`; configuration\n\n"
        f"```json\n{json.dumps(metadata['config'], indent=2)}\n```\n\nVersions: `{json.dumps(metadata['versions'])}`.",
    ]
    if texts["evaluation"]:
        sections.append(f"## Evaluation\n\n{texts['evaluation']}")
    if metrics:
        sections.append(f"## Figures\n\n```json\n{json.dumps(metrics, indent=2)}\n```")
    if training_code_url:
        sections.append(f"## Training code\n\n{training_code_url}")
    sections.append(f"## References\n\n{texts['references'] or 'scTrilemma (see the sctrilemma documentation).'}")
    return "\n\n".join(sections) + "\n"


def pull_hub_reference(
    repo_name: str,
    *,
    revision: str | None = None,
    cache_dir: str | os.PathLike | None = None,
    pull_anndata: bool = False,
    **snapshot_kwargs,
) -> HubModel:
    """Fetch a reference saved in the safe format from a Hugging Face repository, as a :class:`~scvi.hub.HubModel`.

    Downloads ``model.safetensors``, scvi-hub's metadata, the model card, ``metrics.json``, the embedded reference
    cells ``reference_cells.h5ad`` where the repository has them, and (``pull_anndata=True``) the training data.
    :meth:`scvi.hub.HubModel.pull_from_huggingface_hub` would leave the weights behind: it fetches ``model.pt``.
    Then ``hub_model.load_model(adata=query)`` embeds a query as :meth:`~sctrilemma.SCTrilemma.load_query_data`
    does.

    Parameters
    ----------
    repo_name
        The repository, ``"owner/name"``.
    revision
        A branch, tag or commit; pin one for reproducible results.
    cache_dir
        Where Hugging Face caches the files.
    pull_anndata
        Also fetch ``adata.h5ad`` if the repository has one.
    **snapshot_kwargs
        Passed to ``huggingface_hub.snapshot_download`` (e.g. ``token``, ``local_dir``).
    """
    from huggingface_hub import snapshot_download
    from scvi.hub import HubModel

    patterns = list(HUB_FILES) + (list(HUB_DATA_FILES) if pull_anndata else [])
    folder = snapshot_download(
        repo_id=repo_name, revision=revision, cache_dir=cache_dir, allow_patterns=patterns, **snapshot_kwargs
    )
    if not (Path(folder) / "model.safetensors").is_file():
        raise ValueError(
            f"{repo_name!r} has no model.safetensors: it is not a sctrilemma reference saved with `model.save`. "
            "For a scvi-tools model.pt use `scvi.hub.HubModel.pull_from_huggingface_hub`."
        )
    return HubModel(str(folder), repo_name=repo_name)
