"""torch through DLPack: torch.from_dlpack(v) aliases the tensor's bytes, so
writes go both ways (torch -> numpy or another process, and back); every
dtype, bfloat16 included, maps to its torch dtype; both import orders work in
a fresh interpreter."""
import gc

import numpy as np
import pytest

import procutil
import workers
from reuse import churn

torch = pytest.importorskip("torch", reason="torch is not installed (Debian: python3-torch)")

TORCH_DTYPES = {
    "uint8": torch.uint8, "int8": torch.int8, "int16": torch.int16,
    "int32": torch.int32, "int64": torch.int64, "float16": torch.float16,
    "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64,
}


def tensor_var(seg, dtype="float32", shape=(2, 3), name="w"):
    v = seg.root.new_scope("p").var(name)
    v.resize(dtype, shape)
    return v


@pytest.mark.parametrize("dtype", sorted(TORCH_DTYPES))
def test_from_dlpack_gives_the_torch_dtype_and_shape(seg, dtype):
    t = torch.from_dlpack(tensor_var(seg, dtype, (3, 4)))
    assert t.dtype == TORCH_DTYPES[dtype]
    assert tuple(t.shape) == (3, 4)
    assert t.device.type == "cpu"
    assert t.is_contiguous()


def test_bool_goes_through_dlpack_as_bytes_of_0_and_1(seg):
    # DLPack 0.6, which torch 1.13 speaks, has no bool: the module documents
    # 8-bit unsigned for it; a DLPack with kDLBool gives torch.bool.
    v = tensor_var(seg, "bool", (4,))
    v.numpy()[:] = [True, False, True, True]
    t = torch.from_dlpack(v)
    assert t.dtype in (torch.uint8, torch.bool)
    assert t.tolist() in ([1, 0, 1, 1], [True, False, True, True])


def test_torch_writes_are_seen_by_numpy(seg):
    v = tensor_var(seg)
    v.numpy()[:] = 0
    t = torch.from_dlpack(v)
    t[1, 2] = 7.5
    t[0] += 1
    assert v.numpy().tolist() == [[1, 1, 1], [0, 0, 7.5]]


def test_numpy_writes_are_seen_by_torch(seg):
    v = tensor_var(seg, "int64", (4,))
    t = torch.from_dlpack(v)
    v.numpy()[:] = [4, 3, 2, 1]
    assert t.tolist() == [4, 3, 2, 1]


def test_torch_and_another_process_see_each_others_writes(seg, children):
    v = tensor_var(seg, "float32", (16,))
    t = torch.from_dlpack(v)
    t.zero_()
    kid = children("spawn", workers.view_roundtrip, seg.name, "p", "w")
    kid.expect("ready")
    t[3] = 1.5
    kid.send("check")
    assert kid.recv() == ("saw", 1.5)
    assert t[4].item() == 2.5
    kid.send("exit")
    kid.result()


def test_bfloat16_round_trips_through_torch(seg):
    v = tensor_var(seg, "bfloat16", (4,))
    t = torch.from_dlpack(v)
    t[:] = torch.tensor([1.0, -2.0, 0.5, 256.0], dtype=torch.bfloat16)
    again = torch.from_dlpack(v)
    assert again.dtype == torch.bfloat16
    assert again.tolist() == [1.0, -2.0, 0.5, 256.0]
    assert v.dtype == "bfloat16" and v.nbytes == 8


def test_bfloat16_bytes_are_the_top_half_of_float32(seg):
    v = tensor_var(seg, "bfloat16", (2,))
    torch.from_dlpack(v)[:] = torch.tensor([1.0, -2.0], dtype=torch.bfloat16)
    raw = np.frombuffer(bytes(memoryview(v).cast("B")), dtype=np.uint16)
    top = np.array([1.0, -2.0], dtype=np.float32).view(np.uint32) >> 16
    assert raw.tolist() == top.tolist()


def test_bfloat16_numpy_is_uint16_of_the_raw_bits_as_documented(seg):
    v = tensor_var(seg, "bfloat16", (2,))
    torch.from_dlpack(v)[:] = torch.tensor([1.0, -2.0], dtype=torch.bfloat16)
    a = v.numpy()
    assert a.dtype == np.uint16
    assert a.tolist() == [0x3F80, 0xC000]
    assert memoryview(v).format == "H"
    a[0] = 0x4000  # 2.0: numpy writes the bits torch reads
    assert torch.from_dlpack(v)[0].item() == 2.0


def test_float16_through_torch_matches_numpy_float16(seg):
    v = tensor_var(seg, "float16", (3,))
    torch.from_dlpack(v)[:] = torch.tensor([0.5, -1.0, 2048.0], dtype=torch.float16)
    assert v.numpy().dtype == np.float16
    assert v.numpy().tolist() == [0.5, -1.0, 2048.0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_assign_of_a_torch_tensor_copies_dtype_shape_and_values(seg, dtype):
    src = torch.arange(6).reshape(2, 3).to(dtype)
    v = seg.root.var("w")
    v.assign(src)
    assert (v.dtype, tuple(v.shape)) == (str(dtype).replace("torch.", ""), (2, 3))
    back = torch.from_dlpack(v)
    assert torch.equal(back, src)
    src.zero_()
    assert not torch.equal(back, src)  # a copy, not an alias of src


def test_zero_size_tensor_through_torch(seg):
    t = torch.from_dlpack(tensor_var(seg, "float32", (0, 3)))
    assert tuple(t.shape) == (0, 3) and t.numel() == 0


def test_torch_tensor_keeps_its_bytes_after_an_erase(seg):
    v = tensor_var(seg, "int32", (1000,))
    v.numpy()[:] = np.arange(1000)
    t = torch.from_dlpack(v)
    seg.open("p").erase("w")
    churn(seg.root, 4000)
    assert t.sum().item() == sum(range(1000))


def test_used_goes_down_when_the_torch_tensor_goes(seg):
    p = seg.root.new_scope("p")
    p.var("warm")
    p.erase("warm")
    empty = seg.stats().used
    v = p.var("w")
    v.resize("float64", (32 << 10,))
    t = torch.from_dlpack(v)
    p.erase("w")
    assert seg.stats().used - empty >= 256 << 10
    del t
    gc.collect()
    assert seg.stats().used == empty


IMPORT_ORDER = r"""
{imports}
import numpy as np
seg = pdshm.create({name!r}, size=8 << 20)
v = seg.root.var("w")
v.resize("bfloat16", (2, 2))
t = torch.from_dlpack(v)
t.fill_(1.5)
assert t.dtype == torch.bfloat16, t.dtype
v.resize("float32", (3,))
u = torch.from_dlpack(v)
u[:] = torch.tensor([1.0, 2.0, 3.0])
assert v.numpy().tolist() == [1.0, 2.0, 3.0]
del t, u
seg.detach()
print("ok")
"""


@pytest.mark.parametrize("imports", ["import pdshm, torch", "import torch, pdshm"])
def test_both_import_orders_work_in_a_fresh_interpreter(seg_name, imports):
    out = procutil.run_python(IMPORT_ORDER.format(imports=imports, name=seg_name), timeout=90)
    assert out.split() == ["ok"]
