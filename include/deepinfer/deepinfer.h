// Umbrella header of DeepInfer's public C++ API.
#pragma once
#include "deepinfer/llm.h"
#include "deepinfer/outputs.h"
#include "deepinfer/sampling_params.h"
