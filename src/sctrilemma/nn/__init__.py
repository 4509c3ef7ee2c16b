from ._attention import CrossAttention, CrossAttentionBlock, SwiGLU
from ._gates import ExpressionGate, QueryRouter, TokenPooling

__all__ = ["CrossAttention", "CrossAttentionBlock", "ExpressionGate", "QueryRouter", "SwiGLU", "TokenPooling"]
