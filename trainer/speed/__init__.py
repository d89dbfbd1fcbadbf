"""The spec's GPU speed options, where the trainer turns them on: which attention kernel the
model loads with, Liger Kernel's patches, and whether this host can run what the spec asks
(checked by the worker before any GPU is taken, and by every rank before the weights load).
Padding-free batches are the data's (trainer/data/datasets.py), the fused optimizer the
backends' (their generated config says so)."""
