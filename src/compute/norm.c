/* norm: NumPy's linalg.norm, composed of the module's own reductions and elementwise functions.
 * It is a Lua chunk (compiled once per state, when the module opens) because every step is a
 * call of another function of the module on a whole tensor: the chunk reaches them through the
 * tensors' methods (the tensor metatable is protected, so a script cannot swap them), and the
 * work is theirs (C loops). Each reduction keeps its dims, so that the last steps (sqrt, the 1/p
 * power) round in the result's dtype, as NumPy's; the reduced dims are dropped at the end. */
#include <string.h>

#include "internal.h"

static const char norm_chunk[] =
    "local what = 'dlpack.norm'\n"
    "local KIND = {bool = 'i', int8 = 'i', int16 = 'i', int32 = 'i', int64 = 'i', uint8 = 'i', uint16 = 'i',\n"
    "  uint32 = 'i', uint64 = 'i', float16 = 'f', bfloat16 = 'f', float32 = 'f', float64 = 'f',\n"
    "  complex64 = 'c', complex128 = 'c'}\n"
    "local huge = 1 / 0\n"
    "local function fail(msg) raise(what .. ': ' .. msg) end\n"
    "local function dim_of(d, nd)\n"
    "  if kind_of(d) ~= 'number' or d % 1 ~= 0 then fail('dim must be an integer') end\n"
    "  if d < 0 then d = d + nd + 1 end\n"
    "  if d < 1 or d > nd then fail('dimension ' .. d .. ' out of range (tensor has ' .. nd .. ')') end\n"
    "  return d\n"
    "end\n"
    "-- max of |x| (x >= 0) along d, 0 where nothing is reduced (NumPy's max with initial=0 in norm)\n"
    "local function amax(x, d, keep)\n"
    "  if x:numel() == 0 then return x:sum(d, keep) end\n"
    "  return (x:max(d, keep))\n"
    "end\n"
    "return function(t, ord, dim, keepdim, extra)\n"
    "  if extra ~= nil then fail('unexpected argument (dlpack.norm takes (t [, ord [, dim [, keepdim]]]))') end\n"
    "  local is_tensor, nd = is_tensor_fn(t)\n"
    "  if not is_tensor then fail('a tensor expected, got ' .. kind_of(t)) end\n"
    "  if keepdim ~= nil and kind_of(keepdim) ~= 'boolean' then fail('keepdim must be true, false or nil') end\n"
    "  if ord ~= nil and kind_of(ord) ~= 'number' and ord ~= 'fro' and ord ~= 'nuc' then\n"
    "    fail(\"ord must be a number, 'fro', 'nuc' or nil\")\n"
    "  end\n"
    "  local dims\n"
    "  if dim == nil then\n"
    "    if ord ~= nil and nd ~= 1 and nd ~= 2 then fail('an ord needs a 1-d or 2-d tensor, or dim') end\n"
    "    if ord == nil then dims = {} for k = 1, nd do dims[k] = k end\n"
    "    else dims = nd == 1 and {1} or {1, 2} end\n"
    "  elseif kind_of(dim) == 'number' then dims = {dim_of(dim, nd)}\n"
    "  elseif pair(dim) then\n"
    "    local d1, d2 = pair(dim)\n"
    "    dims = {dim_of(d1, nd), dim_of(d2, nd)}\n"
    "    if dims[1] == dims[2] then fail('dimension ' .. dims[1] .. ' given twice') end\n"
    "  else fail('dim must be a number, a table of two numbers or nil') end\n"
    "  local kind = KIND[t.dtype]\n"
    "  if not kind then fail(t.dtype .. ' tensors do not compute (convert them first)') end\n"
    "  local x = kind == 'i' and t:to('float64') or t\n"
    "  local a = x:abs()\n"
    "  if kind == 'c' then a = a:to(t.dtype == 'complex64' and 'float32' or 'float64') end\n"
    "  local keep = {keepdim = true}\n"
    "  local r\n"
    "  if #dims == 1 or (dim == nil and ord == nil) then -- a vector norm (over every element without ord)\n"
    "    local d = #dims == 1 and dims[1] or dims\n"
    "    if ord == 'fro' or ord == 'nuc' then fail(\"ord '\" .. ord .. \"' is for matrices\") end\n"
    "    if ord == nil or ord == 2 then r = (a * a):sum(d, keep):sqrt()\n"
    "    elseif ord == huge then r = amax(a, d, keep)\n"
    "    elseif ord == -huge then r = (a:min(d, keep))\n"
    "    elseif ord == 0 then r = a:ne(0):to(a.dtype):sum(d, keep)\n"
    "    elseif ord == 1 then r = a:sum(d, keep)\n"
    "    else r = a:pow(ord):sum(d, keep):pow(1 / ord) end\n"
    "  else -- a matrix norm over dims[1] (rows) and dims[2] (columns)\n"
    "    local rows, cols = dims[1], dims[2]\n"
    "    if ord == nil or ord == 'fro' then r = (a * a):sum(dims, keep):sqrt()\n"
    "    elseif ord == 1 then r = amax(a:sum(rows, keep), cols, keep)\n"
    "    elseif ord == -1 then r = (a:sum(rows, keep)):min(cols, keep)\n"
    "    elseif ord == huge then r = amax(a:sum(cols, keep), rows, keep)\n"
    "    elseif ord == -huge then r = (a:sum(cols, keep)):min(rows, keep)\n"
    "    else fail('matrix ord ' .. kind_of(ord) .. ' ' .. (kind_of(ord) == 'number' and ord or '') ..\n"
    "              ' is not supported (fro, 1, -1, inf, -inf)') end\n"
    "  end\n"
    "  if keepdim then return r end\n"
    "  if dim == nil and ord == nil or (dim == nil and #dims == nd) then return r:to('cpu'):item() end\n"
    "  local shape, drop = {}, {}\n"
    "  for k = 1, #dims do drop[dims[k]] = true end\n"
    "  for k = 1, nd do if not drop[k] then shape[#shape + 1] = t.shape[k] end end\n"
    "  return r:reshape(shape)\n"
    "end\n";

