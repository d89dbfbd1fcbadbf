"""The header reader on files safetensors itself wrote: dtypes, shapes, no tensor loaded."""
import struct

import pytest
import torch
from safetensors.torch import save_file

from tunedeck.safetensors_headers import (HeaderError, TensorEntry, dominant_float_dtype,
                                          folder_dominant_float_dtype, folder_tensor_entries,
                                          tensor_bytes, tensor_entries)


def test_entries_name_each_tensor_with_its_dtype_and_shape(tmp_path):
    path = tmp_path / "model.safetensors"
    save_file({"embed.weight": torch.zeros(10, 4, dtype=torch.bfloat16),
               "norm.weight": torch.ones(4, dtype=torch.float32),
               "position_ids": torch.arange(7, dtype=torch.int64).reshape(1, 7),
               "scalar": torch.tensor(1.0, dtype=torch.float16)},
              str(path), metadata={"format": "pt"})
    entries = {entry.name: entry for entry in tensor_entries(path)}
    assert set(entries) == {"embed.weight", "norm.weight", "position_ids", "scalar"}  # no __metadata__
    assert entries["embed.weight"] == TensorEntry("embed.weight", "BF16", (10, 4))
    assert entries["norm.weight"].dtype == "F32" and entries["norm.weight"].elements == 4
    assert entries["position_ids"] == TensorEntry("position_ids", "I64", (1, 7))
    assert entries["scalar"].shape == () and entries["scalar"].elements == 1


def test_the_dominant_float_dtype_counts_elements_not_tensors(tmp_path):
    # Many small fp32 norms and one big bf16 matrix: bf16 holds the most elements; the
    # int64 tensor, bigger than both, is no float and does not count.
    tensors = {f"layer{index}.norm": torch.ones(8) for index in range(20)}
    tensors["big.weight"] = torch.zeros(32, 32, dtype=torch.bfloat16)
    tensors["ids"] = torch.zeros(10_000, dtype=torch.int64)
    save_file(tensors, str(tmp_path / "model-00001-of-00002.safetensors"))
    save_file({"head.weight": torch.zeros(8, 8, dtype=torch.float16)},
              str(tmp_path / "model-00002-of-00002.safetensors"))
    assert len(folder_tensor_entries(tmp_path)) == 23  # both shards
    assert folder_dominant_float_dtype(tmp_path) == "BF16"
    save_file({"huge.weight": torch.zeros(64, 64, dtype=torch.float16)},
              str(tmp_path / "model-extra.safetensors"))
    assert folder_dominant_float_dtype(tmp_path) == "F16"


def test_no_float_tensor_and_no_file_mean_no_dtype(tmp_path):
    assert folder_dominant_float_dtype(tmp_path) is None
    assert dominant_float_dtype([TensorEntry("ids", "I32", (4,))]) is None


def test_a_file_that_is_not_safetensors_is_a_header_error_not_a_huge_read(tmp_path):
    short = tmp_path / "short.safetensors"
    short.write_bytes(b"\x01\x02")
    huge_length = tmp_path / "huge.safetensors"
    huge_length.write_bytes(struct.pack("<Q", 2**60) + b"{}")
    not_json = tmp_path / "text.safetensors"
    not_json.write_bytes(struct.pack("<Q", 4) + b"oops")
    for path in (short, huge_length, not_json):
        with pytest.raises(HeaderError):
            tensor_entries(path)


def test_tensor_bytes_are_each_tensors_byte_range(tmp_path):
    path = tmp_path / "model.safetensors"
    save_file({"embed.weight": torch.zeros(10, 4, dtype=torch.bfloat16),
               "norm.weight": torch.ones(4, dtype=torch.float32),
               "ids": torch.arange(3, dtype=torch.int64)}, str(path), metadata={"format": "pt"})
    assert tensor_bytes(path) == {"embed.weight": 80, "norm.weight": 16, "ids": 24}
