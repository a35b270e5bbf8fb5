"""Reference implementation of the Qwen3.5 hybrid model in plain torch: the oracle for every native kernel.

Text decoder and MTP head: ``engine.reference.model.ReferenceModel``; per-sequence state objects:
``engine.reference.state``. The vision tower lives in ``engine.reference.vision``.
"""

from engine.reference.model import ForwardOutput, ReferenceModel, decoder_layer, text_position_ids
from engine.reference.state import GDNState, KVCache, ModelState, StateOverflowError

__all__ = ["ForwardOutput", "GDNState", "KVCache", "ModelState", "ReferenceModel", "StateOverflowError",
           "decoder_layer", "text_position_ids"]
