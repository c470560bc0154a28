#!/usr/bin/env python3
"""Peers for spec/ipc_attack_spec.lua (docs/ipc.md, wire format version 1). Standard library only.

    attack_peer.py PATH hugetlb    sends a sealed MFD_HUGETLB memfd of one huge page as a uint8 tensor
                                   (prints "skip: why" when the kernel makes none)
    attack_peer.py PATH packed-offset
                                   sends packed sub-byte tensors that do not start at a page boundary:
                                   float4_e2m1fn {5} at byte 4099 and float6_e2m3fn {4} at byte 7 of a
                                   memfd of 8192 bytes whose byte i holds i % 251
"""

import fcntl
import os
import socket
import struct
import sys
import zlib

F_ADD_SEALS = 1033
SEALS = 2 | 4 | 1  # F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL
MFD_HUGETLB = 4


def address(path):
    return "\0" + path[1:] if path.startswith("@") else path


def encode(dtype, shape, size, offset=0, flags=0):
    """One message: dtype (code, bits), a contiguous shape."""
    ndim = len(shape)
    strides, step = [], 1
    for n in reversed(shape):
        strides.insert(0, step)
        step *= max(n, 1)
    n = 56 + 16 * ndim
    b = bytearray(b"DLIP" + struct.pack("<HHII", 1, 1, n, 0))
    b += struct.pack("<iiBBHI", 1, 0, dtype[0], dtype[1], 1, ndim)
    b += struct.pack("<QQQ", flags, size, offset)
    b += struct.pack("<%dq" % ndim, *shape) + struct.pack("<%dq" % ndim, *strides)
    b[12:16] = struct.pack("<I", zlib.crc32(bytes(b)) & 0xFFFFFFFF)
    return bytes(b)


def hugetlb(path):
    try:
        fd = os.memfd_create("attack", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING | MFD_HUGETLB)
        huge = 2 << 20
        os.ftruncate(fd, huge)
        fcntl.fcntl(fd, F_ADD_SEALS, SEALS)
    except OSError as e:
        print("skip: no sealed hugetlb memfd here (%s)" % e, flush=True)
        return
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(address(path))
    socket.send_fds(s, [encode((1, 8), [16], huge)], [fd])
    print("sent", flush=True)
    os.close(fd)
    s.recv(1)  # until the receiver closes


def packed_offset(path):
    fd = os.memfd_create("attack", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.pwrite(fd, bytes(i % 251 for i in range(8192)), 0)
    fcntl.fcntl(fd, F_ADD_SEALS, SEALS)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(address(path))
    socket.send_fds(s, [encode((17, 4), [5], 8192, offset=4099)], [fd])
    socket.send_fds(s, [encode((15, 6), [4], 8192, offset=7)], [fd])
    print("sent", flush=True)
    os.close(fd)
    s.recv(1)  # until the receiver closes


if __name__ == "__main__":
    {"hugetlb": hugetlb, "packed-offset": packed_offset}[sys.argv[2]](sys.argv[1])