/* The chunk's environment: no global of the state (a host may open no library), these only. */
static int l_is_tensor(lua_State *L) { /* whether v is a tensor of this module, and its dims */
  dlp_Tensor *t = dlp_tensor_test(L, 1);
  lua_pushboolean(L, t != NULL);
  lua_pushinteger(L, t ? t->dl.ndim : 0);
  return 2;
}
static int l_raise(lua_State *L) { /* the message, without a position (as the C functions') */
  lua_settop(L, 1);
  return lua_error(L);
}
static int l_kind_of(lua_State *L) {
  lua_pushstring(L, luaL_typename(L, 1));
  return 1;
}
static int l_pair(lua_State *L) { /* a plain table of two entries: them, read raw; else nothing */
  if (!lua_istable(L, 1) || lua_getmetatable(L, 1) || lua_rawlen(L, 1) != 2) return 0;
  lua_rawgeti(L, 1, 1);
  lua_rawgeti(L, 1, 2);
  return 2;
}

void dlp_norm_register(lua_State *L, int module, int methods, int meta) {
  static const luaL_Reg env[] = {
      {"is_tensor_fn", l_is_tensor}, {"raise", l_raise}, {"kind_of", l_kind_of}, {"pair", l_pair}, {NULL, NULL},
  };
  (void)meta;
  if (luaL_loadbuffer(L, norm_chunk, sizeof norm_chunk - 1, "=dlpack.norm") != LUA_OK) lua_error(L);
  lua_newtable(L);
  dlp_push_metatable(L); /* the module's convention: the tensor metatable as upvalue 1 */
  luaL_setfuncs(L, env, 1);
#if LUA_VERSION_NUM >= 502
  lua_setupvalue(L, -2, 1); /* _ENV */
#else
  lua_setfenv(L, -2);
#endif
  lua_call(L, 0, 1);
  lua_pushvalue(L, -1);
  lua_setfield(L, module, "norm");
  lua_setfield(L, methods, "norm");
}
