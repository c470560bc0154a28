-- dlpack inside a real engine: LÖVE 11 (LuaJIT), headless. Run from the repository root:
--   SDL_VIDEODRIVER=dummy SDL_AUDIODRIVER=dummy love spec/love
-- It loads the module from the LuaJIT build (build/luajit/, `make LUA=luajit`), wraps an
-- ImageData's pixels as an H x W x 4 uint8 tensor with no copy, edits them through views, exports
-- and re-imports them through a capsule, and reads the pixels back through LÖVE's own getPixel.
-- Prints TAP; the exit status is 0 when every test passed.
local root = love.filesystem.getSource():gsub("/spec/love/?$", "")
package.path = root .. "/lua/?.lua;" .. package.path
package.cpath = root .. "/build/luajit/?.so;" .. package.cpath

local tests, failed = 0, 0
local function check(name, fn)
  tests = tests + 1
  local ok, err = pcall(fn)
  if ok then
    print("ok " .. tests .. " - " .. name)
  else
    failed = failed + 1
    print("not ok " .. tests .. " - " .. name)
    print("# " .. tostring(err):gsub("\n", "\n# "))
  end
end

local function expect(cond, msg) if not cond then error(msg, 2) end end

-- A pixel as LÖVE reads it, in bytes (getPixel gives floats k / 255).
local function pixel(img, x, y)
  local r, g, b, a = img:getPixel(x, y)
  local function byte(v) return math.floor(v * 255 + 0.5) end
  return {byte(r), byte(g), byte(b), byte(a)}
end

local H, W = 4, 6
local dlpack, unsafe, img, t

check("the module loads under " .. jit.version .. " (" .. _VERSION .. ")", function()
  dlpack = require "dlpack"
  unsafe = require "dlpack.unsafe"
  expect(package.searchpath("dlpack.core", package.cpath):find("build/luajit", 1, true), "not the LuaJIT build")
end)

-- every channel of every pixel of tensor v is what LÖVE's getPixel reads from img
local function expect_pixels(v)
  for y = 0, H - 1 do
    for x = 0, W - 1 do
      local p = pixel(img, x, y)
      for c = 1, 4 do expect(v[y + 1][x + 1][c] == p[c], ("pixel %d,%d channel %d"):format(x, y, c)) end
    end
  end
end

check("an ImageData is an H x W x 4 uint8 tensor with no copy", function()
  img = love.image.newImageData(W, H, "rgba8")
  img:mapPixel(function(x, y) return x / 255, y / 255, (x + y) / 255, 1 end)
  t = unsafe.wrap(img:getFFIPointer(), {H, W, 4}, "uint8", img)
  expect(t.dtype == "uint8" and t.shape[1] == H and t.shape[2] == W and t.shape[3] == 4, "shape")
  expect(tonumber(require("ffi").cast("uintptr_t", img:getFFIPointer())) ==
         tonumber(require("ffi").cast("uintptr_t", t:data_ptr())), "the tensor is not on the ImageData's pixels")
  expect_pixels(t)
end)

check("a channel swap through views shows in getPixel", function()
  local r, b = t:select(3, 1), t:select(3, 3)
  local saved = r:clone()
  r:copy(b)
  b:copy(saved)
  for y = 0, H - 1 do
    for x = 0, W - 1 do
      local p = pixel(img, x, y)
      expect(p[1] == x + y and p[3] == x and p[2] == y, ("pixel %d,%d is %d,%d,%d"):format(x, y, p[1], p[2], p[3]))
    end
  end
end)

check("a region fill through a view shows in getPixel", function()
  t:narrow(1, 2, 2):narrow(2, 3, 3):fill(200) -- rows 2-3, columns 3-5 (1-based)
  for y = 0, H - 1 do
    for x = 0, W - 1 do
      local inside = y >= 1 and y <= 2 and x >= 2 and x <= 4
      local p = pixel(img, x, y)
      expect((p[4] == 200) == inside, ("pixel %d,%d alpha %d"):format(x, y, p[4]))
    end
  end
end)

check("export and re-import through a capsule give the pixels getPixel reads", function()
  local cap = dlpack.to_dlpack(t) -- a copy: the pixels belong to the ImageData (README)
  local u = dlpack.from_dlpack(cap)
  expect(dlpack.capsule_info(cap).consumed, "the capsule was not consumed")
  expect_pixels(u)
  local ok, err = pcall(dlpack.to_dlpack, t, {copy = false})
  expect(not ok and dlpack.is_buffer_error(err), "copy = false must raise a BufferError")
end)

check("a view keeps the ImageData alive after the script drops it", function()
  local view = t:transpose(1, 2)
  t, img = nil, nil
  collectgarbage()
  collectgarbage()
  expect(view[3][2][4] == 200, "the pixels changed")
  view:release()
end)

print("1.." .. tests)
io.stdout:flush()
love.event.quit(failed == 0 and 0 or 1)
function love.run()
  return function()
    love.event.pump()
    for name, a in love.event.poll() do
      if name == "quit" then return a or 0 end
    end
  end
end
