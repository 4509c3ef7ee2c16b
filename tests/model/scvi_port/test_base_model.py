"""scvi-tools 1.4.2 ``tests/model/base/test_base_model.py`` ported to SCTrilemma.

scvi-tools tests ``deregister_manager`` on a bare ``BaseModelClass`` subclass with scVI's fields; here the same
calls and assertions run on SCTrilemma (``setup_anndata`` without batch/labels, whose scVI fields it refuses).
"""

from __future__ import annotations

import pytest
from scvi.data import synthetic_iid
from tiny_sizes import TINY

from sctrilemma import SCTrilemma


def test_deregister_manager():
    adata = synthetic_iid(batch_size=100)
    bdata = synthetic_iid(batch_size=100)

    # default deregister
    SCTrilemma.setup_anndata(adata)
    SCTrilemma.setup_anndata(bdata)
    model = SCTrilemma(adata, **TINY, preset="paper")
    adata_manager = model._get_most_recent_anndata_manager(adata)
    bdata_manager = model._get_most_recent_anndata_manager(bdata)

    model.deregister_manager()
    instance_manager_store = SCTrilemma._per_instance_manager_store[model.id]
    class_manager_store = model._setup_adata_manager_store
    assert adata_manager.adata_uuid in instance_manager_store
    assert adata_manager.adata_uuid in class_manager_store
    assert bdata_manager.adata_uuid not in class_manager_store

    with pytest.raises(ValueError):
        model.deregister_manager(bdata)

    # deregister with argument
    SCTrilemma.setup_anndata(adata)
    SCTrilemma.setup_anndata(bdata)
    model = SCTrilemma(adata, **TINY, preset="paper")
    adata_manager = model._get_most_recent_anndata_manager(adata)
    bdata_manager = model._get_most_recent_anndata_manager(bdata)

    model.deregister_manager(adata)
    instance_manager_store = SCTrilemma._per_instance_manager_store[model.id]
    class_manager_store = model._setup_adata_manager_store
    assert adata_manager.adata_uuid not in instance_manager_store
    assert adata_manager.adata_uuid not in class_manager_store
    assert bdata_manager.adata_uuid in class_manager_store
    model.deregister_manager(bdata)
    assert bdata_manager.adata_uuid not in class_manager_store

    with pytest.raises(ValueError):
        model.deregister_manager(adata)
    with pytest.raises(ValueError):
        model.deregister_manager(bdata)
