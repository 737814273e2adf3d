//! CUDA device memory and streams (driver API through cudarc, loaded at run time).
