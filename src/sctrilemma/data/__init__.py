from ._example import load_example
from ._pseudobulk import PseudobulkCodebook, pseudobulk_profiles

__all__ = ["PseudobulkCodebook", "load_example", "pseudobulk_profiles"]
