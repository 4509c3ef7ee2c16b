from ._attention import CrossAttention, CrossAttentionBlock, LongContextBlock, ShortContextBlock
from ._layers import ExpressionGate, QueryRouter, RankSyncedBatchNorm1d, SwiGLU, TokenPooling

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
