"""Fast providers.  Nothing outside ``kernels/triton`` imports triton."""
