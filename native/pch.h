// Precompiled header: the libtorch headers every TU uses (the compute core includes no N-API header;
// only native/napi/ includes <napi.h>). Deliberately not
// <torch/torch.h> (nn/optim/data add minutes of compile time on small machines and are unused).
#pragma once
#include <ATen/ATen.h>
#include <torch/types.h>
#include <torch/cuda.h>
#include <torch/utils.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/generated/variable_factories.h>
