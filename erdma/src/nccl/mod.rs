//! NCCL communicators and collectives (libnccl.so.2 loaded at run time).
