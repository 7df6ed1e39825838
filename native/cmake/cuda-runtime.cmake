# llama.cpp's static ggml-cuda needs the CUDA runtime and cuBLAS from the toolkit
# CUDAToolkit_ROOT names (the host toolkit, or eliza's merged view with NVIDIA's cuBLAS
# wheel). They are attached to the llama-cpp target itself so they follow its static
# archives on every link line (a shared library listed before the archives that need it
# would be dropped by --as-needed).
find_package(CUDAToolkit REQUIRED)
target_link_libraries(llama-cpp::llama-cpp INTERFACE CUDA::cudart CUDA::cublas CUDA::cublasLt)

# The RUNPATH points at that toolkit's libraries so the built library loads where it was
# built; a packaged install relies on the system's CUDA libraries instead.
function(eliza_link_cuda_runtime target)
    set_property(TARGET ${target} APPEND PROPERTY BUILD_RPATH "${CUDAToolkit_LIBRARY_DIR}")
endfunction()
