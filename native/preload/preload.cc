// papergym_preload.node: a tiny Node-API module with no libtorch dependency. Prebuilt addon
// binaries carry no RUNPATH to a libtorch (each user's torch lives somewhere else), so before one is
// loaded, lib/native.ts opens the provider's libtorch libraries by full path here. The dynamic
// linker then satisfies the addon's DT_NEEDED entries (libtorch.so, libc10.so, libtorch_cuda.so, ...)
// from these already-loaded objects by SONAME.
//
// preload(paths: string[]) -> undefined. Opens each path with dlopen(RTLD_NOW | RTLD_LOCAL), in
// order; the handles are kept for the life of the process. Throws an Error with dlerror()'s text
// naming the first library that fails (e.g. a missing dependency of libtorch_cuda.so).
#include <dlfcn.h>
#include <node_api.h>

#include <string>
#include <vector>

namespace {

napi_value Throw(napi_env env, const std::string& msg) {
  napi_throw_error(env, nullptr, msg.c_str());
  return nullptr;
}

napi_value Preload(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  if (napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr) != napi_ok) return nullptr;
  bool isArray = false;
  if (argc < 1 || napi_is_array(env, argv[0], &isArray) != napi_ok || !isArray) {
    napi_throw_type_error(env, nullptr, "preload(paths): paths must be an array of library paths");
    return nullptr;
  }
  uint32_t n = 0;
  napi_get_array_length(env, argv[0], &n);
  for (uint32_t i = 0; i < n; ++i) {
    napi_value v;
    napi_get_element(env, argv[0], i, &v);
    size_t len = 0;
    if (napi_get_value_string_utf8(env, v, nullptr, 0, &len) != napi_ok) {
      napi_throw_type_error(env, nullptr, "preload(paths): every path must be a string");
      return nullptr;
    }
    std::string path(len, '\0');
    napi_get_value_string_utf8(env, v, &path[0], len + 1, &len);
    if (!dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      const char* err = dlerror();
      return Throw(env, std::string("cannot load ") + path + ": " + (err ? err : "unknown dlopen error"));
    }
  }
  napi_value undef;
  napi_get_undefined(env, &undef);
  return undef;
}

napi_value Init(napi_env env, napi_value exports) {
  napi_value fn;
  napi_create_function(env, "preload", NAPI_AUTO_LENGTH, Preload, nullptr, &fn);
  napi_set_named_property(env, exports, "preload", fn);
  return exports;
}

}  // namespace

NAPI_MODULE(papergym_preload, Init)
