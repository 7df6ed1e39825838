# Links the CUDA runtime and cuBLAS that llama.cpp's static ggml-cuda needs, from the
# toolkit CUDAToolkit_ROOT names (the host toolkit, or eliza's merged view with NVIDIA's
# cuBLAS wheel). The RUNPATH points at that toolkit's libraries so the built library loads
# where it was built; a packaged install relies on the system's CUDA libraries instead.
find_package(CUDAToolkit REQUIRED)

function(eliza_link_cuda_runtime target)
    target_link_libraries(${target} PRIVATE CUDA::cudart CUDA::cublas CUDA::cublasLt)
    set_property(TARGET ${target} APPEND PROPERTY BUILD_RPATH "${CUDAToolkit_LIBRARY_DIR}")
endfunction()
