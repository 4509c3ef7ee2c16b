from ._reference import read_reference, write_reference

__all__ = ["read_reference", "write_reference"]
