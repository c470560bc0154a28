/* Devices: DLPack device codes, their names, and parsing of device strings. */
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

int dlp_device_is_valid_type(int32_t device_type) {
  return device_type >= 1 && device_type <= MAX_DEVICE_TYPE && device_names[device_type] != NULL;
}

const char *dlp_device_type_name(int32_t device_type) {
  return dlp_device_is_valid_type(device_type) ? device_names[device_type] : "unknown";
}

/* Memory the CPU can read and write directly (NumPy makes the same choice). */
int dlp_device_is_host(DLDevice d) {
  return d.device_type == kDLCPU || d.device_type == kDLCUDAHost || d.device_type == kDLCUDAManaged ||
         d.device_type == kDLROCMHost;
}

int dlp_device_equal(DLDevice a, DLDevice b) {
  return a.device_type == b.device_type && a.device_id == b.device_id;
}

/* Kinds that name one memory space for the whole process: no ":N" in their canonical name. */
static int has_no_id(int32_t type) {
  return type == kDLCPU || type == kDLCUDAHost || type == kDLCUDAManaged || type == kDLROCMHost;
}

int dlp_test_device_name(const char *s, DLDevice *out) {
  const char *colon = strchr(s, ':');
  size_t len = colon ? (size_t)(colon - s) : strlen(s);
  long id = 0;
  for (int type = 1; type <= MAX_DEVICE_TYPE; type++) {
    const char *name = device_names[type];
    if (!name || strlen(name) != len || strncmp(name, s, len) != 0) continue;
    if (colon) {
      char *end;
      if (has_no_id(type) || colon[1] < '0' || colon[1] > '9') return 0;
      id = strtol(colon + 1, &end, 10);
      if (*end != '\0' || id > INT32_MAX) return 0;
    }
    out->device_type = (DLDeviceType)type;
    out->device_id = (int32_t)id;
    return 1;
  }
  return 0;
}

DLDevice dlp_check_device(lua_State *L, int arg) {
  DLDevice d;
  const char *s = luaL_checkstring(L, arg);
  if (!dlp_test_device_name(s, &d))
    luaL_argerror(L, arg, lua_pushfstring(L, "unknown device '%s'", s));
  return d;
}

DLDevice dlp_opt_device(lua_State *L, int arg, DLDevice def) {
  return lua_isnoneornil(L, arg) ? def : dlp_check_device(L, arg);
}

void dlp_push_device_name(lua_State *L, DLDevice d) {
  const char *name = dlp_device_type_name(d.device_type);
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
