"""Stand-in for NVIDIA apex: only the names Megatron-DeepSpeed 6acc370a imports (see ../README.md)."""
