// Precompiled header: the libtorch and node-addon-api headers every TU uses. Deliberately not
// <torch/torch.h> (nn/optim/data add minutes of compile time on small machines and are unused).
#pragma once
#include <napi.h>
#include <ATen/ATen.h>
#include <torch/types.h>
#include <torch/cuda.h>
#include <torch/utils.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/generated/variable_factories.h>
