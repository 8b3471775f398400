// A kernel fault (a sticky CUDA error) becomes a failed layer, never a hang.
// Its own binary: after the fault every CUDA call in this process fails.
#include "device/cuda_event.hpp"

#include <chrono>
#include <future>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "cuda_skip.hpp"
#include "test_kernels.hpp"
#include "wait_for_event.hpp"

using namespace layerstream;
using namespace std::chrono_literals;

using test::wait_for;

TEST(CudaEventFault, AKernelFaultFailsTheLayerWithCudasTextAndLaterLayersFailToo) {
  SKIP_WITHOUT_CUDA();
  auto src = cuda_event_source::create(4);
  ASSERT_TRUE(src) << describe(src.error());
  auto stream = cuda_stream::create();
  ASSERT_TRUE(stream) << describe(stream.error());
  ASSERT_FALSE(wait_for((*src)->record(stream->handle()))) << "a healthy event first";
  ASSERT_EQ(gpu_testing::launch_fault(stream->handle()), 0);
  auto err = wait_for((*src)->record(stream->handle()));
  ASSERT_TRUE(err) << "the faulted layer completed successfully";
  EXPECT_TRUE(is(err, lserr::event_failed)) << describe(err);
  const auto text = message_of(err); // an illegal address; some parts call it a launch failure
  EXPECT_TRUE(text.find(cudaGetErrorString(cudaErrorIllegalAddress)) != std::string::npos ||
              text.find(cudaGetErrorString(cudaErrorLaunchFailure)) != std::string::npos)
      << describe(err);
  // Sticky: the next layer fails too (at record or in the waiter), and does not hang.
  auto next = wait_for((*src)->record(stream->handle()));
  EXPECT_TRUE(is(next, lserr::event_failed)) << describe(next);
}
