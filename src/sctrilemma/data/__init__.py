from ._census import CENSUS_OBS_FILTER, build_example_census, default_cache_dir, open_experiment
from ._example import blood_reference_dir, example_reference_dir, load_example, load_pbmc_v3
from ._genes import GeneMatch, match_genes, strip_version
from ._pseudobulk import PseudobulkCodebook, pseudobulk_profiles
from ._soma_datamodule import SomaDataModule
from ._studies import concat_studies

__all__ = [
    "CENSUS_OBS_FILTER",
    "SomaDataModule",
    "blood_reference_dir",
    "build_example_census",
    "concat_studies",
    "default_cache_dir",
    "GeneMatch",
    "PseudobulkCodebook",
    "example_reference_dir",
    "load_example",
    "load_pbmc_v3",
    "match_genes",
    "open_experiment",
    "pseudobulk_profiles",
    "strip_version",
]
