from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest
import torch

from sctrilemma.module import SCTrilemmaModule, expressed_crop, training_crop

if TYPE_CHECKING:
    import anndata as ad

PAPER_N_GENES = 61890
STRIDE = 10


@pytest.fixture(scope="module")
def paper_modules() -> dict[str, SCTrilemmaModule]:
    modules = {}
    for prior in ("pseudobulk", "normal"):
        torch.manual_seed(7)
        modules[prior] = SCTrilemmaModule(PAPER_N_GENES, prior=prior)
    return modules


def _tensors(adata: ad.AnnData) -> dict[str, torch.Tensor]:
    n = adata.n_obs
    donor = adata.obs["donor"].cat.codes.to_numpy().astype(np.float32)
    return {
        "X": torch.as_tensor(adata.X.toarray(), dtype=torch.float32),
        "batch": torch.zeros(n, 1),
        "donor": torch.as_tensor(donor)[:, None],
        "dataset": torch.zeros(n, 1),
    }


def _n_trainable(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def test_paper_parameter_count(paper_modules: dict[str, SCTrilemmaModule]) -> None:
    assert _n_trainable(paper_modules["pseudobulk"]) == 58_347_460
    assert _n_trainable(paper_modules["normal"]) == 58_313_668


def test_prior_does_not_change_other_initialisation(paper_modules: dict[str, SCTrilemmaModule], tiny: dict) -> None:
    pairs = [(paper_modules["pseudobulk"], paper_modules["normal"])]
    for seed in (0, 1):
        built = []
        for prior in ("pseudobulk", "normal"):
            torch.manual_seed(seed)
            built.append(SCTrilemmaModule(300, **tiny, prior=prior))
        pairs.append(tuple(built))
    for with_prior, without in pairs:
        shared = dict(without.named_parameters())
        extra = {name for name, _ in with_prior.named_parameters()} - set(shared)
        assert extra == {"prior.to_mean.weight", "prior.to_mean.bias", "prior.to_logvar.weight", "prior.to_logvar.bias"}
        for name, param in with_prior.named_parameters():
            if name in shared:
                assert torch.equal(param, shared[name]), name
    # Different seeds give different initialisations (the equality above is not vacuous).
    assert not torch.equal(pairs[1][0].gene_embedding.weight, pairs[2][0].gene_embedding.weight)


def test_module_prior_initialisation(paper_modules: dict[str, SCTrilemmaModule]) -> None:
    prior = paper_modules["pseudobulk"].prior
    assert prior.to_mean.weight.shape == (512, 32)
    assert abs(prior.to_mean.weight.std().item() - 0.01) < 5e-4
    assert torch.equal(prior.to_mean.bias, torch.zeros(512))
    assert torch.equal(prior.to_logvar.weight, torch.zeros(512, 32))
    assert torch.equal(prior.to_logvar.bias, torch.zeros(512))
    assert paper_modules["normal"].prior is None


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError, match="prior"):
        SCTrilemmaModule(10, prior="laplace")
    with pytest.raises(ValueError, match="n_latent_tokens"):
        SCTrilemmaModule(10, n_latent_tokens=0)


def test_embedding_is_mean_of_token_posterior_means(small_adata: ad.AnnData, tiny: dict) -> None:
    torch.manual_seed(0)
    module = SCTrilemmaModule(small_adata.n_vars, **tiny, prior="normal").eval()
    x = _tensors(small_adata)["X"][:64]
    with torch.no_grad():
        out = module.inference(x)
        again = module.inference(x)
    q_mean = out["qz_tokens_mean"]
    assert q_mean.shape == (64, tiny["n_latent_tokens"], tiny["n_hidden"])
    assert out["qz"].loc.shape == (64, tiny["n_hidden"])
    torch.testing.assert_close(out["qz"].loc, q_mean.mean(-2), rtol=1e-6, atol=1e-6)
    # Var of a mean of K independent Gaussians.
    expected_var = out["qz_tokens_logvar"].exp().mean(-2) / tiny["n_latent_tokens"]
    torch.testing.assert_close(out["qz"].scale.square(), expected_var, rtol=1e-5, atol=1e-7)
    # In eval mode z is the posterior mean, and two calls agree exactly.
    assert torch.equal(out["z_tokens"], q_mean)
    torch.testing.assert_close(out["z"], out["qz"].loc, rtol=1e-6, atol=1e-6)
    for key in ("z", "z_tokens", "qz_tokens_mean", "qz_tokens_logvar"):
        assert torch.equal(out[key], again[key]), key
    assert torch.equal(out["qz"].loc, again["qz"].loc)
    # Distinct cells get distinct embeddings.
    assert not torch.allclose(out["qz"].loc[0], out["qz"].loc[1])


