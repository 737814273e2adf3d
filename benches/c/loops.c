/*
 * The data-path loops of benches/benches/datapath.rs written in C against
 * libibverbs, the reference the safe Rust API is measured against. Only the
 * static-inline verbs of verbs.h are used (they call the provider through
 * the context's ops table), so nothing links libibverbs: the QPs and CQs
 * come from the Rust side.
 */
#include <infiniband/verbs.h>
#include <stdint.h>

/* Spins until one completion, adding the empty polls to *empty; 0 when it
 * succeeded. */
static int poll_one(struct ibv_cq *cq, long *empty)
{
	struct ibv_wc wc;
	int n;

	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		(*empty)++;
	return (n == 1 && wc.status == IBV_WC_SUCCESS) ? 0 : -1;
}

/* `iters` signaled inline RDMA WRITEs of `len` bytes, each polled to
 * completion; the empty polls are added to *empty. */
int erdma_c_write_inline(struct ibv_qp *qp, struct ibv_cq *cq, void *buf, uint32_t len,
			 uint32_t lkey, uint64_t raddr, uint32_t rkey, long iters, long *empty)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = len, .lkey = lkey };
	struct ibv_send_wr wr = {
		.wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE,
	}, *bad;

	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	for (long i = 0; i < iters; i++) {
		if (ibv_post_send(qp, &wr, &bad) || poll_one(cq, empty))
			return -1;
	}
	return 0;
}

/* `iters` times: post a receive on `rqp`, SEND `len` bytes from `sqp`, poll
 * the send completion on `scq` and the receive completion on `rcq`; the
 * empty polls are added to *empty. */
int erdma_c_send_recv(struct ibv_qp *sqp, struct ibv_cq *scq, void *sbuf, uint32_t slkey,
		      struct ibv_qp *rqp, struct ibv_cq *rcq, void *rbuf, uint32_t rlkey,
		      uint32_t len, long iters, long *empty)
{
	struct ibv_sge ss = { .addr = (uintptr_t)sbuf, .length = len, .lkey = slkey };
	struct ibv_sge rs = { .addr = (uintptr_t)rbuf, .length = len, .lkey = rlkey };
	struct ibv_send_wr swr = {
		.wr_id = 2, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
	}, *sbad;
	struct ibv_recv_wr rwr = { .wr_id = 3, .sg_list = &rs, .num_sge = 1 }, *rbad;

	for (long i = 0; i < iters; i++) {
		if (ibv_post_recv(rqp, &rwr, &rbad) || ibv_post_send(sqp, &swr, &sbad))
			return -1;
		if (poll_one(scq, empty) || poll_one(rcq, empty))
			return -1;
	}
	return 0;
}
