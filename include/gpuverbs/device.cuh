// Device API of gpuverbs: include this from CUDA code (it also compiles for CPU threads).
#pragma once

#include "gpuverbs/device/atomic.cuh"
#include "gpuverbs/device/completion_queue_device.cuh"
#include "gpuverbs/device/queue_pair_device.cuh"
#include "gpuverbs/device/status.cuh"
