"""Analytical cost models: memory, FLOPs, communication and time of one training step."""
from .estimate import BatchEstimate, estimate, estimate_batch
from .types import (GPU, ClusterSpec, Estimate, Framework, GradComm, Layout, LayoutBatch, MemoryBreakdown,
                    ModelSpec, Offload, Precision, Recompute, Sparsity, TimeBreakdown, TrainingSpec)

__all__ = ["BatchEstimate", "estimate", "estimate_batch", "GPU", "ClusterSpec", "Estimate", "Framework",
           "GradComm", "Layout", "LayoutBatch", "MemoryBreakdown", "ModelSpec", "Offload", "Precision",
           "Recompute", "Sparsity", "TimeBreakdown", "TrainingSpec"]
