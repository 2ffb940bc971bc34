"""gpuplan: which GPUs to train a large model on, how, for how long and at what cost."""

__version__ = "0.1.0"
