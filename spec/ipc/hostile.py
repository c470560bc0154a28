#!/usr/bin/env python3
"""A hostile peer for the receiver of dlpack.ipc (docs/ipc.md, wire format version 1).

    hostile.py --list                 one line per case: number, name, outcomes, tensor, what it sends
    hostile.py PATH all               every case that keeps the channel open, in order, on one connection
    hostile.py PATH CASE...           the cases named (names or numbers), in that order, on one connection
    hostile.py --self-test            every case against a strict reference receiver written here

PATH is the receiver's listening Unix socket (`@name`: the abstract namespace). After each case
that keeps the channel open, the peer sends one valid control message, a float64 tensor of shape
{2, 3} holding 10 * N + i (N the case's number, i = 0..5 in row-major order), so that the receiver
proves it still works. A case whose outcomes end in `closed` closes the connection: name it last.

Outcomes, in the order the receiver sees them: `error` (recv must raise), `tensor` (a writable
tensor), `readonly` (a read-only tensor), `tensor-or-error` (either, for what docs/ipc.md leaves
open), `closed` (recv must raise an error containing "closed").
A tensor outcome's expected value is the --list line's fourth field: `dtype;shape;strides;values`
(comma-separated lists; strides in elements as sent, values in row-major order or `*` where there
are too many to compare), or `skip:` and
the reason where the case cannot be made on this machine (it then sends nothing).

Standard library only. Every message is built by `encode`, a correct encoder; the cases spoil one
thing each.
"""

import fcntl
import mmap
import os
import random
import select
import socket
import struct
import sys
import tempfile
import time
import zlib

F_ADD_SEALS = 1033
F_GET_SEALS = 1034
F_SEAL_SEAL = 1
F_SEAL_SHRINK = 2
F_SEAL_GROW = 4
F_SEAL_WRITE = 8
F_SEAL_FUTURE_WRITE = 16
MFD_CLOEXEC = 1
MFD_ALLOW_SEALING = 2
MFD_HUGETLB = 4
SEALED = F_SEAL_SHRINK | F_SEAL_GROW

MAGIC = b"DLIP"
VERSION = 1
KIND_TENSOR = 1
HEADER = 56
MAX_NDIM = 64
MAX_MESSAGE = HEADER + 16 * MAX_NDIM
CRC_AT = 12
FLAG_READ_ONLY = 1
FLAG_IS_COPIED = 2
SCM_MAX_FD = 253  # the most descriptors Linux takes in one SCM_RIGHTS message

CPU = 1
# name: (DLPack type code, bits, lanes, struct format)
DTYPES = {
    "float64": (2, 64, 1, "d"),
    "float32": (2, 32, 1, "f"),
    "int64": (0, 64, 1, "q"),
    "int32": (0, 32, 1, "i"),
    "uint8": (1, 8, 1, "B"),
}

U64 = (1 << 64) - 1


def s64(v):
    """v as a signed 64-bit value (wraps, so that hostile values like 2**64 - 8 can be written)."""
    v &= U64
    return v - (1 << 64) if v >= 1 << 63 else v


