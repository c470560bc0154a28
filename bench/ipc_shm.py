"""The baseline of the make bench row "Lua to Python and back, 6 MB" (bench/run.lua): the same
round trip done the way Python programs do it without dlpack_ipc, with the standard library's
multiprocessing.shared_memory between two Python processes.

A 1080p uint8 frame (1080 x 1920 x 3, 6.2 MB) lives in one SharedMemory block. One round trip:
the parent sends the block's name, shape and dtype through a multiprocessing Pipe; the child
attaches the block (shm_open and mmap), views it as a NumPy array, sends the name back and
detaches; the parent attaches it again, views it and detaches. That is what a dlpack.ipc round
trip does too (each side maps what it receives), with a name instead of a descriptor.

Prints "<row key> shm <seconds per round trip>", the median of ROUNDS batches, as bench/peers.py
does; prints nothing (and why, on stderr) without NumPy.
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "build", "pydeps"))

ROUNDS = int(os.environ.get("DLPACK_BENCH_ROUNDS", "9"))
SHAPE = (1080, 1920, 3)


def attach(name, shape, dtype):
    import numpy
    from multiprocessing import shared_memory
    block = shared_memory.SharedMemory(name=name)
    array = numpy.ndarray(shape, dtype, buffer=block.buf)
    return block, array


def echo(conn):
    while True:
        message = conn.recv()
        if message is None:
            return
        block, array = attach(*message)
        conn.send((block.name, array.shape, array.dtype.str))
        del array
        block.close()


def main():
    try:
        import numpy
        import multiprocessing
        from multiprocessing import shared_memory
    except ImportError as e:
        print(f"# ipc_shm: {e}", file=sys.stderr)
        return
    frame = numpy.zeros(SHAPE, numpy.uint8)
    block = shared_memory.SharedMemory(create=True, size=frame.nbytes)
    parent, child_end = multiprocessing.Pipe()
    child = multiprocessing.get_context("fork").Process(target=echo, args=(child_end,))
    child.start()
    try:
        sink = 0

        def round_trip():
            nonlocal sink
            parent.send((block.name, SHAPE, "|u1"))
            back, array = attach(*parent.recv())
            sink += int(array[0, 0, 0])
            del array
            back.close()

        n = 1
        while True:
            t0 = time.perf_counter()
            for _ in range(n):
                round_trip()
            if time.perf_counter() - t0 >= 0.02:
                break
            n *= 2
        times = []
        for _ in range(ROUNDS):
            t0 = time.perf_counter()
            for _ in range(n):
                round_trip()
            times.append((time.perf_counter() - t0) / n)
        times.sort()
        print(f"ipc_python shm {times[len(times) // 2]:.9g}", flush=True)
    finally:
        parent.send(None)
        child.join()
        block.close()
        block.unlink()


if __name__ == "__main__":
    main()
