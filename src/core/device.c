/* Devices: DLPack device codes, their names, and parsing of device strings and tables. */
#include <string.h>

#include "internal.h"

static const char *const device_names[] = {
  [kDLCPU] = "cpu", [kDLCUDA] = "cuda", [kDLCUDAHost] = "cuda_host", [kDLOpenCL] = "opencl",
  [kDLVulkan] = "vulkan", [kDLMetal] = "metal", [kDLVPI] = "vpi", [kDLROCM] = "rocm",
  [kDLROCMHost] = "rocm_host", [kDLExtDev] = "ext_dev", [kDLCUDAManaged] = "cuda_managed",
  [kDLOneAPI] = "oneapi", [kDLWebGPU] = "webgpu", [kDLHexagon] = "hexagon", [kDLMAIA] = "maia",
  [kDLTrn] = "trn",
};
#define MAX_DEVICE_TYPE kDLTrn

int dlp_device_is_valid_type(int64_t device_type) {
  return device_type >= 1 && device_type <= MAX_DEVICE_TYPE && device_names[device_type] != NULL;
}

int dlp_device_is_valid(DLDevice d) {
  if (!dlp_device_is_valid_type(d.device_type) || d.device_id < 0) return 0;
  return !dlp_device_is_cuda(d) || d.device_id < DLP_MAX_CUDA_DEVICES;
}

static const char *device_type_name(int64_t device_type) {
  return dlp_device_is_valid_type(device_type) ? device_names[device_type] : "unknown";
}

/* Memory the CPU can read and write directly (NumPy makes the same choice). */
int dlp_device_is_host(DLDevice d) {
  return d.device_type == kDLCPU || d.device_type == kDLCUDAHost || d.device_type == kDLCUDAManaged ||
         d.device_type == kDLROCMHost;
}

int dlp_device_is_addressable(DLDevice d) {
  return dlp_device_is_host(d) || d.device_type == kDLCUDA || d.device_type == kDLROCM;
}

int dlp_device_equal(DLDevice a, DLDevice b) {
  return a.device_type == b.device_type && a.device_id == b.device_id;
}

int dlp_device_is_cuda(DLDevice d) {
  return d.device_type == kDLCUDA || d.device_type == kDLCUDAHost || d.device_type == kDLCUDAManaged;
}

int dlp_device_has_streams(DLDevice d) {
  return d.device_type == kDLCUDA || d.device_type == kDLCUDAManaged || d.device_type == kDLROCM;
}

/* Kinds that name one memory space for the whole process: no ":N" in their canonical name. */
static int has_no_id(int32_t type) {
  return type == kDLCPU || type == kDLCUDAHost || type == kDLCUDAManaged || type == kDLROCMHost;
}

/* The device type named by the part of s (len bytes) before any ':', or 0. */
static int kind_of(const char *s, size_t len) {
  const char *colon = memchr(s, ':', len);
  size_t kind = colon ? (size_t)(colon - s) : len;
  for (int type = 1; type <= MAX_DEVICE_TYPE; type++)
    if (device_names[type] && strlen(device_names[type]) == kind && memcmp(device_names[type], s, kind) == 0)
      return type;
  return 0;
}

int dlp_parse_device_name(const char *s, size_t len, DLDevice *out) {
  const char *colon = memchr(s, ':', len), *end = s + len;
  int type = kind_of(s, len);
  int64_t id = 0;
  if (memchr(s, '\0', len)) return DLP_DEVICE_NUL;
  if (!type) return DLP_DEVICE_UNKNOWN;
  if (colon) {
    if (has_no_id(type)) return DLP_DEVICE_NO_ID;
    if (colon + 1 == end) return DLP_DEVICE_BAD_ID;
    for (const char *digit = colon + 1; digit < end; digit++) {
      if (*digit < '0' || *digit > '9') return DLP_DEVICE_BAD_ID;
      if (id <= INT32_MAX) id = id * 10 + (*digit - '0'); /* stops growing once too large */
    }
  }
  out->device_type = (DLDeviceType)type;
  out->device_id = id > INT32_MAX ? -1 : (int32_t)id;
  return dlp_device_is_valid(*out) ? DLP_DEVICE_OK : DLP_DEVICE_ID_RANGE;
}

