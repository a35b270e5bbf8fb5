"""The 27B config.json of the Qwen3.5 / 3.6 / 3.8 family (MODEL.md), for planning and benchmarks
without a checkpoint on disk."""

from __future__ import annotations


def qwen35_27b_config(vision: bool = True) -> dict:
    text = {
        "model_type": "qwen3_5_text", "hidden_size": 5120, "num_hidden_layers": 64,
        "intermediate_size": 17408, "vocab_size": 248320, "rms_norm_eps": 1e-6,
        "max_position_embeddings": 262144, "num_attention_heads": 24, "num_key_value_heads": 4,
        "head_dim": 256, "linear_num_key_heads": 16, "linear_key_head_dim": 128,
        "linear_num_value_heads": 48, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
        "mtp_num_hidden_layers": 1, "hidden_act": "silu", "full_attention_interval": 4,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                            "mrope_section": [11, 11, 10], "mrope_interleaved": True},
        "eos_token_id": [248046, 248044],
    }
    cfg = {"model_type": "qwen3_5", "architectures": ["Qwen3_5ForConditionalGeneration"], "text_config": text}
    if vision:
        cfg["vision_config"] = {
            "model_type": "qwen3_5_vision", "depth": 27, "hidden_size": 1152, "intermediate_size": 4304,
            "num_heads": 16, "in_channels": 3, "patch_size": 16, "temporal_patch_size": 2,
            "spatial_merge_size": 2, "out_hidden_size": 5120, "num_position_embeddings": 2304,
            "hidden_act": "gelu_pytorch_tanh",
        }
    return cfg
