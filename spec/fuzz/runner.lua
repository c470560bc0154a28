-- What both halves of the fuzzer (fuzz.lua, cuda.lua) share: their command line and the loop
-- over seeds with its output (one line per seed, a summary, the command that reproduces the
-- first failing seed), which spec/fuzz/asan.sh and spec/stages/55-fuzz.t read.
local M = {}

-- Puts the module's lua/ and build/ (beside `here`, the fuzzer's folder) on the paths, unless
-- LUA_PATH and LUA_CPATH say where they are.
function M.paths(here)
  local root = here .. "/../.."
  if not os.getenv("LUA_PATH") then
    package.path = package.path .. ";" .. root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua"
  end
  if not os.getenv("LUA_CPATH") then package.cpath = root .. "/build/?.so;" .. package.cpath end
end

-- Reads the command line into the options table o: --seed S, --steps N, --seeds K, --seconds T and
-- --verbose (or DLPACK_FUZZ_VERBOSE=1: how spec/fuzz/asan.sh says it, leaving the arguments as they
-- are without it); `extra[flag](next_arg)` reads a flag of one half (next_arg() gives the next
-- argument); anything else prints `usage` and exits with status 2.
function M.options(name, o, usage, extra)
  local i = 1
  if os.getenv("DLPACK_FUZZ_VERBOSE") == "1" then o.verbose = true end
  local function next_arg()
    i = i + 1
    return arg[i]
  end
  local function num(flag)
    local v = math.tointeger(tonumber(next_arg()))
    if not v then
      io.stderr:write(name, ": ", flag, " wants an integer\n")
      os.exit(2)
    end
    return v
  end
  local common = { ["--seed"] = "seed", ["--steps"] = "steps", ["--seeds"] = "seeds", ["--seconds"] = "seconds" }
  while arg and arg[i] do
    local a = arg[i]
    if common[a] then o[common[a]] = num(a)
    elseif a == "--verbose" or a == "-v" then o.verbose = true
    elseif extra and extra[a] then extra[a](next_arg, num)
    else
      io.stderr:write("usage: ", usage, "\n")
      os.exit(2)
    end
    i = i + 1
  end
  return o
end

-- The methods both halves' seed states share (a state has .seed, .step, .failures and .last):
-- S:fail(msg) records a failure and prints it; S:note(desc) names what runs next, printed (and
-- flushed, so that the last line before a crash names it) with verbose.
function M.seed_methods(S, verbose)
  function S:fail(msg)
    local f = string.format("seed %d step %d: %s\n    last call: %s", self.seed, self.step, msg, self.last)
    self.failures[#self.failures + 1] = f
    io.stderr:write("FAIL ", f, "\n")
    io.stderr:flush()
  end

  function S:note(desc)
    self.last = desc
    if verbose then
      io.stdout:write("[", self.seed, ":", self.step, "] ", desc, "\n")
      io.stdout:flush()
    end
  end
end

-- A function that picks one of ops (a list of {weight =, ...}) at random, in proportion to its
-- weight, with one draw of math.random.
function M.picker(ops)
  local total = 0
  for _, o in ipairs(ops) do total = total + o.weight end
  return function()
    local r = math.random(total)
    for _, o in ipairs(ops) do
      r = r - o.weight
      if r <= 0 then return o end
    end
    return ops[#ops]
  end
end

-- Runs run_seed(seed) (it returns the seed's state: .step, .calls, .failures) from options.seed,
-- for options.seeds seeds or options.seconds seconds, counting `failures` found before; prints a
-- line per seed, the summary (`label` names the half) and, when a seed failed,
-- reproduce(first failing seed). Exits: 0 when nothing failed, 1 otherwise.
function M.run(options, label, run_seed, failures, reproduce)
  local out = io.stdout
  local start, wall0 = os.clock(), os.time()
  local seed = options.seed
  local nseeds, ncalls, nfail = 0, 0, failures
  local failed_seeds = {}
  while options.seeds > 0 or options.seconds do
    local t0 = os.clock()
    local st = run_seed(seed)
    nseeds = nseeds + 1
    ncalls = ncalls + st.calls
    local status = #st.failures == 0 and "ok" or ("FAILED (" .. #st.failures .. ")")
    if #st.failures > 0 then
      nfail = nfail + #st.failures
      failed_seeds[#failed_seeds + 1] = seed
    end
    out:write(string.format("seed %d: %d steps, %d calls, %.2fs cpu: %s\n", seed, st.step, st.calls,
      os.clock() - t0, status))
    out:flush()
    seed = seed + 1
    if options.seconds then
      if os.time() - wall0 >= options.seconds then break end
    elseif nseeds >= options.seeds then
      break
    end
  end
  local secs = os.clock() - start
  out:write(string.format("%s: %d seeds (%d..%d), %d calls in %.1fs cpu, %ds wall (%.0f calls/s cpu), %d failures%s\n",
    label, nseeds, options.seed, seed - 1, ncalls, secs, os.time() - wall0, ncalls / math.max(secs, 1e-3), nfail,
    #failed_seeds > 0 and (" in seeds " .. table.concat(failed_seeds, " ")) or ""))
  if #failed_seeds > 0 then out:write("reproduce: ", reproduce(failed_seeds[1]), "\n") end
  out:flush()
  os.exit(nfail == 0 and 0 or 1, true)
end

return M
