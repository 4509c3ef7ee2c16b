from ._hub import pull_hub_reference, write_hub_files
from ._import import import_upstream_checkpoint
from ._reference import read_reference, write_reference
from ._torch_zip import read_checkpoint_tensors
from ._upstream import read_upstream_vocabulary, upstream_to_module_state

__all__ = [
    "import_upstream_checkpoint",
    "pull_hub_reference",
    "read_checkpoint_tensors",
    "read_reference",
    "read_upstream_vocabulary",
    "upstream_to_module_state",
    "write_hub_files",
    "write_reference",
]
