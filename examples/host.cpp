// examples/host.cpp: the C API from a C++ host. dlpack_lua.h declares Lua's C
// functions with C linkage itself, so a C++ program links a Lua built as C.
//
//   make build/host-cpp && ./build/host-cpp        (prints TAP)
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "dlpack_lua.h"  // includes <lua.h> inside its extern "C"
extern "C" {
#include <lauxlib.h>
#include <lualib.h>
}

namespace {

int run = 0, failed = 0;

void check(bool ok, const char *what) {
  ++run;
  if (!ok) ++failed;
  std::printf("%sok %d - C++ host: %s\n", ok ? "" : "not ", run, what);
}

// The host's buffer, lent to Lua; the deleter counts and frees the wrapper.
struct Lent {
  DLManagedTensorVersioned managed;
  int64_t shape[1];
};
int deletes = 0;

DLManagedTensorVersioned *lend(std::vector<float> &data) {
  Lent *h = new Lent();
  h->shape[0] = static_cast<int64_t>(data.size());
  h->managed.version.major = DLPACK_MAJOR_VERSION;
  h->managed.version.minor = DLPACK_MINOR_VERSION;
  h->managed.manager_ctx = h;
  h->managed.deleter = [](DLManagedTensorVersioned *self) {
    ++deletes;
    delete static_cast<Lent *>(self->manager_ctx);
  };
  DLTensor &t = h->managed.dl_tensor;
  t.data = data.data();
  t.device.device_type = kDLCPU;
  t.ndim = 1;
  t.dtype.code = kDLFloat;
  t.dtype.bits = 32;
  t.dtype.lanes = 1;
  t.shape = h->shape;
  return &h->managed;
}

}  // namespace

int main() {
  std::vector<float> data{1, 2, 3, 4};
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  luaL_requiref(L, "dlpack", luaopen_dlpack, 1);
  lua_pop(L, 1);

  dlpack_lua_push_versioned(L, lend(data));
  lua_setglobal(L, "frame");
  int rc = luaL_dostring(L, "for i = 1, #frame do frame[i] = frame[i] * 10 end\n"
                            "return require('dlpack').tensor({{1, 2}, {3, 4}}, 'int32')");
  check(rc == LUA_OK, "a script writes into the host's buffer and returns a tensor");
  if (rc != LUA_OK) std::printf("# %s\n", lua_tostring(L, -1));
  check(data[3] == 40.0f, "the host sees the script's writes");

  uint64_t flags = 1;
  const DLTensor *dl = dlpack_lua_check_tensor(L, -1, &flags);
  check(dl->ndim == 2 && dl->shape[1] == 2 && flags == 0, "check_tensor borrows the returned tensor");
  const dlpack_lua_api *api = dlpack_lua_get_api(L);
  check(api != nullptr && api->version >= DLPACK_LUA_API_VERSION, "the registry function table");
  DLManagedTensorVersioned *out = api->export_versioned(L, -1);
  void *cap = dlpack_lua_capsule_new(out, 1);
  void *managed = nullptr;
  int versioned = 0;
  check(dlpack_lua_capsule_consume(cap, &managed, &versioned) == DLPACK_LUA_OK && managed == out && versioned,
        "a capsule round trip without a lua_State");
  lua_close(L);
  const int32_t *v = static_cast<const int32_t *>(out->dl_tensor.data);
  check(v[3] == 4, "the exported tensor outlives lua_close");
  out->deleter(out);
  check(deletes == 1, "the host's deleter ran exactly once");
  std::printf("1..%d\n", run);
  return failed ? 1 : 0;
}
