/* Devices: DLPack device codes, their names, and parsing of device strings and tables. */
#include <stdlib.h>
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

int dlp_test_device_name(const char *s, DLDevice *out) {
  const char *colon = strchr(s, ':');
  size_t len = colon ? (size_t)(colon - s) : strlen(s);
  long long id = 0;
  for (int type = 1; type <= MAX_DEVICE_TYPE; type++) {
    const char *name = device_names[type];
    if (!name || strlen(name) != len || strncmp(name, s, len) != 0) continue;
    if (colon) {
      char *end;
      if (has_no_id(type) || colon[1] < '0' || colon[1] > '9') return 0;
      id = strtoll(colon + 1, &end, 10);
      if (*end != '\0' || id > INT32_MAX) return 0;
    }
    out->device_type = (DLDeviceType)type;
    out->device_id = (int32_t)id;
    return dlp_device_is_valid(*out);
  }
  return 0;
}

/* A device string, or {device_type, device_id} as the Python protocol's dl_device. A table that
 * names no device this module can reach is a BufferError, as in Python; other mistakes are
 * errors of argument arg (field names the option, or is NULL). */
DLDevice dlp_check_device(lua_State *L, int idx, int arg, const char *field) {
  DLDevice d;
  idx = lua_absindex(L, idx);
  const char *prefix = field ? lua_pushfstring(L, "%s: ", field) : "";
  if (lua_type(L, idx) == LUA_TSTRING) {
    if (!dlp_test_device_name(lua_tostring(L, idx), &d))
      luaL_argerror(L, arg, lua_pushfstring(L, "%sunknown device '%s' (CUDA device ids go from 0 to %d)", prefix,
                                            lua_tostring(L, idx), DLP_MAX_CUDA_DEVICES - 1));
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
