"""The Python half of examples/ipc_python.lua: an "inference server" that receives camera
frames from a Lua process without copying them and answers with a result in shared memory.

    python3 examples/ipc_inference.py PATH      (examples/ipc_python.lua starts it)

Each frame arrives as a NumPy array on the memory the Lua process wrote (dlpack_ipc.recv maps
it); with PyTorch installed, torch.from_dlpack takes it without a copy either. The answer, the
mean of each colour channel and the frame number the Lua process wrote into the first pixel, is
written into one small shareable array and sent back; the Lua side reads it on the same pages.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # dlpack_ipc.py lives here

import numpy  # noqa: E402

import dlpack_ipc  # noqa: E402

from quiet_torch import import_torch  # noqa: E402

# None without PyTorch (NumPy alone computes the same answer); quiet beside NumPy 2 when torch was
# built for NumPy 1.x (this example never asks torch for NumPy)
torch = import_torch()


def main(path):
    answer = dlpack_ipc.zeros((4,), numpy.float64)  # shareable: sent back without a copy
    answer_t = torch.from_dlpack(answer) if torch is not None else None  # the same memory
    with dlpack_ipc.connect(path, timeout=10) as ch:
        while True:
            try:
                frame = ch.recv()
            except dlpack_ipc.ChannelClosed:
                break
            if torch is not None:
                pixels = torch.from_dlpack(frame)  # the Lua process's memory, no copy
                assert pixels.data_ptr() == frame.ctypes.data
                answer_t[:3] = pixels.reshape(-1, 3).double().mean(dim=0)
            else:
                answer[:3] = frame.reshape(-1, 3).mean(axis=0, dtype=numpy.float64)
            answer[3] = frame[0, 0, 0]
            ch.send(answer)
    print(f"ipc_inference: done ({'PyTorch' if torch is not None else 'NumPy'})", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
