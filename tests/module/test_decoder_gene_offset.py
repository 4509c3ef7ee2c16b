"""The decoder's own gene offsets (``decoder_gene_offset``): what trains what, the start, old models, evaluation."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import torch

from sctrilemma.module import SCTrilemmaModule

if TYPE_CHECKING:
    import anndata as ad


def _module(adata: ad.AnnData, tiny: dict, seed: int = 0, **kwargs) -> SCTrilemmaModule:
    torch.manual_seed(seed)
    sizes = {**tiny, "crop_size": 64, "n_decoder_targets": 128}
    return SCTrilemmaModule(adata.n_vars, **sizes, prior="normal", **kwargs)


def _gradient_rows(module: SCTrilemmaModule, x: torch.Tensor) -> dict[str, set[int]]:
    """Rows of the gene tables with a gradient after one training loss, and the genes the encoder read."""
    torch.manual_seed(1)
    inference, _, loss_output = module.forward({"X": x})
    loss_output.loss.backward()
    rows = {"encoder_genes": set(inference["crop"].genes[inference["crop"].mask].tolist())}
    for name, table in (("gene_embedding", module.gene_embedding), ("decoder_gene_offset", module.decoder.gene_offset)):
        grad = None if table is None else table.weight.grad
        rows[name] = set() if grad is None else set(torch.nonzero(grad.abs().sum(1)).ravel().tolist())
    return rows


def _assert_decodes_alike(reference: SCTrilemmaModule, other: SCTrilemmaModule, x: torch.Tensor, n_genes: int) -> None:
    """``other`` decodes ``reference``'s latent tokens of the cells ``x`` to the same logits as ``reference``."""
    with torch.no_grad():
        out = reference.inference(x)
        genes = torch.arange(n_genes)
        torch.testing.assert_close(
            other.decode(out["z_tokens"], out["z"], genes), reference.decode(out["z_tokens"], out["z"], genes)
        )


def test_offsets_keep_the_decoders_gradient_out_of_the_shared_table(
    small_adata: ad.AnnData, counts: torch.Tensor, tiny: dict
) -> None:
    """With offsets only the encoder trains the shared table; the decoder trains its offsets (targets beyond the crop)."""
    x = counts[:16]
    shared = _gradient_rows(_module(small_adata, tiny, decoder_gene_offset=False).train(), x)
    own = _gradient_rows(_module(small_adata, tiny, decoder_gene_offset=True).train(), x)
    assert shared["decoder_gene_offset"] == set()
    assert shared["gene_embedding"] - shared["encoder_genes"], "without offsets the decoder trains the shared table"
    assert own["gene_embedding"] <= own["encoder_genes"]
    assert len(own["gene_embedding"]) > 0.5 * len(own["encoder_genes"])
    assert own["decoder_gene_offset"] - own["encoder_genes"], "the decoder's targets beyond the crop train offsets"


def test_offsets_start_at_zero_and_change_no_other_start(
    small_adata: ad.AnnData, counts: torch.Tensor, tiny: dict
) -> None:
    """Adding the offsets draws no random number and leaves the model's function at the start unchanged."""
    without = _module(small_adata, tiny, decoder_gene_offset=False).eval()
    with_offsets = _module(small_adata, tiny, decoder_gene_offset=True).eval()
    offsets = with_offsets.state_dict().pop("decoder.gene_offset.weight")
    assert torch.count_nonzero(offsets) == 0
    shared = without.state_dict()
    assert set(with_offsets.state_dict()) - set(shared) == {"decoder.gene_offset.weight"}
    for name, value in shared.items():
        torch.testing.assert_close(with_offsets.state_dict()[name], value, rtol=0, atol=0)
    _assert_decodes_alike(without, with_offsets, counts[:8], n_genes=200)


@pytest.mark.parametrize(("init", "expected"), [("normal", True), ("pca", False)])
def test_auto_follows_the_gene_embeddings_start(small_adata: ad.AnnData, tiny: dict, init: str, expected: bool) -> None:
    module = _module(small_adata, tiny, decoder_gene_offset="auto", gene_embedding_init=init)
    assert (module.decoder.gene_offset is not None) == expected


@pytest.mark.parametrize("value", ["yes", None, 1.5])
def test_invalid_value_raises(small_adata: ad.AnnData, tiny: dict, value) -> None:
    with pytest.raises(ValueError, match="decoder_gene_offset"):
        _module(small_adata, tiny, decoder_gene_offset=value)


def test_fast_evaluation_decoder_reads_the_offsets(small_adata: ad.AnnData, counts: torch.Tensor, tiny: dict) -> None:
    """The evaluation decoder's fast path computes the plain decoder with non-zero offsets, which change it."""
    module = _module(small_adata, tiny, decoder_gene_offset=True).eval()
    module.precision = "fp32"
    x = counts[:8]
    genes = torch.arange(300)
    with torch.no_grad():
        out = module.inference(x)
        before = module.decode(out["z_tokens"], out["z"], genes)
        module.decoder.gene_offset.weight.normal_()
        fast = module.decode(out["z_tokens"], out["z"], genes)
        plain = module.decoder._decode_plain(out["z_tokens"], out["z"], genes, module.gene_embedding)
    assert (fast - before).abs().max() > 0.1
    torch.testing.assert_close(fast, plain, rtol=1e-5, atol=1e-5)
