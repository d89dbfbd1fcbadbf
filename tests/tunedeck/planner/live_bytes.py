"""The bytes of tensors alive at once while a block of torch code runs, counted at every
operator's output (a TorchDispatchMode) and freed when torch frees each storage: what the
activation planner predicts, measured on CPU where there is no caching allocator to ask.
Tensors that exist before the block (the weights) are left out."""
from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class LiveBytes(TorchDispatchMode):
    def __init__(self, existing=()):
        super().__init__()
        self._existing = {tensor.untyped_storage().data_ptr() for tensor in existing}
        self._sizes: dict[int, int] = {}
        self.live = 0
        self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        output = func(*args, **(kwargs or {}))
        for tensor in tree_flatten(output)[0]:
            if isinstance(tensor, torch.Tensor):
                self._count(tensor.untyped_storage())
        return output

    def _count(self, storage) -> None:
        key, size = storage.data_ptr(), storage.nbytes()
        if size == 0 or key in self._sizes or key in self._existing:
            return  # a view of a storage counted already, or a weight
        self._sizes[key] = size
        self.live += size
        self.peak = max(self.peak, self.live)
        weakref.finalize(storage, self._free, key)

    def _free(self, key: int) -> None:
        self.live -= self._sizes.pop(key, 0)
