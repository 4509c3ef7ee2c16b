from ._attention import CrossAttention, CrossAttentionBlock, LongContextBlock, ShortContextBlock
from ._batchnorm import RankSyncedBatchNorm1d
from ._feedforward import SwiGLU
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
