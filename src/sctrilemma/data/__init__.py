from ._census import CENSUS_OBS_FILTER, build_example_census, default_cache_dir, open_experiment
from ._example import example_reference_dir, load_example
from ._genes import GeneMatch, match_genes, strip_version
from ._pseudobulk import PseudobulkCodebook, pseudobulk_profiles
from ._soma_datamodule import SomaDataModule

__all__ = [
    "CENSUS_OBS_FILTER",
    "SomaDataModule",
    "build_example_census",
    "default_cache_dir",
    "GeneMatch",
    "PseudobulkCodebook",
    "example_reference_dir",
    "load_example",
    "match_genes",
    "open_experiment",
    "pseudobulk_profiles",
    "strip_version",
]
