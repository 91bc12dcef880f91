"""Model pieces built from mxfuse's producers and layers, loaded the way a serving engine loads them.

``mxfuse.models.dsv41``: one DeepSeek-V4.1-style attention sublayer between two hyper-connection
boundaries, from a safetensors checkpoint in the native format, in three paths (fused, unfused, bf16).
"""

from __future__ import annotations

__all__: list[str] = []
