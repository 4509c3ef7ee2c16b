from ._example import example_reference_dir, load_example
from ._genes import GeneMatch, match_genes, strip_version
from ._pseudobulk import PseudobulkCodebook, pseudobulk_profiles

__all__ = [
    "GeneMatch",
    "PseudobulkCodebook",
    "example_reference_dir",
    "load_example",
    "match_genes",
    "pseudobulk_profiles",
    "strip_version",
]
