from ._attention import CrossAttention, CrossAttentionBlock, LongContextBlock, ShortContextBlock, SwiGLU
from ._batchnorm import RankSyncedBatchNorm1d
from ._gates import ExpressionGate, QueryRouter, TokenPooling

__all__ = [
    "CrossAttention",
    "CrossAttentionBlock",
    "ExpressionGate",
    "LongContextBlock",
    "QueryRouter",
    "RankSyncedBatchNorm1d",
    "ShortContextBlock",
    "SwiGLU",
    "TokenPooling",
]
