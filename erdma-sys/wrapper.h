/* Headers bound by erdma-sys: the system rdma-core (libibverbs-dev, librdmacm-dev). */
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