const char *dlp_push_device_error(lua_State *L, const char *s, size_t len, int code) {
  const char *quoted = dlp_push_quoted(L, s, len);
  int type = kind_of(s, len);
  DLDevice kind = {(DLDeviceType)type, 0};
  if (code == DLP_DEVICE_NUL) return lua_pushfstring(L, "device name %s contains an embedded NUL", quoted);
  if (code == DLP_DEVICE_NO_ID)
    return lua_pushfstring(L, "device %s: %s takes no device id", quoted, device_names[type]);
  if (code == DLP_DEVICE_BAD_ID)
    return lua_pushfstring(L, "device %s: the device id must be a non-negative integer", quoted);
  if (code == DLP_DEVICE_ID_RANGE)
    return dlp_device_is_cuda(kind)
               ? lua_pushfstring(L, "device %s: CUDA device ids go from 0 to %d", quoted, DLP_MAX_CUDA_DEVICES - 1)
               : lua_pushfstring(L, "device %s: device ids go from 0 to %d", quoted, INT32_MAX);
  /* unknown: the accepted forms, from the table of names */
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  luaL_addstring(&b, "unknown device ");
  luaL_addstring(&b, quoted);
  luaL_addstring(&b, " (expected ");
  for (int t = 1; t <= MAX_DEVICE_TYPE; t++)
    if (device_names[t] && has_no_id(t)) {
      luaL_addstring(&b, device_names[t]);
      luaL_addstring(&b, ", ");
    }
  luaL_addstring(&b, "or KIND or KIND:N with KIND one of");
  for (int t = 1, first = 1; t <= MAX_DEVICE_TYPE; t++)
    if (device_names[t] && !has_no_id(t)) {
      luaL_addstring(&b, first ? " " : ", ");
      luaL_addstring(&b, device_names[t]);
      first = 0;
    }
  luaL_addchar(&b, ')');
  luaL_pushresult(&b);
  return lua_tostring(L, -1);
}

/* A device string, or {device_type, device_id} as the Python protocol's dl_device. A table that
 * names no device this module can reach is a BufferError, as in Python; other mistakes are
 * errors of argument arg (field names the option, or is NULL). */
DLDevice dlp_check_device(lua_State *L, int idx, int arg, const char *field) {
  DLDevice d = {kDLCPU, 0}; /* every branch that leaves it unset raises */
  idx = lua_absindex(L, idx);
  const char *prefix = field ? lua_pushfstring(L, "%s: ", field) : "";
  if (lua_type(L, idx) == LUA_TSTRING) {
    size_t len;
    const char *s = lua_tolstring(L, idx, &len);
    int code = dlp_parse_device_name(s, len, &d);
    if (code != DLP_DEVICE_OK)
      luaL_argerror(L, arg, lua_pushfstring(L, "%s%s", prefix, dlp_push_device_error(L, s, len, code)));
  } else if (lua_type(L, idx) == LUA_TTABLE) {
    int ok1, ok2;
    lua_geti(L, idx, 1);
    lua_geti(L, idx, 2);
    lua_Integer type = lua_tointegerx(L, -2, &ok1), id = lua_tointegerx(L, -1, &ok2);
    lua_pop(L, 2);
    if (!ok1 || !ok2)
      luaL_argerror(L, arg, lua_pushfstring(L, "%sa device table is {device_type, device_id}, two integers", prefix));
    if (!dlp_device_is_valid_type(type)) dlp_buffer_error(L, "%sunsupported device type %I", prefix, type);
    d.device_type = (DLDeviceType)type;
    d.device_id = id < 0 || id > INT32_MAX ? -1 : (int32_t)id;
    if (!dlp_device_is_valid(d)) dlp_buffer_error(L, "%sinvalid device id %I", prefix, id);
  } else {
    luaL_argerror(L, arg, lua_pushfstring(L, "%sa device is a string or {device_type, device_id}, got %s", prefix,
                                          luaL_typename(L, idx)));
  }
  if (field) lua_pop(L, 1);
  return d;
}

void dlp_push_device_name(lua_State *L, DLDevice d) {
  const char *name = device_type_name(d.device_type);
  if (has_no_id(d.device_type)) lua_pushstring(L, name);
  else lua_pushfstring(L, "%s:%d", name, (int)d.device_id);
}

void dlp_push_device_types(lua_State *L) {
  lua_createtable(L, 0, MAX_DEVICE_TYPE);
  for (int type = 1; type <= MAX_DEVICE_TYPE; type++) {
    if (!device_names[type]) continue;
    lua_pushinteger(L, type);
    lua_setfield(L, -2, device_names[type]);
  }
}
