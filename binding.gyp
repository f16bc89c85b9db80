{
  "variables": {
    "torch_root": "<!(node scripts/find-libtorch.cjs root)",
    "torch_lib": "<!(node scripts/find-libtorch.cjs libDir)",
    "torch_cuda_lib": "<!(node scripts/find-libtorch.cjs cudaLib)",
    "torch_cuda_inc": "<!(node scripts/find-libtorch.cjs cudaIncludeDir)",
    "torch_abi": "<!(node scripts/find-libtorch.cjs cxx11Abi)"
  },
  "targets": [
    {
      "target_name": "papergym_preload",
      "sources": ["native/preload/preload.cc"],
      "defines": ["NAPI_VERSION=8"],
      "libraries": ["-ldl"]
    },
    {
      "target_name": "papergym_native",
      "sources": ["<!@(node -e \"const g=require('fs');const p=require('path');const w=(d)=>g.readdirSync(d,{withFileTypes:true}).flatMap(e=>e.isDirectory()?w(p.join(d,e.name)):e.name.endsWith('.cc')?[p.join(d,e.name)]:[]);console.log(w('native').filter(f=>!f.includes('preload')).join(' '))\")"],
      "include_dirs": [
        "native",
        "<!(node -p \"require('node-addon-api').include_dir\")",
        "<!@(PG_SEP=space node scripts/find-libtorch.cjs includeDirs)"
      ],
      "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS", "NODE_ADDON_API_DISABLE_DEPRECATED",
                  "_GLIBCXX_USE_CXX11_ABI=<(torch_abi)"],
      "cflags_cc!": ["-fno-exceptions", "-fno-rtti", "-std=gnu++17"],
      "cflags_cc": ["-std=c++17", "-fexceptions", "-frtti", "-O2", "-fvisibility=hidden", "-Wno-unused-parameter"],
      "libraries": ["-L<(torch_lib)", "-Wl,-rpath,<(torch_lib)", "-ltorch", "-ltorch_cpu", "-lc10"],
      "conditions": [
        ["torch_cuda_lib==1", {
          "libraries": ["-Wl,--no-as-needed", "-ltorch_cuda", "-lc10_cuda", "-Wl,--as-needed"]
        }],
        ["torch_cuda_lib==1 and torch_cuda_inc!=''", {
          "defines": ["PG_WITH_CUDA=1"],
          "include_dirs": ["<(torch_cuda_inc)"]
        }]
      ]
    }
  ]
}
