from ._reference import UpstreamStyleVAE

__all__ = ["UpstreamStyleVAE"]
