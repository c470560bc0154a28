-- LÖVE configuration for the headless engine test (spec/stages/85-love.t): no window, no audio.
function love.conf(t)
  t.identity = "dlpack-spec"
  t.window = false
  t.console = false
  t.modules.audio = false
  t.modules.sound = false
  t.modules.window = false
  t.modules.graphics = false
  t.modules.joystick = false
  t.modules.physics = false
  t.modules.video = false
  t.modules.touch = false
  t.modules.mouse = false
  t.modules.keyboard = false
end
