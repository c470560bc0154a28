"""A hostile dlpack.ipc peer for the CUDA tests (spec/cuda/ipc_suite.lua): connects to PATH and
sends one crafted message about a CUDA tensor per CASE, each with one descriptor attached, then
waits until the receiver closes the channel. Standard library only.

    python3 spec/cuda/ipc_hostile.py PATH CASE...

Cases (the wire format is docs/ipc.md's, version 1):
  memfd        device_type 2 with a plain sealed memfd of 2 MiB (not the driver's descriptor)
  pipe         device_type 2 with the read end of a pipe
  granularity  size 2 MiB + 4096: not a multiple of any GPU's granularity
  span         size 2 MiB, a float32 layout of 4 MiB
  offset       size 2 MiB, offset 2^63 + 8 with an empty shape
  device       device id 7 (the tests run with fewer devices)
  forged-small fake driver only: its memfd (named as the fake names them) of 2 MiB, size 4 MiB
  forged       fake driver only: a memfd of 2 MiB named as the fake's, holding float32 1.5, 2.5, 3.5, 4.5
"""
import fcntl
import os
import socket
import struct
import sys
import zlib

MIB2 = 2 << 20


def message(size, shape=(4,), device_id=0, offset=0, dtype=(2, 32)):
    ndim = len(shape)
    strides, step = [], 1
    for n in reversed(shape):
        strides.insert(0, step)
        step *= n
    length = 56 + 16 * ndim
    b = bytearray(length)
    b[0:4] = b"DLIP"
    struct.pack_into("<HHII", b, 4, 1, 1, length, 0)
    struct.pack_into("<iiBBHIQQQ", b, 16, 2, device_id, dtype[0], dtype[1], 1, ndim, 0, size, offset)
    struct.pack_into("<%dq" % ndim, b, 56, *shape)
    struct.pack_into("<%dq" % ndim, b, 56 + 8 * ndim, *strides)
    struct.pack_into("<I", b, 12, zlib.crc32(bytes(b)) & 0xFFFFFFFF)
    return bytes(b)


def memfd(name, size, data=b""):
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    if data:
        os.pwrite(fd, data, 0)
    fcntl.fcntl(fd, 1033, 0x2 | 0x4)  # F_ADD_SEALS: F_SEAL_SHRINK | F_SEAL_GROW
    return fd


def case(name):
    """(message, descriptor) for one case"""
    if name == "memfd":
        return message(MIB2), memfd("plain", MIB2)
    if name == "pipe":
        r, w = os.pipe()
        os.close(w)
        return message(MIB2), r
    if name == "granularity":
        return message(MIB2 + 4096), memfd("plain", MIB2 + 4096)
    if name == "span":
        return message(MIB2, shape=(1 << 20,)), memfd("plain", MIB2)
    if name == "offset":
        return message(MIB2, shape=(0,), offset=(1 << 63) + 8), memfd("plain", MIB2)
    if name == "device":
        return message(MIB2, device_id=7), memfd("plain", MIB2)
    if name == "forged-small":
        return message(2 * MIB2), memfd("fakecuda-vmm:0", MIB2)
    if name == "forged":
        return message(MIB2), memfd("fakecuda-vmm:0", MIB2, struct.pack("<4f", 1.5, 2.5, 3.5, 4.5))
    raise SystemExit("unknown case " + name)


def main():
    path, names = sys.argv[1], sys.argv[2:]
    address = "\0" + path[1:] if path.startswith("@") else path
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.connect(address)
    for name in names:
        data, fd = case(name)
        sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", fd))])
        os.close(fd)
    sock.recv(1)  # until the receiver closes
    sock.close()
    print("sent " + " ".join(names), flush=True)


if __name__ == "__main__":
    main()