def test_z_is_stochastic_in_train_mode(small_adata: ad.AnnData, tiny: dict) -> None:
    torch.manual_seed(0)
    module = SCTrilemmaModule(small_adata.n_vars, **{**tiny, "dropout_rate": 0.0}, prior="normal").train()
    x = _tensors(small_adata)["X"][:32]
    crop = training_crop(x, tiny["crop_size"], generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        a, b = module.inference(x, crop=crop), module.inference(x, crop=crop)
    assert torch.equal(a["qz_tokens_mean"], b["qz_tokens_mean"])  # same crop, no dropout: same posterior
    assert not torch.allclose(a["z_tokens"], b["z_tokens"])
    assert not torch.allclose(a["z_tokens"], a["qz_tokens_mean"])
    # The noise has the posterior scale: standardised residuals are roughly standard normal.
    eps = (a["z_tokens"] - a["qz_tokens_mean"]) / torch.exp(0.5 * a["qz_tokens_logvar"])
    assert abs(eps.mean().item()) < 0.1
    assert abs(eps.std().item() - 1.0) < 0.1
    # Training crops differ between calls when none is given.
    c, d = module.inference(x), module.inference(x)
    assert not torch.equal(c["crop"].genes, d["crop"].genes)


def test_loss_is_finite_and_decreases(small_adata: ad.AnnData, tiny: dict) -> None:
    torch.manual_seed(0)
    sizes = {**tiny, "crop_size": 128}
    module = SCTrilemmaModule(small_adata.n_vars, **sizes, prior="normal").train()
    x = _tensors(small_adata)["X"]
    optimizer = torch.optim.AdamW(module.parameters(), lr=5e-3)
    generator = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(200):
        batch = x[torch.randint(0, x.shape[0], (32,), generator=generator)]
        _, _, loss_output = module.forward({"X": batch})
        assert torch.isfinite(loss_output.loss)
        optimizer.zero_grad()
        loss_output.loss.backward()
        optimizer.step()
        losses.append(loss_output.loss.item())
    first, last = np.mean(losses[:20]), np.mean(losses[-20:])
    assert last < 0.9 * first, (first, last)


def _codes(n_groups: int, n_codes: int, seed: int) -> torch.Tensor:
    return torch.softmax(3.0 * torch.randn(n_groups, n_codes, generator=torch.Generator().manual_seed(seed)), dim=-1)


def test_pbcond_code_perturbations_only_change_the_kl(small_adata: ad.AnnData, tiny: dict) -> None:
    torch.manual_seed(0)
    module = SCTrilemmaModule(small_adata.n_vars, **tiny, prior="pseudobulk").eval()
    with torch.no_grad():  # a "trained" prior, far from its near-standard-normal initialisation
        for param in module.prior.parameters():
            param.normal_(0.0, 0.5)
    tensors = _tensors(small_adata[::5].copy())
    x = tensors["X"]
    n_groups, n_codes = 5, tiny["n_prior_codes"]
    keys = torch.arange(n_groups) + 0 * STRIDE  # dataset 0, donors 0..4
    target = training_crop(x, tiny["crop_size"], generator=torch.Generator().manual_seed(3))
    base = _codes(n_groups, n_codes, 0)
    tables = {
        "base": base,
        "shuffled": base[torch.tensor([2, 0, 4, 1, 3])],
        "zero": torch.zeros(n_groups, n_codes),
        "different": _codes(n_groups, n_codes, 1),
    }

    results = {}
    for name, table in tables.items():
        module.prior.set_group_codes(keys, table, STRIDE)
        with torch.no_grad():
            inference = module.inference(x)
            generative = module.generative(inference["z_tokens"], inference["z"], target)
            loss = module.loss(tensors, inference, generative)
            torch.manual_seed(11)
            _, _, full = module.forward(tensors)
        results[name] = {
            "embedding": inference["qz"].loc,
            "q_mean": inference["qz_tokens_mean"],
            "q_logvar": inference["qz_tokens_logvar"],
            "px_mean": generative["px"].mean,
            "reconstruction": loss.reconstruction_loss["reconstruction_loss"],
            "full_reconstruction": full.reconstruction_loss["reconstruction_loss"],
            "kl": loss.kl_local["kl_local"],
        }
    reference = results["base"]
    for name in ("shuffled", "zero", "different"):
        for key in ("embedding", "q_mean", "q_logvar", "px_mean", "reconstruction", "full_reconstruction"):
            assert torch.equal(results[name][key], reference[key]), (name, key)
        assert not torch.allclose(results[name]["kl"], reference["kl"], rtol=1e-3), name


def test_loss_kl_uses_the_group_prior(small_adata: ad.AnnData, tiny: dict) -> None:
    torch.manual_seed(0)
    module = SCTrilemmaModule(small_adata.n_vars, **tiny, prior="pseudobulk").eval()
    with torch.no_grad():
        for param in module.prior.parameters():
            param.normal_(0.0, 0.5)
    tensors = _tensors(small_adata[:40].copy())
    table = _codes(5, tiny["n_prior_codes"], 0)
    module.prior.set_group_codes(torch.arange(5) + 2 * STRIDE, table, STRIDE)  # dataset 2
    tensors["dataset"] = torch.full_like(tensors["dataset"], 2.0)
    with torch.no_grad():
        inference, generative, loss = module.forward(tensors)
    donor = tensors["donor"].long().ravel()
    p_mean, p_logvar = module.prior(table[donor])
    q = torch.distributions.Normal(inference["qz_tokens_mean"], torch.exp(0.5 * inference["qz_tokens_logvar"]))
    p = torch.distributions.Normal(p_mean.expand_as(q.loc), torch.exp(0.5 * p_logvar).expand_as(q.loc))
    expected = torch.distributions.kl_divergence(q, p).sum((-2, -1))
    torch.testing.assert_close(loss.kl_local["kl_local"], expected, rtol=1e-5, atol=1e-3)
    torch.testing.assert_close(
        loss.loss, (loss.reconstruction_loss["reconstruction_loss"] + expected).mean(), rtol=1e-5, atol=1e-3
    )


def test_missing_codes_raise(small_adata: ad.AnnData, tiny: dict) -> None:
    module = SCTrilemmaModule(small_adata.n_vars, **tiny, prior="pseudobulk").eval()
    tensors = _tensors(small_adata[:16].copy())
    with pytest.raises(RuntimeError, match="no pseudo-bulk codes"), torch.no_grad():
        module.forward(tensors)
    # Codes for other groups only: the cells' own group has no code.
    module.prior.set_group_codes(torch.tensor([STRIDE + 0, STRIDE + 1]), _codes(2, tiny["n_prior_codes"], 0), STRIDE)
    with pytest.raises(RuntimeError, match="without a pseudo-bulk code"), torch.no_grad():
        module.forward(tensors)


def _plain_encode(module: SCTrilemmaModule, crop, library: torch.Tensor) -> torch.Tensor:
    """The plain path (per-block context norm and projection, one padded batch) in evaluation."""
    latents = module.encoder._encode_plain(crop, library)
    batch, n_tokens, width = latents.shape
    latents = module.encoder.posterior_norm(latents.reshape(batch * n_tokens, width)).view(batch, n_tokens, width)
    return module.encoder.to_mean(latents)


@pytest.mark.parametrize("budget", [64, 16384])
@pytest.mark.parametrize("n_heads", [4, 32])  # absorbed attention (H K < d + K) and the projected fallback
def test_eval_encoder_matches_plain_path(
    small_adata: ad.AnnData,
    tiny: dict,
    budget: int,
    n_heads: int,
    monkeypatch: pytest.MonkeyPatch,
    perturb_norms_and_biases,
) -> None:
    """Grouping cells by length, bounded token groups and absorbed attention compute the same function."""
    monkeypatch.setattr("sctrilemma.module._encoder.EVAL_TOKEN_BUDGET", budget)
    torch.manual_seed(0)
    module = SCTrilemmaModule(small_adata.n_vars, **{**tiny, "n_heads": n_heads, "n_encoder_layers": 2}, prior="normal")
    perturb_norms_and_biases(module)
    module.eval()
    module.precision = "fp32"
    x = _tensors(small_adata)["X"][:48]
    crop = expressed_crop(x, 1024)
    library = x.sum(1, keepdim=True)
    n_real = crop.mask.sum(1)
    assert n_real.min() < n_real.max()  # cells of different lengths share the padded batch
    with torch.no_grad():
        fast = module.encode(crop, library)[0]
        plain = _plain_encode(module, crop, library)
        # Every cell alone, without padding, gives the same tokens as in the padded batch.
        single = torch.cat([_plain_encode(module, expressed_crop(x[i : i + 1], 10**6), library[i : i + 1])
                            for i in range(3)])  # fmt: skip
    assert plain.abs().max() > 0.1
    assert (fast - plain).abs().max() < 1e-5
    assert (fast[:3] - single).abs().max() < 1e-5


def test_bf16_precision_keeps_each_embedding(small_adata: ad.AnnData, tiny: dict) -> None:
    torch.manual_seed(0)
    module = SCTrilemmaModule(small_adata.n_vars, **{**tiny, "n_hidden": 64}, prior="normal").eval()
    x = _tensors(small_adata)["X"][:64]
    genes = torch.arange(200)
    with torch.no_grad():
        module.precision = "fp32"
        reference = module.inference(x)
        logits = module.decode(reference["z_tokens"], reference["z"], genes)
        module.precision = "bf16"
        fast = module.inference(x)
        fast_logits = module.decode(fast["z_tokens"], fast["z"], genes)
    assert fast["qz"].loc.dtype == torch.float32
    assert fast_logits.dtype == torch.float32
    centred = reference["qz"].loc.mean(0)
    cosine = torch.nn.functional.cosine_similarity(fast["qz"].loc - centred, reference["qz"].loc - centred, dim=1)
    assert cosine.min() > 0.99
    assert not torch.equal(fast["qz"].loc, reference["qz"].loc)  # bf16 really ran
    assert (fast_logits - logits).abs().max() < 0.1


def test_precision_setting() -> None:
    module = SCTrilemmaModule(50, n_hidden=8, n_heads=2, n_latent_tokens=2, crop_size=16)
    assert module.precision == "auto"
    assert not module.uses_bf16(torch.device("cpu"))
    assert module.uses_bf16(torch.device("cuda")) == torch.cuda.is_bf16_supported()
    module.precision = "bf16"
    assert module.uses_bf16(torch.device("cpu"))
    with pytest.raises(ValueError, match="`precision` must be one of"):
        module.precision = "fp16"


@pytest.mark.parametrize("budget", [50, 2048])  # several cell groups and gene chunks, and one group
@pytest.mark.parametrize("fold_budget", [1, 1 << 22])  # the keys and values folded group by group, or all at once
@pytest.mark.parametrize("decoder_query", ["gate", "additive", "none"])
@pytest.mark.parametrize("n_heads", [4, 16])  # folded attention (H K < d + K) and the plain fallback
def test_eval_decoder_matches_plain_path(
    small_adata: ad.AnnData,
    tiny: dict,
    budget: int,
    fold_budget: int,
    decoder_query: str,
    n_heads: int,
    monkeypatch: pytest.MonkeyPatch,
    perturb_norms_and_biases,
) -> None:
    """Chunked evaluation with keys and values folded into the projections computes the plain decoder."""
    monkeypatch.setattr("sctrilemma.module._decoder.DECODE_FLOAT_BUDGET", budget * tiny["n_hidden"])
    monkeypatch.setattr("sctrilemma.module._decoder.FOLDED_CONTEXT_BUDGET", fold_budget)
    torch.manual_seed(0)
    sizes = {**tiny, "n_heads": n_heads, "n_decoder_layers": 2}
    module = SCTrilemmaModule(small_adata.n_vars, **sizes, decoder_query=decoder_query, prior="normal")
    perturb_norms_and_biases(module)
    module.eval()
    module.precision = "fp32"
    plain_flops, folded_flops = module.decoder.blocks[0].attention.short_context_flops(120, tiny["n_latent_tokens"])
    assert (folded_flops < plain_flops) == (n_heads == 4)
    x = _tensors(small_adata)["X"][:8]
    shared_genes = torch.arange(300)
    per_cell_genes = torch.stack([torch.randperm(small_adata.n_vars)[:120] for _ in range(8)])
    with torch.no_grad():
        out = module.inference(x)
        for genes in (shared_genes, per_cell_genes):
            fast = module.decode(out["z_tokens"], out["z"], genes)
            plain = module.decoder._decode_plain(out["z_tokens"], out["z"], genes, module.gene_embedding)
            assert fast.shape == (8, genes.shape[-1], 2)
            assert plain.abs().max() > 0.1
            torch.testing.assert_close(fast, plain, rtol=1e-5, atol=1e-5)


def test_posterior_parameters_stay_fp32_under_autocast(small_adata: ad.AnnData, tiny: dict) -> None:
    """Under bf16 autocast (``bf16-mixed`` training) the KL and the decoder's context see fp32 posterior tokens."""
    torch.manual_seed(0)
    module = SCTrilemmaModule(small_adata.n_vars, **tiny, prior="normal").train()
    x = _tensors(small_adata)["X"][:8]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = module.inference(x)
    assert out["qz_tokens_mean"].dtype == torch.float32
    assert out["qz_tokens_logvar"].dtype == torch.float32
    assert out["z_tokens"].dtype == torch.float32


def test_training_keeps_the_callers_bf16_autocast(small_adata: ad.AnnData, tiny: dict) -> None:
    """Under bf16 autocast (``bf16-mixed`` training) the decoder's products run in bf16, as the caller asked."""
    torch.manual_seed(0)
    module = SCTrilemmaModule(small_adata.n_vars, **tiny, prior="normal").train()
    x = _tensors(small_adata)["X"][:8]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = module.inference(x)
        logits = module.decode(out["z_tokens"], out["z"], torch.arange(50))
    assert logits.dtype == torch.bfloat16


def test_training_decoder_in_cell_groups_matches_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """Decoding in cache-sized groups of cells (CPU training) gives the same logits and gradients as one pass."""
    torch.manual_seed(0)
    module = SCTrilemmaModule(
        30, n_hidden=16, n_latent_tokens=4, crop_size=12, n_encoder_layers=1, n_decoder_layers=2, n_heads=2,
        dropout_rate=0.0, prior="normal",
    ).double().train()  # fmt: skip
    tokens = torch.randn(5, 4, 16, dtype=torch.float64, requires_grad=True)
    genes = torch.randint(0, 30, (5, 7))
    weight = torch.randn(5, 7, 2, dtype=torch.float64)
    results = []
    for budget in (10_000, 14):  # one pass; groups of 2 cells (14 // 7)
        monkeypatch.setattr("sctrilemma.module._decoder.TRAINING_DECODE_BUDGET", budget)
        logits = module.decode(tokens, tokens.mean(1), genes)
        results.append(
            (logits, *torch.autograd.grad((logits * weight).sum(), [tokens, *module.decoder.blocks.parameters()]))
        )
    for grouped, whole in zip(results[1], results[0], strict=True):
        torch.testing.assert_close(grouped, whole)


def test_fast_paths_prepare_their_blocks_once_until_the_weights_change(
    small_adata: ad.AnnData, tiny: dict, perturb_norms_and_biases
) -> None:
    """Evaluation reuses the prepared blocks across batches, and rebuilds them once the weights are replaced."""
    sizes = {**tiny, "n_heads": 4, "n_encoder_layers": 2, "n_decoder_layers": 2}  # both fast paths prepare blocks
    torch.manual_seed(0)
    module = perturb_norms_and_biases(SCTrilemmaModule(small_adata.n_vars, **sizes, prior="normal")).eval()
    torch.manual_seed(1)
    other = perturb_norms_and_biases(SCTrilemmaModule(small_adata.n_vars, **sizes, prior="normal")).eval()
    module.precision = other.precision = "fp32"
    x = _tensors(small_adata)["X"][:16]
    genes = torch.arange(200)
    with torch.no_grad():
        out = module.inference(x)
        module.decode(out["z_tokens"], out["z"], genes)
        prepared = (module.encoder._prepared.value, module.decoder._prepared.value)
        assert prepared[0] is not None
        out = module.inference(x[8:])
        module.decode(out["z_tokens"], out["z"], genes)
        assert (module.encoder._prepared.value, module.decoder._prepared.value) == prepared  # the same objects

        module.load_state_dict(other.state_dict())  # copies in place: the same tensors, new values
        out, expected = module.inference(x), other.inference(x)
        logits = module.decode(out["z_tokens"], out["z"], genes)
        expected_logits = other.decode(expected["z_tokens"], expected["z"], genes)
    assert module.encoder._prepared.value is not prepared[0]
    assert module.decoder._prepared.value is not prepared[1]
    torch.testing.assert_close(out["qz"].loc, expected["qz"].loc)
    torch.testing.assert_close(logits, expected_logits)
    module.train()  # training changes the weights: the prepared blocks are dropped
    assert module.encoder._prepared.value is None
    assert module.decoder._prepared.value is None
