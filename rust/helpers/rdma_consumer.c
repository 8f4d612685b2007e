// SPDX-License-Identifier: GPL-2.0
/*
 * Non-inline wrappers for the static inline RDMA consumer (ULP) functions
 * that kernel::rdma::consumer calls: posting (to QPs and SRQs), SRQ creation,
 * polling, DMA mapping, FRWR key rotation, and the scatterlist and completion
 * initialisers they need.
 */

#include <linux/completion.h>
#include <linux/scatterlist.h>
#include <rdma/ib_verbs.h>

int rust_helper_ib_post_send(struct ib_qp *qp, const struct ib_send_wr *send_wr,
			     const struct ib_send_wr **bad_send_wr)
{
	return ib_post_send(qp, send_wr, bad_send_wr);
}

int rust_helper_ib_post_recv(struct ib_qp *qp, const struct ib_recv_wr *recv_wr,
			     const struct ib_recv_wr **bad_recv_wr)
{
	return ib_post_recv(qp, recv_wr, bad_recv_wr);
}

int rust_helper_ib_poll_cq(struct ib_cq *cq, int num_entries, struct ib_wc *wc)
{
	return ib_poll_cq(cq, num_entries, wc);
}

int rust_helper_ib_req_notify_cq(struct ib_cq *cq, enum ib_cq_notify_flags flags)
{
	return ib_req_notify_cq(cq, flags);
}

int rust_helper_ib_dma_map_sg(struct ib_device *dev, struct scatterlist *sg, int nents,
			      enum dma_data_direction direction)
{
	return ib_dma_map_sg(dev, sg, nents, direction);
}

void rust_helper_ib_dma_unmap_sg(struct ib_device *dev, struct scatterlist *sg, int nents,
				 enum dma_data_direction direction)
{
	ib_dma_unmap_sg(dev, sg, nents, direction);
}

void rust_helper_ib_dma_sync_single_for_cpu(struct ib_device *dev, u64 addr, size_t size,
					    enum dma_data_direction dir)
{
	ib_dma_sync_single_for_cpu(dev, addr, size, dir);
}

void rust_helper_ib_dma_sync_single_for_device(struct ib_device *dev, u64 addr, size_t size,
					       enum dma_data_direction dir)
{
	ib_dma_sync_single_for_device(dev, addr, size, dir);
}

void rust_helper_ib_update_fast_reg_key(struct ib_mr *mr, u8 newkey)
{
	ib_update_fast_reg_key(mr, newkey);
}

u32 rust_helper_ib_inc_rkey(u32 rkey)
{
	return ib_inc_rkey(rkey);
}

void rust_helper_sg_set_buf(struct scatterlist *sg, const void *buf, unsigned int buflen)
{
	sg_set_buf(sg, buf, buflen);
}

/* init_completion() is wrapped in rdma.c, shared with the provider side. */

struct ib_srq *rust_helper_ib_create_srq(struct ib_pd *pd,
					 struct ib_srq_init_attr *srq_init_attr)
{
	return ib_create_srq(pd, srq_init_attr);
}

int rust_helper_ib_post_srq_recv(struct ib_srq *srq, const struct ib_recv_wr *recv_wr,
				 const struct ib_recv_wr **bad_recv_wr)
{
	return ib_post_srq_recv(srq, recv_wr, bad_recv_wr);
}
