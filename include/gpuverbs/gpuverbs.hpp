// Host API of gpuverbs: include this from host code.
#pragma once

#include "gpuverbs/completion_queue.hpp"
#include "gpuverbs/context.hpp"
#include "gpuverbs/errors.hpp"
#include "gpuverbs/memory_region.hpp"
#include "gpuverbs/protection_domain.hpp"
#include "gpuverbs/queue_pair.hpp"
#include "gpuverbs/shared_buffer.hpp"
