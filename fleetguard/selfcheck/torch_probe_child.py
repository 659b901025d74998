"""Child of `torch_probe`: prints how many CUDA GPUs PyTorch sees."""

from __future__ import annotations

import json

import torch

print(json.dumps({"cuda_gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0}), flush=True)
