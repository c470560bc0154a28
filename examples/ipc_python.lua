--- A Lua process (a game, a robot controller) and a Python process (an inference server with
-- NumPy and PyTorch) share camera frames without copying them: dlpack.ipc on this side,
-- examples/dlpack_ipc.py on the other (docs/ipc.md).
--
--   lua5.4 examples/ipc_python.lua [frames]     (starts examples/ipc_inference.py itself)
--
-- Each frame is written in place into one shareable {480, 640, 3} uint8 tensor and sent; the
-- Python process maps the same pages, computes the mean of each channel (with PyTorch when it is
-- installed) and sends back a small shareable float64 tensor. Only descriptors and a few bytes
-- of layout cross the socket. Set PYTHON to choose the interpreter (NumPy >= 2 needed there;
-- `make deps` puts one in build/pydeps).
local dlpack = require "dlpack"
local ipc = require "dlpack.ipc"

local FRAMES = tonumber(arg and arg[1]) or 20
local here = (arg and arg[0] or "examples/ipc_python.lua"):match("^(.*)/[^/]*$") or "."
local pid = io.open("/proc/self/stat"):read("*l"):match("^%d+")
local path = "@dlpack-ipc-python-" .. pid
local function exists(file)
  local f = io.open(file, "rb")
  if f then f:close() end
  return f ~= nil
end
local python = os.getenv("PYTHON") or (exists("/usr/bin/python3") and "/usr/bin/python3" or "python3")
local pydeps = here .. "/../build/pydeps"

local listener = ipc.listen(path)
local child = io.popen(("PYTHONPATH=%q:\"$PYTHONPATH\" %s %q %q"):format(pydeps, python,
  here .. "/ipc_inference.py", path), "r")
local ch = listener:accept(30)
listener:close()
if not ch then
  print(child:read("*a"))
  error("the Python process did not connect within 30 s (is NumPy installed for " .. python .. "?)")
end

local frame = ipc.zeros({480, 640, 3}, "uint8")
local ramp = (dlpack.arange(640) % 256):to("uint8"):expand({480, 640})
local t0 = os.clock()
for i = 1, FRAMES do
  -- a frame: a gradient that moves with i, the frame number in the first pixel
  frame:select(3, 1):copy(ramp)
  frame:select(3, 2):fill(i % 256)
  frame:select(3, 3):fill(255 - i % 256)
  frame[1][1][1] = i % 256
  ch:send(frame)
  local answer = ch:recv(10)
  assert(answer, "no answer within 10 s")
  local means = frame:to("float64"):reshape({-1, 3}):mean(1)
  for c = 1, 3 do
    assert(math.abs(answer[c] - means[c]) < 1e-9, ("channel %d: Python says %g, Lua %g"):format(c, answer[c], means[c]))
  end
  assert(answer[4] == i % 256, "Python did not see this frame's number")
  if i == FRAMES then
    print(("frame %d: means %.3f %.3f %.3f, agreed on both sides; the answer is shareable: %s"):format(
      i, answer[1], answer[2], answer[3], tostring(answer.shareable)))
  end
end
print(("%d frames of %d bytes to Python and back in %.1f ms of this process's CPU time"):format(
  FRAMES, frame.nbytes, (os.clock() - t0) * 1e3))
ch:close()
io.write(child:read("*a"))
assert(child:close(), "the Python process failed")
