"""The CUDA path: bf16-mixed training, bf16 embedding and reconstruction, fused attention, the fast evaluation blocks.

Every test here is marked ``gpu`` and skipped (with its reason in pytest's summary) where no CUDA device exists.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from sctrilemma import SCTrilemma
from sctrilemma.module import SCTrilemmaModule, expressed_crop

pytestmark = pytest.mark.gpu


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@pytest.fixture
def trained_on_cuda(small_adata, tiny) -> SCTrilemma:
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    model = SCTrilemma(small_adata, **tiny, preset="paper")
    model.train(max_steps=30, batch_size=64, accelerator="gpu", devices=1, enable_progress_bar=False)
    return model


def test_training_runs_bf16_mixed_on_cuda(trained_on_cuda: SCTrilemma) -> None:
    model = trained_on_cuda
    assert model.device.type == "cuda"
    expected = "bf16-mixed" if torch.cuda.is_bf16_supported() else "32-true"
    assert model.trainer.precision == expected
    losses = model.history["train_loss"].to_numpy(dtype=float)
    assert np.isfinite(losses).all()


def test_bf16_embedding_and_expression_match_fp32_on_cuda(trained_on_cuda: SCTrilemma) -> None:
    model = trained_on_cuda
    assert model.precision == "auto"  # bf16 autocast on a CUDA device with bf16 support
    cells = np.arange(100)
    bf16 = model.get_latent_representation(indices=cells)
    expression_bf16 = model.get_normalized_expression(indices=cells[:20], library_size=1.0, return_numpy=True)
    model.precision = "fp32"
    fp32 = model.get_latent_representation(indices=cells)
    expression = model.get_normalized_expression(indices=cells[:20], library_size=1.0, return_numpy=True)
    if torch.cuda.is_bf16_supported():
        assert not np.array_equal(bf16, fp32)  # bf16 really ran
    centre = fp32.mean(0)
    assert _cosine(bf16, fp32).min() > 0.999
    assert _cosine(bf16 - centre, fp32 - centre).min() > 0.99
    assert _cosine(expression_bf16, expression).min() > 0.999
    # The same model in fp32 on the CPU embeds as on the GPU.
    model.to_device("cpu")
    on_cpu = model.get_latent_representation(indices=cells)
    assert _cosine(on_cpu - centre, fp32 - centre).min() > 0.9999


def test_attention_runs_on_a_fused_kernel(small_adata, tiny) -> None:
    """With the math fallback switched off, training and evaluation still run: a fused kernel served them."""
    module = SCTrilemmaModule(small_adata.n_vars, **tiny, prior="normal").cuda()
    x = torch.as_tensor(small_adata.X[:32].toarray(), dtype=torch.float32, device="cuda")
    tensors = {"X": x, "batch": torch.zeros(32, 1, device="cuda"), "donor": torch.zeros(32, 1, device="cuda")}
    tensors["dataset"] = torch.zeros(32, 1, device="cuda")
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            _, _, losses = module.forward(tensors)
            losses.loss.backward()
        module.eval()
        with torch.no_grad():
            out = module.inference(x)
    assert torch.isfinite(losses.loss)
    assert torch.isfinite(out["qz"].loc).all()


def test_fast_evaluation_matches_the_plain_path_on_cuda(small_adata, tiny, perturb_norms_and_biases) -> None:
    torch.manual_seed(0)
    module = SCTrilemmaModule(small_adata.n_vars, **{**tiny, "n_encoder_layers": 2}, prior="normal")
    module = perturb_norms_and_biases(module).cuda().eval()
    module.precision = "fp32"
    x = torch.as_tensor(small_adata.X[:48].toarray(), dtype=torch.float32, device="cuda")
    crop = expressed_crop(x, 1024)
    library = x.sum(1, keepdim=True)
    genes = torch.arange(300, device="cuda")
    with torch.no_grad():
        fast_mean = module.encode(crop, library)[0]
        out = module.inference(x)
        fast_logits = module.decode(out["z_tokens"], out["z"], genes)
        plain_logits = module.decoder._decode_plain(out["z_tokens"], out["z"], genes, module.gene_embedding)
    with torch.enable_grad():  # autograd on selects the plain (training) paths
        plain_mean = module.encode(crop, library)[0].detach()
    torch.testing.assert_close(fast_mean, plain_mean, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(fast_logits, plain_logits, rtol=1e-4, atol=1e-4)