def encode(shape, strides=None, dtype="float64", offset=0, size=None, flags=0, device=(CPU, 0),
           magic=MAGIC, version=VERSION, kind=KIND_TENSOR, ndim=None, length=None, crc=None,
           code_bits_lanes=None, trailing=b""):
    """One message of wire format version 1. The keyword arguments after `shape` default to a
    correct message (contiguous strides, size = the bytes the layout reaches from offset 0);
    each can be set to a hostile value. `trailing` bytes are appended before the CRC is computed."""
    shape = list(shape)
    if strides is None:
        strides, step = [], 1
        for n in reversed(shape):
            strides.insert(0, step)
            step *= max(n, 1)
    strides = list(strides)
    code, bits, lanes = code_bits_lanes or DTYPES[dtype][:3]
    if size is None:
        size = offset + layout_bytes(shape, strides, bits // 8 or 1)
    if ndim is None:
        ndim = len(shape)
    if length is None:
        length = HEADER + 8 * (len(shape) + len(strides)) + len(trailing)
    msg = bytearray(struct.pack("<4sHHII", magic, version & 0xFFFF, kind & 0xFFFF, length & 0xFFFFFFFF, 0))
    msg += struct.pack("<IIBBHI", device[0] & 0xFFFFFFFF, device[1] & 0xFFFFFFFF, code & 0xFF, bits & 0xFF,
                       lanes & 0xFFFF, ndim & 0xFFFFFFFF)
    msg += struct.pack("<QQQ", flags & U64, size & U64, offset & U64)
    msg += struct.pack("<%dq" % len(shape), *[s64(n) for n in shape])
    msg += struct.pack("<%dq" % len(strides), *[s64(s) for s in strides])
    msg += trailing
    if crc is None:
        crc = zlib.crc32(bytes(msg)) & 0xFFFFFFFF
    struct.pack_into("<I", msg, CRC_AT, crc & 0xFFFFFFFF)
    return bytes(msg)


def recrc(msg):
    """msg with its CRC field recomputed over its own bytes (for spoilt messages that should
    fail for another reason than the CRC)."""
    msg = bytearray(msg)
    struct.pack_into("<I", msg, CRC_AT, 0)
    struct.pack_into("<I", msg, CRC_AT, zlib.crc32(bytes(msg)) & 0xFFFFFFFF)
    return bytes(msg)


def layout_bytes(shape, strides, itemsize):
    """The bytes a layout reaches from its first element on (0 when empty); strides >= 0 only."""
    if any(n == 0 for n in shape):
        return 0
    return (sum((n - 1) * s for n, s in zip(shape, strides)) + 1) * itemsize


def indices(shape):
    if not shape:
        yield ()
        return
    for i in range(shape[0]):
        for rest in indices(shape[1:]):
            yield (i,) + rest


def memfd(size, seals=SEALED, flags=MFD_CLOEXEC | MFD_ALLOW_SEALING, writes=()):
    """A memfd of `size` bytes holding `writes` ((offset, bytes) pairs), then sealed with `seals`."""
    fd = os.memfd_create("dlpack-hostile", flags)
    os.ftruncate(fd, size)
    for at, data in writes:
        os.pwrite(fd, data, at)
    if seals:
        fcntl.fcntl(fd, F_ADD_SEALS, seals)
    return fd


def place(shape, strides, offset, dtype, values):
    """The (offset, bytes) writes that put `values` (row-major) at the layout's elements."""
    fmt = "<" + DTYPES[dtype][3]
    itemsize = struct.calcsize(fmt)
    return [(offset + itemsize * sum(i * s for i, s in zip(idx, strides)), struct.pack(fmt, v))
            for idx, v in zip(indices(shape), values)]


class Tensor:
    """A valid tensor: its message and its memfd, and what the receiver must see."""

    def __init__(self, shape, values, strides=None, dtype="float64", offset=0, size=None, seals=SEALED,
                 flags=0, mfd_flags=MFD_CLOEXEC | MFD_ALLOW_SEALING):
        self.shape, self.values, self.dtype = list(shape), list(values), dtype
        if strides is None:
            strides, step = [], 1
            for n in reversed(self.shape):
                strides.insert(0, step)
                step *= max(n, 1)
        self.strides, self.offset = list(strides), offset
        itemsize = DTYPES[dtype][1] // 8
        lowest = sum((n - 1) * s for n, s in zip(self.shape, self.strides) if s < 0 and n > 0)
        highest = sum((n - 1) * s for n, s in zip(self.shape, self.strides) if s > 0 and n > 0)
        assert offset + lowest * itemsize >= 0
        empty = any(n == 0 for n in self.shape)
        self.size = size if size is not None else (offset if empty else offset + (highest + 1) * itemsize)
        self.seals, self.flags, self.mfd_flags = seals, flags, mfd_flags

    def expect(self):
        return "%s;%s;%s;%s" % (self.dtype, ",".join(map(str, self.shape)), ",".join(map(str, self.strides)),
                                ",".join(repr(v) for v in self.values))

    def fd(self):
        return memfd(self.size, self.seals, self.mfd_flags,
                     place(self.shape, self.strides, self.offset, self.dtype, self.values))

    def message(self, **spoil):
        args = dict(strides=self.strides, dtype=self.dtype, offset=self.offset, size=self.size, flags=self.flags)
        args.update(spoil)
        return encode(self.shape, **args)


def control_tensor(number):
    return Tensor([2, 3], [10.0 * number + i for i in range(6)])


# A simple valid tensor the spoilt cases start from: float64 {2, 3}, 48 bytes at offset 0.
PLAIN = Tensor([2, 3], [1.5, -2.0, 3.25, 4.0, 1e300, -0.0])


class Peer:
    def __init__(self, path):
        self.path = path
        address = "\0" + path[1:] if path.startswith("@") else path
        deadline = time.monotonic() + 10
        while True:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                self.sock.connect(address)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                self.sock.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def send(self, data, fds=(), close=True):
        """One record carrying `fds` (closed here afterwards unless close=False: in flight, the
        kernel holds its own reference)."""
        if fds:
            socket.send_fds(self.sock, [data], list(fds))
        else:
            self.sock.sendmsg([data])
        if close:
            for fd in set(fds):
                os.close(fd)

    def close(self):
        self.sock.close()


# ---- the cases ----

CASES = []


def case(name, outcomes, what, expect=None):
    """Registers a case: `outcomes` comma-separated (see the module's doc), `expect` the Tensor a
    tensor outcome must equal (or a function giving it, or a "skip:" reason)."""
    def register(fn):
        CASES.append((name, outcomes, what, expect, fn))
        return fn
    return register


def garbage(n, seed):
    rng = random.Random(seed)
    return bytes(rng.randrange(256) for _ in range(n))


# framing: lengths, truncation, records of the wrong size

@case("garbage", "error", "200 random bytes, no descriptor")
def _(p):
    p.send(garbage(200, 1))


@case("garbage-with-fd", "error", "200 random bytes carrying a valid memfd (which must be closed)")
def _(p):
    p.send(garbage(200, 2), [PLAIN.fd()])


@case("garbage-magic-ok", "error", "the magic DLIP then 1076 random bytes, with a memfd")
def _(p):
    p.send(MAGIC + garbage(MAX_MESSAGE - 4, 3), [PLAIN.fd()])


@case("empty-record", "error", "a record of 0 bytes, then nothing for 0.3 s (not end of file: the peer stays)")
def _(p):
    p.send(b"")
    time.sleep(0.3)


@case("empty-record-with-fd", "error", "a record of 0 bytes carrying a valid memfd")
def _(p):
    p.send(b"", [PLAIN.fd()])


@case("one-byte", "error", "a record of 1 byte with a memfd")
def _(p):
    p.send(b"D", [PLAIN.fd()])


@case("truncated-header", "error", "the first 40 bytes of a valid message, with its memfd")
def _(p):
    p.send(PLAIN.message()[:40], [PLAIN.fd()])


@case("truncated-55", "error", "a valid 0-d message less its last byte (55 bytes)")
def _(p):
    t = Tensor([], [7.0])
    p.send(t.message()[:HEADER - 1], [t.fd()])


@case("truncated-strides", "error", "a valid 2-d message cut in its strides (length field and CRC of the whole)")
def _(p):
    p.send(PLAIN.message()[:HEADER + 16 + 8], [PLAIN.fd()])


@case("truncated-recrc", "error", "a 2-d message cut in its strides, its CRC recomputed over what is left")
def _(p):
    p.send(recrc(PLAIN.message()[:HEADER + 16 + 8]), [PLAIN.fd()])


@case("record-4096", "error", "a 4096-byte record: a valid message padded with zeros, with a memfd")
def _(p):
    p.send(PLAIN.message() + bytes(4096 - len(PLAIN.message())), [PLAIN.fd()])


@case("record-max-plus-1", "error", "a record of %d bytes (the largest valid message plus one): a consistent "
      "ndim 64 message with one trailing byte in its length and CRC" % (MAX_MESSAGE + 1))
def _(p):
    shape = [1] * MAX_NDIM
    msg = encode(shape, offset=0, size=8, trailing=b"\0")
    assert len(msg) == MAX_MESSAGE + 1
    p.send(msg, [memfd(8)])


@case("record-64k", "error", "a 65536-byte record of garbage with a memfd")
def _(p):
    p.send(garbage(65536, 4), [PLAIN.fd()])


@case("length-huge", "error", "length field 0xFFFFFFFF (CRC correct)")
def _(p):
    p.send(PLAIN.message(length=0xFFFFFFFF), [PLAIN.fd()])


@case("length-zero", "error", "length field 0 (CRC correct)")
def _(p):
    p.send(PLAIN.message(length=0), [PLAIN.fd()])


@case("length-plus-16", "error", "length field 16 more than the record (and than 56 + 16 * ndim)")
def _(p):
    p.send(PLAIN.message(length=HEADER + 32 + 16), [PLAIN.fd()])


@case("length-minus-16", "error", "length field 16 less than the record and than 56 + 16 * ndim")
def _(p):
    p.send(PLAIN.message(length=HEADER + 32 - 16), [PLAIN.fd()])


@case("trailing-bytes", "error", "8 bytes after a valid 2-d message, in the length field and the CRC")
def _(p):
    p.send(PLAIN.message(trailing=bytes(8)), [PLAIN.fd()])


# header fields

@case("wrong-magic", "error", "magic DLPK")
def _(p):
    p.send(PLAIN.message(magic=b"DLPK"), [PLAIN.fd()])


@case("magic-lowercase", "error", "magic dlip")
def _(p):
    p.send(PLAIN.message(magic=b"dlip"), [PLAIN.fd()])


@case("version-0", "error", "version 0")
def _(p):
    p.send(PLAIN.message(version=0), [PLAIN.fd()])


@case("version-2", "error", "version 2 (the error names it)")
def _(p):
    p.send(PLAIN.message(version=2), [PLAIN.fd()])


@case("version-65535", "error", "version 65535 (the error names it)")
def _(p):
    p.send(PLAIN.message(version=65535), [PLAIN.fd()])


@case("kind-0", "error", "kind 0")
def _(p):
    p.send(PLAIN.message(kind=0), [PLAIN.fd()])


@case("kind-2", "error", "kind 2")
def _(p):
    p.send(PLAIN.message(kind=2), [PLAIN.fd()])


@case("bad-crc", "error", "a valid message with one bit of its CRC flipped")
def _(p):
    msg = bytearray(PLAIN.message())
    msg[CRC_AT] ^= 1
    p.send(bytes(msg), [PLAIN.fd()])


@case("bad-crc-body", "error", "a valid message with one bit of its last stride flipped, CRC unchanged")
def _(p):
    msg = bytearray(PLAIN.message())
    msg[-8] ^= 1
    p.send(bytes(msg), [PLAIN.fd()])


@case("crc-zero", "error", "CRC field 0")
def _(p):
    p.send(PLAIN.message(crc=0), [PLAIN.fd()])


# the layout

@case("ndim-65", "error", "ndim 65 in a consistent message of 56 + 16 * 65 bytes")
def _(p):
    p.send(encode([1] * 65, size=8), [memfd(8)])


@case("ndim-65-short", "error", "ndim 65 in a 56 + 16 * 64 byte message (length field 56 + 16 * 64)")
def _(p):
    p.send(encode([1] * 64, ndim=65, size=8), [memfd(8)])


@case("ndim-huge", "error", "ndim 0xFFFFFFFF (length field 56, record 56 bytes)")
def _(p):
    p.send(encode([], ndim=0xFFFFFFFF, size=8), [memfd(8)])


@case("ndim-wraps", "error", "ndim 2^28: 56 + 16 * ndim wraps to 56 in 32 bits (length field 56, record 56)")
def _(p):
    p.send(encode([], ndim=1 << 28, size=8), [memfd(8)])


@case("ndim-int32-min", "error", "ndim 0x80000000 (negative as int32), length field 56")
def _(p):
    p.send(encode([], ndim=1 << 31, size=8), [memfd(8)])


@case("ndim-more-than-sent", "error", "ndim 3 with the shape and strides of 2 dimensions (length 56 + 32)")
def _(p):
    p.send(PLAIN.message(ndim=3), [PLAIN.fd()])


@case("shape-negative", "error", "shape {2, -3}")
def _(p):
    p.send(encode([2, -3], strides=[3, 1], size=48), [PLAIN.fd()])


@case("shape-int64-min", "error", "shape {-2^63}, stride 0")
def _(p):
    p.send(encode([-(1 << 63)], strides=[0], size=8), [memfd(8)])


@case("shape-product-overflow", "error", "uint8 shape {2^32, 2^32}: the element count overflows int64")
def _(p):
    p.send(encode([1 << 32, 1 << 32], strides=[0, 0], dtype="uint8", size=8), [memfd(8)])


@case("shape-product-overflow-3", "error", "uint8 shape {2^21, 2^21, 2^22} (2^64 elements, stride 0)")
def _(p):
    p.send(encode([1 << 21, 1 << 21, 1 << 22], strides=[0, 0, 0], dtype="uint8", size=8), [memfd(8)])


@case("shape-bytes-overflow", "error", "float64 shape {2^61} stride 1: the elements fit, their bytes (2^64) do not")
def _(p):
    p.send(encode([1 << 61], strides=[1], size=4096), [memfd(4096)])


@case("stride-overflow", "error", "float64 shape {2} stride 2^62: the highest byte overflows")
def _(p):
    p.send(encode([2], strides=[1 << 62], size=4096), [memfd(4096)])


@case("stride-int64-min", "error", "float64 shape {2} stride -2^63")
def _(p):
    p.send(encode([2], strides=[-(1 << 63)], offset=64, size=4096), [memfd(4096)])


@case("strides-before-start", "error", "float64 shape {4} stride -1 at offset 0: reaches 24 bytes before the file")
def _(p):
    p.send(encode([4], strides=[-1], offset=0, size=32), [memfd(32)])


@case("strides-before-start-2d", "error", "float64 shape {2, 3} strides {-3, 1} at offset 16 (needs 24)")
def _(p):
    p.send(encode([2, 3], strides=[-3, 1], offset=16, size=64), [memfd(64)])


@case("offset-beyond", "error", "float64 shape {2, 3} at offset 4096 - 40 in a 4096-byte file (8 bytes over)")
def _(p):
    p.send(encode([2, 3], offset=4096 - 40, size=4096), [memfd(4096)])


@case("offset-at-end", "error", "float64 0-d at offset 4096 in a 4096-byte file")
def _(p):
    p.send(encode([], offset=4096, size=4096), [memfd(4096)])


@case("offset-huge", "error", "float64 shape {2} at offset 2^63 - 8 (size field 4096)")
def _(p):
    p.send(encode([2], offset=(1 << 63) - 8, size=4096), [memfd(4096)])


@case("offset-negative", "error", "float64 shape {2} at offset 2^64 - 8 (-8 as int64)")
def _(p):
    p.send(encode([2], offset=-8, size=4096), [memfd(4096)])


@case("offset-wraps", "error", "float64 shape {2} stride 1 at offset 2^64 - 8: offset + 16 wraps to 8")
def _(p):
    p.send(encode([2], strides=[1], offset=U64 - 7, size=4096), [memfd(4096)])


@case("size-larger-than-file", "error", "size field 8192, the memfd 4096 bytes, the layout inside 8192 only")
def _(p):
    p.send(encode([2], offset=8192 - 16, size=8192), [memfd(4096)])


@case("size-smaller-than-file", "error", "size field 48, the memfd 4096 bytes (the layout inside both)")
def _(p):
    p.send(PLAIN.message(size=48), [memfd(4096, writes=place([2, 3], [3, 1], 0, "float64", PLAIN.values))])


@case("size-huge", "error", "size field 2^64 - 1, the memfd 48 bytes")
def _(p):
    p.send(PLAIN.message(size=U64), [PLAIN.fd()])


@case("file-too-small", "error", "size field 16 and a 16-byte memfd, the layout needs 48")
def _(p):
    p.send(PLAIN.message(size=16), [memfd(16)])


# dtype, flags, device

@case("dtype-unknown-code", "error", "dtype code 200, 8 bits, 1 lane")
def _(p):
    p.send(PLAIN.message(code_bits_lanes=(200, 8, 1)), [PLAIN.fd()])


@case("dtype-bad-bits", "error", "dtype float with 12 bits")
def _(p):
    p.send(PLAIN.message(code_bits_lanes=(2, 12, 1)), [PLAIN.fd()])


@case("dtype-zero-bits", "error", "dtype int with 0 bits")
def _(p):
    p.send(PLAIN.message(code_bits_lanes=(0, 0, 1)), [PLAIN.fd()])


@case("dtype-opaque", "error", "dtype code 3 (opaque handle), 64 bits")
def _(p):
    p.send(PLAIN.message(code_bits_lanes=(3, 64, 1)), [PLAIN.fd()])


@case("lanes-2", "error", "float32 with 2 lanes")
def _(p):
    p.send(PLAIN.message(code_bits_lanes=(2, 32, 2)), [PLAIN.fd()])


@case("lanes-0", "error", "float64 with 0 lanes")
def _(p):
    p.send(PLAIN.message(code_bits_lanes=(2, 64, 0)), [PLAIN.fd()])


@case("flags-unknown", "error", "flags 2 (IS_COPIED, not allowed on the wire)")
def _(p):
    p.send(PLAIN.message(flags=FLAG_IS_COPIED), [PLAIN.fd()])


@case("flags-high-bit", "error", "flags 2^63")
def _(p):
    p.send(PLAIN.message(flags=1 << 63), [PLAIN.fd()])


@case("flags-padded-float64", "error", "flags 4 (IS_SUBBYTE_TYPE_PADDED) on float64, which is not a sub-byte dtype")
def _(p):
    p.send(PLAIN.message(flags=4), [PLAIN.fd()])


@case("device-unknown", "error", "device_type 99 with a memfd")
def _(p):
    p.send(PLAIN.message(device=(99, 0)), [PLAIN.fd()])


@case("device-zero", "error", "device_type 0 with a memfd")
def _(p):
    p.send(PLAIN.message(device=(0, 0)), [PLAIN.fd()])


@case("cpu-device-id-1", "error", "device cpu with device_id 1")
def _(p):
    p.send(PLAIN.message(device=(CPU, 1)), [PLAIN.fd()])


@case("cuda-with-memfd", "error", "device cuda:0 with a sealed memfd (not a CUDA allocation's handle)")
def _(p):
    p.send(PLAIN.message(device=(2, 0)), [PLAIN.fd()])


@case("float4-packed-strided", "error", "float4_e2m1fn {3} stride 2, packed (sub-byte elements have no address)")
def _(p):
    p.send(encode([3], strides=[2], code_bits_lanes=(17, 4, 1), size=4096), [memfd(4096)])


@case("float4-packed-short", "error", "float4_e2m1fn {3} packed (2 bytes) in a memfd of 1 byte")
def _(p):
    p.send(encode([3], code_bits_lanes=(17, 4, 1), size=1), [memfd(1)])


# descriptors

@case("no-descriptor", "error", "a valid message with no descriptor")
def _(p):
    p.send(PLAIN.message())


@case("two-descriptors", "error", "a valid message with two valid memfds (both must be closed)")
def _(p):
    p.send(PLAIN.message(), [PLAIN.fd(), PLAIN.fd()])


@case("eight-descriptors", "error", "a valid message with 8 valid memfds (as many as the receiver's control buffer "
      "may hold: all must be closed)")
def _(p):
    p.send(PLAIN.message(), [PLAIN.fd() for _ in range(8)])


@case("nine-descriptors", "error", "a valid message with 9 valid memfds")
def _(p):
    p.send(PLAIN.message(), [PLAIN.fd() for _ in range(9)])


@case("hundreds-of-descriptors", "error", "a valid message with %d descriptors: a valid memfd, then dups of "
      "/dev/null (the kernel drops those that do not fit)" % SCM_MAX_FD)
def _(p):
    fd = PLAIN.fd()
    null = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
    p.send(PLAIN.message(), [fd] + [null] * (SCM_MAX_FD - 1), close=False)
    os.close(fd)
    os.close(null)


@case("hundreds-of-memfds", "error", "a valid message with %d distinct valid memfds" % SCM_MAX_FD)
def _(p):
    fds = [PLAIN.fd() for _ in range(SCM_MAX_FD)]
    p.send(PLAIN.message(), fds)


@case("regular-file", "error", "a regular file of the right size, opened read-write")
def _(p):
    with tempfile.TemporaryFile() as f:
        for at, data in place([2, 3], [3, 1], 0, "float64", PLAIN.values):
            os.pwrite(f.fileno(), data, at)
        p.send(PLAIN.message(), [os.dup(f.fileno())])


@case("pipe", "error", "the read end of a pipe")
def _(p):
    r, w = os.pipe()
    os.write(w, bytes(48))
    p.send(PLAIN.message(), [r])
    os.close(w)


@case("socket", "error", "one end of a Unix socket pair")
def _(p):
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    p.send(PLAIN.message(), [a.fileno()], close=False)
    a.close()
    b.close()


@case("dev-zero", "error", "/dev/zero opened read-write")
def _(p):
    p.send(PLAIN.message(), [os.open("/dev/zero", os.O_RDWR | os.O_CLOEXEC)])


@case("inet-socket", "error", "a UDP socket")
def _(p):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    p.send(PLAIN.message(), [s.fileno()], close=False)
    s.close()


@case("memfd-unsealed", "error", "a memfd allowing seals but with none")
def _(p):
    t = Tensor(PLAIN.shape, PLAIN.values, seals=0)
    p.send(t.message(), [t.fd()])


@case("memfd-no-sealing", "error", "a memfd made without MFD_ALLOW_SEALING (its seals: F_SEAL_SEAL only)")
def _(p):
    t = Tensor(PLAIN.shape, PLAIN.values, seals=0, mfd_flags=MFD_CLOEXEC)
    p.send(t.message(), [t.fd()])


@case("memfd-shrunk-after-sending", "error", "a memfd sealed only against growing, shrunk to 0 after sending")
def _(p):
    t = Tensor(PLAIN.shape, PLAIN.values, seals=F_SEAL_GROW)
    fd = t.fd()
    p.send(t.message(), [fd], close=False)
    os.ftruncate(fd, 0)
    os.close(fd)


@case("memfd-shrunk-before-sending", "error", "a memfd sealed only against growing, shrunk to 16 bytes, "
      "then sent with size field 48")
def _(p):
    t = Tensor(PLAIN.shape, PLAIN.values, seals=F_SEAL_GROW)
    fd = t.fd()
    os.ftruncate(fd, 16)
    p.send(t.message(), [fd])


@case("memfd-can-grow", "error", "a memfd sealed against shrinking only")
def _(p):
    t = Tensor(PLAIN.shape, PLAIN.values, seals=F_SEAL_SHRINK)
    p.send(t.message(), [t.fd()])


@case("memfd-o-path", "error", "a sealed memfd reopened with O_PATH (no reading, no mapping)")
def _(p):
    fd = PLAIN.fd()
    path_fd = os.open("/proc/self/fd/%d" % fd, os.O_PATH | os.O_CLOEXEC)
    os.close(fd)
    p.send(PLAIN.message(), [path_fd])


@case("memfd-write-only", "error", "a sealed memfd reopened O_WRONLY (cannot be mapped)")
def _(p):
    fd = PLAIN.fd()
    wfd = os.open("/proc/self/fd/%d" % fd, os.O_WRONLY | os.O_CLOEXEC)
    os.close(fd)
    p.send(PLAIN.message(), [wfd])


def hugetlb(t):
    """A sealed MFD_HUGETLB memfd of 2 MiB holding tensor t where huge pages are there to fill (it
    need not hold it: the receiver refuses hugetlb memfds before it maps them), or "skip:" and why
    it cannot be made here."""
    try:
        fd = os.memfd_create("dlpack-hostile-huge", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB)
    except OSError as e:
        return "skip: memfd_create(MFD_HUGETLB): %s" % e.strerror
    try:
        os.ftruncate(fd, t.size)
    except OSError as e:
        os.close(fd)
        return "skip: ftruncate of a hugetlb memfd: %s" % e.strerror
    try:
        m = mmap.mmap(fd, t.size)  # hugetlbfs has no write(): fill it through a mapping
        for at, data in place(t.shape, t.strides, t.offset, t.dtype, t.values):
            m[at:at + len(data)] = data
        m.close()
    except OSError:
        pass  # no huge page free (/proc/sys/vm/nr_hugepages): sent empty
    fcntl.fcntl(fd, F_ADD_SEALS, SEALED)
    return fd


def huge_expect(t):
    def expect():
        fd = hugetlb(t)
        if isinstance(fd, str):
            return fd
        os.close(fd)
        return None
    return expect


HUGE = Tensor([3, 2], [float(i) - 2.5 for i in range(6)], offset=8192, size=2 << 20)


@case("memfd-hugetlb", "error", "a sealed MFD_HUGETLB memfd of 2 MiB, the tensor at offset 8192: refused (a "
      "hole the peer punches in it would not be filled again at the next touch: SIGBUS)", huge_expect(HUGE))
def _(p):
    fd = hugetlb(HUGE)
    if not isinstance(fd, str):
        p.send(HUGE.message(), [fd])


HUGE0 = Tensor([2, 2], [1.0, 2.0, 3.0, 4.0], offset=0, size=2 << 20)


@case("memfd-hugetlb-at-0", "error", "a sealed MFD_HUGETLB memfd of 2 MiB, the tensor at offset 0: refused",
      huge_expect(HUGE0))
def _(p):
    fd = hugetlb(HUGE0)
    if not isinstance(fd, str):
        p.send(HUGE0.message(), [fd])


# what must succeed

EXACT = Tensor([2, 3], [float(i) * 1.25 for i in range(6)], strides=[1, 2], offset=4104)


@case("exact-cover", "tensor", "the control case: float64 {2, 3} strides {1, 2} at offset 4104, in a sealed memfd "
      "of exactly 4104 + 48 bytes", EXACT)
def _(p):
    p.send(EXACT.message(), [EXACT.fd()])


@case("readonly-descriptor", "readonly", "a sealed memfd reopened O_RDONLY: a read-only tensor", PLAIN)
def _(p):
    fd = PLAIN.fd()
    ro = os.open("/proc/self/fd/%d" % fd, os.O_RDONLY | os.O_CLOEXEC)
    os.close(fd)
    p.send(PLAIN.message(), [ro])


WSEALED = Tensor([3], [1.0, 2.0, 3.0], seals=SEALED | F_SEAL_WRITE)


@case("write-sealed", "readonly", "a memfd sealed against shrinking, growing and writing: a read-only tensor",
      WSEALED)
def _(p):
    p.send(WSEALED.message(), [WSEALED.fd()])


FWSEALED = Tensor([3], [4.0, 5.0, 6.0], seals=SEALED | F_SEAL_FUTURE_WRITE)


@case("future-write-sealed", "readonly", "a memfd sealed with F_SEAL_FUTURE_WRITE (no new writable mapping): a "
      "read-only tensor", FWSEALED)
def _(p):
    p.send(FWSEALED.message(), [FWSEALED.fd()])


FLAGGED = Tensor([2], [5.0, 6.0], flags=FLAG_READ_ONLY)


@case("readonly-flag", "readonly", "the READ_ONLY flag on a writable memfd: a read-only tensor", FLAGGED)
def _(p):
    p.send(FLAGGED.message(), [FLAGGED.fd()])


FLIPPED = Tensor([2, 3], [float(10 + i) for i in range(6)], strides=[-3, -1], offset=40, size=48)


@case("negative-strides", "tensor", "float64 {2, 3} strides {-3, -1} from offset 40 in 48 bytes (flipped)", FLIPPED)
def _(p):
    p.send(FLIPPED.message(), [FLIPPED.fd()])


ZERO_D = Tensor([], [42.5], offset=16)


@case("zero-d", "tensor", "a 0-d float64 at offset 16", ZERO_D)
def _(p):
    p.send(ZERO_D.message(), [ZERO_D.fd()])


EMPTY = Tensor([0, 5], [], size=4096)


@case("empty-tensor", "tensor", "float64 {0, 5} in a 4096-byte memfd", EMPTY)
def _(p):
    p.send(EMPTY.message(), [EMPTY.fd()])


EMPTY0 = Tensor([0], [], size=0)


@case("empty-in-empty-file", "tensor", "float64 {0} in a memfd of 0 bytes", EMPTY0)
def _(p):
    p.send(EMPTY0.message(), [EMPTY0.fd()])


EXPANDED = Tensor([3, 2], [7.0, 8.0] * 3, strides=[0, 1])


@case("broadcast", "tensor", "float64 {3, 2} strides {0, 1} over 16 bytes (an expanded view)", EXPANDED)
def _(p):
    p.send(EXPANDED.message(), [EXPANDED.fd()])


HUGE_BROADCAST = Tensor([1 << 62], [], strides=[0], size=8)
HUGE_BROADCAST.expect = lambda: "float64;%d;0;*" % (1 << 62)


@case("broadcast-2^62", "tensor", "float64 {2^62} stride 0 over 8 bytes: 2^62 elements in one (as t:expand makes; "
      "the values are not compared)", HUGE_BROADCAST)
def _(p):
    p.send(HUGE_BROADCAST.message(), [memfd(8, writes=[(0, struct.pack("<d", 9.0))])])


MISALIGNED = Tensor([3], [0.1, 0.2, 0.3], offset=4099)


@case("misaligned", "tensor", "float64 {3} at byte offset 4099 (not a multiple of 8)", MISALIGNED)
def _(p):
    p.send(MISALIGNED.message(), [MISALIGNED.fd()])


FAR = Tensor([2], [1.0, 2.0], strides=[1 << 20], offset=(1 << 30) - 8, size=(1 << 30) + (8 << 20))


@case("sparse-far", "tensor", "float64 {2} stride 2^20 at offset 2^30 - 8 in a 1 GiB + 8 MiB sparse memfd", FAR)
def _(p):
    p.send(FAR.message(), [FAR.fd()])


class Raw(Tensor):
    """A tensor of a dtype struct cannot write: its bytes given, its values not compared (or given)."""

    def __init__(self, name, code_bits_lanes, shape, strides, data, flags=0, values="*"):
        Tensor.__init__(self, shape, [], strides=strides, size=len(data), flags=flags)
        self.name, self.cbl, self.data, self.raw_values = name, code_bits_lanes, data, values

    def expect(self):
        return "%s;%s;%s;%s" % (self.name, ",".join(map(str, self.shape)), ",".join(map(str, self.strides)),
                                self.raw_values)

    def fd(self):
        return memfd(self.size, writes=[(0, self.data)])

    def message(self, **spoil):
        return encode(self.shape, strides=self.strides, code_bits_lanes=self.cbl, size=self.size, flags=self.flags,
                      **spoil)


FLOAT4 = Raw("float4_e2m1fn", (17, 4, 1), [3], [1], b"\x21\x03")


@case("float4-packed", "tensor", "float4_e2m1fn {3} packed in 2 bytes", FLOAT4)
def _(p):
    p.send(FLOAT4.message(), [FLOAT4.fd()])


FLOAT4_PADDED = Raw("float4_e2m1fn", (17, 4, 1), [3], [2], b"\x01\xff\x02\xff\x03", flags=4)


@case("float4-padded", "tensor", "float4_e2m1fn {3} stride 2, one byte each (IS_SUBBYTE_TYPE_PADDED)",
      FLOAT4_PADDED)
def _(p):
    p.send(FLOAT4_PADDED.message(), [FLOAT4_PADDED.fd()])


BOOLS = Raw("bool", (6, 8, 1), [4], [1], b"\x00\x01\x02\xff", values="false,true,true,true")


@case("bool-bytes", "tensor", "bool {4} holding the bytes 0, 1, 2, 255 (not only 0 and 1)", BOOLS)
def _(p):
    p.send(BOOLS.message(), [BOOLS.fd()])


NDIM64 = Tensor([1] * 64, [3.5], offset=8)


@case("ndim-64", "tensor", "a float64 of 64 dimensions of size 1 (the largest message)", NDIM64)
def _(p):
    msg = NDIM64.message()
    assert len(msg) == MAX_MESSAGE
    p.send(msg, [NDIM64.fd()])


TIB = Tensor([2], [-1.0, 1.0], offset=(1 << 40) - 16, size=1 << 40)


@case("sparse-1tib", "tensor", "float64 {2} in the last 16 bytes of a sparse 1 TiB memfd", TIB)
def _(p):
    p.send(TIB.message(), [TIB.fd()])


VAST = Tensor([2], [5.0, -5.0], strides=[1 << 42], offset=8, size=(1 << 45) + 16)


@case("sparse-32tib-span", "tensor-or-error", "float64 {2} 32 TiB apart in a sparse memfd of 32 TiB + 16 bytes "
      "(the receiver maps the whole span, or says it cannot)", VAST)
def _(p):
    p.send(VAST.message(), [VAST.fd()])


INTS = Tensor([2, 2], [-(1 << 31), (1 << 31) - 1, 0, -1], dtype="int32", strides=[1, 2])


@case("int32-transposed", "tensor", "int32 {2, 2} strides {1, 2}", INTS)
def _(p):
    p.send(INTS.message(), [INTS.fd()])


# peers that go away

@case("close-at-once", "closed", "connects and closes at once")
def _(p):
    p.close()


SENT = Tensor([4], [1.0, 2.0, 3.0, 4.0])


@case("send-then-close", "tensor,closed", "sends a valid tensor and closes at once (the message still arrives)",
      SENT)
def _(p):
    p.send(SENT.message(), [SENT.fd()])
    p.close()


@case("garbage-then-close", "error,closed", "sends garbage with a memfd and closes at once")
def _(p):
    p.send(garbage(100, 5), [PLAIN.fd()])
    p.close()


@case("three-then-close", "error,error,error,closed", "sends a wrong magic, a pipe and a message without "
      "descriptor, then closes")
def _(p):
    p.send(PLAIN.message(magic=b"DLPK"), [PLAIN.fd()])
    r, w = os.pipe()
    p.send(PLAIN.message(), [r])
    os.close(w)
    p.send(PLAIN.message())
    p.close()


@case("close-unread", "closed", "waits for the receiver's message (the spec sends one first) and closes without "
      "reading it")
def _(p):
    select.select([p.sock], [], [], 10)
    p.close()


@case("shutdown-write", "tensor,closed", "sends a valid tensor, shuts down its writing side and waits 0.2 s",
      SENT)
def _(p):
    p.send(SENT.message(), [SENT.fd()])
    p.sock.shutdown(socket.SHUT_WR)
    time.sleep(0.2)
    p.close()


# ---- a strict reference receiver, for --self-test: the corpus checked against docs/ipc.md ----

class Refused(Exception):
    pass


KNOWN = {(0, 8), (0, 16), (0, 32), (0, 64), (1, 8), (1, 16), (1, 32), (1, 64), (2, 16), (2, 32), (2, 64),
         (4, 16), (5, 64), (5, 128), (6, 8), (7, 8), (8, 8), (9, 8), (10, 8), (11, 8), (12, 8), (13, 8), (14, 8),
         (15, 6), (16, 6), (17, 4)}
FORMATS = {(2, 64): "d", (0, 32): "i", (6, 8): "?"}


def render(values):
    """Values as --list writes them (booleans in Lua's spelling)."""
    return ",".join(("true" if v else "false") if isinstance(v, bool) else str(v) if v == "*" else repr(v)
                    for v in values)


def receive(sock):
    """One message as docs/ipc.md's threat model has the receiver check it: (dtype code, bits, shape,
    values, readonly), or Refused. Every descriptor received is closed unless kept, whatever happens."""
    fds = []
    try:
        while True:
            try:
                data, anc, flags, _ = sock.recvmsg(MAX_MESSAGE + 1, socket.CMSG_SPACE(4 * 4),
                                                   socket.MSG_CMSG_CLOEXEC)
                break
            except ConnectionResetError:
                # the peer closed with records of ours unread: the kernel says so once, even before
                # the records it sent that are still queued; those come next, then the end
                continue
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds += struct.unpack("%di" % (len(payload) // 4), payload[:len(payload) // 4 * 4])
        if not data and not fds and not anc:
            poller = select.poll()
            poller.register(sock, select.POLLRDHUP)
            if poller.poll(0):
                raise Refused("closed")
            raise Refused("an empty record")
        if flags & socket.MSG_TRUNC:
            raise Refused("record too long")
        if flags & socket.MSG_CTRUNC:
            raise Refused("too many descriptors")
        if len(data) < HEADER:
            raise Refused("record too short")
        magic, version, kind, length, crc = struct.unpack_from("<4sHHII", data)
        dev, dev_id, code, bits, lanes, ndim = struct.unpack_from("<IIBBHI", data, 16)
        flags_, size, offset = struct.unpack_from("<QQQ", data, 32)
        if magic != MAGIC:
            raise Refused("bad magic")
        if version != VERSION:
            raise Refused("unknown version %d" % version)
        if kind != KIND_TENSOR:
            raise Refused("unknown kind %d" % kind)
        if length != len(data):
            raise Refused("length field disagrees")
        if ndim > MAX_NDIM:
            raise Refused("ndim")
        if length != HEADER + 16 * ndim:
            raise Refused("length field disagrees with ndim")
        zeroed = bytearray(data)
        struct.pack_into("<I", zeroed, CRC_AT, 0)
        if zlib.crc32(bytes(zeroed)) & 0xFFFFFFFF != crc:
            raise Refused("crc")
        if dev != CPU or dev_id != 0:
            raise Refused("device")
        if (code, bits) not in KNOWN or lanes != 1:
            raise Refused("dtype")
        if flags_ & ~(FLAG_READ_ONLY | 4):
            raise Refused("flags")
        if flags_ & 4 and bits >= 8:
            raise Refused("flags")
        shape = struct.unpack_from("<%dq" % ndim, data, HEADER)
        strides = struct.unpack_from("<%dq" % ndim, data, HEADER + 8 * ndim)
        packed = bits < 8 and not flags_ & 4
        itemsize = max(bits // 8, 1)
        numel = 1
        for n in shape:
            if n < 0:
                raise Refused("negative shape")
            numel *= n
            if numel >= 1 << 63:
                raise Refused("shape overflows")
        if offset >= 1 << 63 or size >= 1 << 63:
            raise Refused("offset or size out of range")
        lo = hi = 0
        if numel and packed:
            step = 1
            for n, st in reversed(list(zip(shape, strides))):
                if n != 1 and st != step:
                    raise Refused("a packed layout that is not contiguous")
                step *= n
            hi, itemsize = 0, (numel * bits + 7) // 8
        elif numel:
            for n, st in zip(shape, strides):
                if st < 0:
                    lo += (n - 1) * st * itemsize
                else:
                    hi += (n - 1) * st * itemsize
        if numel:
            if not (-(1 << 63) <= offset + lo and offset + hi + itemsize < 1 << 63):
                raise Refused("layout overflows")
            if offset + lo < 0 or offset + hi + itemsize > size:
                raise Refused("layout outside the file")
        if len(fds) != 1:
            raise Refused("%d descriptors" % len(fds))
        fd = fds[0]
        try:
            seals = fcntl.fcntl(fd, F_GET_SEALS)
        except OSError:
            raise Refused("not a memfd")
        if seals & SEALED != SEALED:
            raise Refused("not sealed")
        st = os.fstat(fd)
        if st.st_blksize != mmap.PAGESIZE:  # hugetlbfs: blocks of a huge page
            raise Refused("a hugetlb memfd")
        if st.st_size != size:
            raise Refused("size disagrees")
        mode = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
        if mode == os.O_WRONLY:
            raise Refused("write-only descriptor")
        readonly = bool(mode == os.O_RDONLY or seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE) or flags_ & 1)
        values = []
        if numel > 1 << 20 or (code, bits) not in FORMATS:
            values = ["*"]
        elif numel:
            first = (offset + lo) // mmap.PAGESIZE * mmap.PAGESIZE
            m = mmap.mmap(fd, offset + hi + itemsize - first, offset=first, prot=mmap.PROT_READ)
            fmt = "<" + FORMATS[(code, bits)]
            for idx in indices(list(shape)):
                at = offset - first + itemsize * sum(i * st for i, st in zip(idx, strides))
                values.append(struct.unpack_from(fmt, m, at)[0])
            m.close()
        return code, bits, list(shape), values, readonly
    finally:
        for fd in fds:
            os.close(fd)


def self_test():
    """Sends every case to the reference receiver in this process; checks each outcome, the control
    message after each, and that no descriptor is left open."""
    import threading
    before = len(os.listdir("/proc/self/fd"))
    path = "@dlpack-hostile-self-test-%d" % os.getpid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind("\0" + path[1:])
    listener.listen(4)
    failures = 0
    groups = [["all"]] + [[name] for name, outcomes, *_ in CASES if outcomes.endswith("closed")]
    for group in groups:
        chosen = select_cases(group)
        sender = threading.Thread(target=run, args=(path, chosen))
        sender.start()
        conn, _ = listener.accept()
        if group != ["all"]:
            try:
                conn.send(b"a message the peer does not read")  # close-unread waits for one
            except BrokenPipeError:  # close-at-once was quicker
                pass
        for n in chosen:
            name, outcomes, _, expect, _ = CASES[n - 1]
            expect = expect_of(expect)
            for outcome in outcomes.split(","):
                if expect.startswith("skip:"):
                    continue
                try:
                    got = receive(conn)
                except Refused as e:
                    got = e
                if outcome == "tensor-or-error" and isinstance(got, Refused):
                    ok = str(got) != "closed"
                elif outcome in ("error", "closed"):
                    ok = isinstance(got, Refused) and (outcome == "error") == (str(got) != "closed")
                else:
                    values = expect.split(";")[3]
                    ok = not isinstance(got, Refused) and got[4] == (outcome == "readonly") and \
                        values in ("*", render(got[3]))
                print("%s %d %s: %s -> %s" % ("ok" if ok else "not ok", n, name, outcome, got))
                failures += not ok
            if not outcomes.endswith("closed"):
                got = receive(conn)
                ok = got[3] == control_tensor(n).values
                failures += not ok
                if not ok:
                    print("not ok %d %s: control %s" % (n, name, got))
        try:
            got = receive(conn)
        except Refused as e:
            got = e
        if str(got) != "closed":
            failures += 1
            print("not ok: after %s: %s, not closed" % (group, got))
        sender.join()
        conn.close()
    listener.close()
    after = len(os.listdir("/proc/self/fd"))
    if after != before:
        failures += 1
        print("not ok: %d descriptors before, %d after" % (before, after))
    print("%d failure(s)" % failures)
    return 1 if failures else 0


def expect_of(expect):
    if callable(expect):
        expect = expect()
    if expect is None:
        return "-"
    return expect if isinstance(expect, str) else expect.expect()


def select_cases(args):
    """Case numbers from names, numbers and "all" (every case that keeps the channel open)."""
    numbers = {name: n for n, (name, *_) in enumerate(CASES, 1)}
    chosen = []
    for arg in args:
        if arg == "all":
            chosen += [n for n, c in enumerate(CASES, 1) if not c[1].endswith("closed")]
        elif arg.isdigit() and 1 <= int(arg) <= len(CASES):
            chosen.append(int(arg))
        elif arg in numbers:
            chosen.append(numbers[arg])
        else:
            raise SystemExit("hostile.py: no case %r (--list lists them)" % arg)
    return chosen


def run(path, chosen):
    p = Peer(path)
    for n in chosen:
        name, outcomes, _, _, fn = CASES[n - 1]
        fn(p)
        if outcomes.endswith("closed"):
            break
        control = control_tensor(n)
        p.send(control.message(), [control.fd()])
    p.close()


def main(argv):
    if len(argv) == 2 and argv[1] == "--list":
        for number, (name, outcomes, what, expect, _) in enumerate(CASES, 1):
            print("%d\t%s\t%s\t%s\t%s" % (number, name, outcomes, expect_of(expect), what))
        return 0
    if len(argv) == 2 and argv[1] == "--self-test":
        return self_test()
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    chosen = select_cases(argv[2:])
    run(argv[1], chosen)
    print("hostile.py: sent %d case(s)" % len(chosen))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
