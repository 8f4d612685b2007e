// SPDX-License-Identifier: GPL-2.0
/*
 * hostile_user: a verbs program that breaks libsiw's rules on purpose, to show
 * that a user process can harm only its own QPs. It connects two QPs of one
 * device to each other through rdma_cm (a client and a server in this
 * process), finds the rings libsiw mapped (from /proc/self/maps: the mmap
 * offsets grow in creation order), and writes into them behind libsiw's back.
 *
 *   hostile_user CASE ADDR PORT
 *
 * In the srq cases the server's QP takes its receives from an SRQ. One case is
 * not hostile: "hold" makes 16 Writes of 64 KiB from the client to the server,
 * prints "held CLIENT_QPN SERVER_QPN" and keeps both QPs until its standard
 * input ends, so that a test can read their QP counter.
 *
 * Exits 0 when the provider reacted as the case expects, 1 (with the reason on
 * stderr) when not, 2 when the setup failed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

/* The siw user ABI (include/uapi/rdma/siw-abi.h). */
#define SQE_BYTES 120
#define RQE_BYTES 112
#define CQE_BYTES 32
#define WQE_VALID 1
#define WQE_INLINE 2
#define WQE_SIGNALLED 4
#define OP_WRITE 0
#define OP_READ 1

#define QDEPTH 8
#define BUF_BYTES 65536

struct side {
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *scq, *rcq;
	char *buf;
	struct ibv_mr *mr;
	/* The rings, found in /proc/self/maps. */
	uint8_t *sq, *rq, *scq_ring, *rcq_ring;
	size_t scq_len;
	/* The server's shared receive queue and its ring, in the srq- cases. */
	struct ibv_srq *srq;
	uint8_t *srq_ring;
	unsigned int posts; /* libsiw's send position */
};

static struct rdma_event_channel *ec;
static struct rdma_cm_id *listener;
static struct side cl, sv;
static const char *case_name;
/* The server's QP takes its receives from an SRQ (the srq- cases). */
static int use_srq;

static void die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void die(int code, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "hostile_user %s: ", case_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(code);
}

static struct rdma_cm_event *expect_event(enum rdma_cm_event_type type)
{
	struct rdma_cm_event *ev;

	if (rdma_get_cm_event(ec, &ev))
		die(2, "rdma_get_cm_event: %s", strerror(errno));
	if (ev->event != type)
		die(2, "cm event %s, expected %s", rdma_event_str(ev->event), rdma_event_str(type));
	return ev;
}

static void make_side(struct side *s, struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr qa = {
		.cap = { .max_send_wr = QDEPTH, .max_recv_wr = QDEPTH,
			 .max_send_sge = 2, .max_recv_sge = 2, .max_inline_data = 64 },
		.qp_type = IBV_QPT_RC,
	};

	s->id = id;
	s->pd = ibv_alloc_pd(id->verbs);
	s->scq = s->pd ? ibv_create_cq(id->verbs, QDEPTH * 2, NULL, NULL, 0) : NULL;
	s->rcq = s->scq ? ibv_create_cq(id->verbs, QDEPTH * 2, NULL, NULL, 0) : NULL;
	if (!s->rcq)
		die(2, "PD or CQ: %s", strerror(errno));
	qa.send_cq = s->scq;
	qa.recv_cq = s->rcq;
	if (use_srq && s == &sv) {
		struct ibv_srq_init_attr sa = { .attr = { .max_wr = QDEPTH, .max_sge = 2 } };

		s->srq = ibv_create_srq(s->pd, &sa);
		if (!s->srq)
			die(2, "ibv_create_srq: %s", strerror(errno));
		qa.srq = s->srq;
	}
	if (rdma_create_qp(id, s->pd, &qa))
		die(2, "rdma_create_qp: %s", strerror(errno));
	s->buf = mmap(NULL, BUF_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (s->buf == MAP_FAILED)
		die(2, "mmap: %s", strerror(errno));
	s->mr = ibv_reg_mr(s->pd, s->buf, BUF_BYTES,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!s->mr)
		die(2, "ibv_reg_mr: %s", strerror(errno));
}

/*
 * The uverbs mappings in creation order: each side's send CQ, receive CQ, SQ,
 * RQ; with an SRQ, the server's SRQ comes before its SQ and it has no RQ.
 */
static void find_rings(void)
{
	struct { uint8_t *start; size_t len; unsigned long long off; } m[16], t;
	char line[512];
	int n = 0, i, j;
	FILE *f = fopen("/proc/self/maps", "r");

	if (!f)
		die(2, "/proc/self/maps: %s", strerror(errno));
	while (fgets(line, sizeof(line), f) && n < 16) {
		unsigned long a, b;
		unsigned long long off;

		if (!strstr(line, "uverbs"))
			continue;
		if (sscanf(line, "%lx-%lx %*s %llx", &a, &b, &off) != 3)
			continue;
		m[n].start = (uint8_t *)a;
		m[n].len = b - a;
		m[n++].off = off;
	}
	fclose(f);
	if (n != 8)
		die(2, "%d uverbs mappings, expected 8", n);
	for (i = 0; i < n; i++)
		for (j = i + 1; j < n; j++)
			if (m[j].off < m[i].off) {
				t = m[i];
				m[i] = m[j];
				m[j] = t;
			}
	cl.scq_ring = m[0].start;
	cl.scq_len = m[0].len;
	cl.rcq_ring = m[1].start;
	cl.sq = m[2].start;
	cl.rq = m[3].start;
	sv.scq_ring = m[4].start;
	sv.scq_len = m[4].len;
	sv.rcq_ring = m[5].start;
	if (use_srq) {
		sv.srq_ring = m[6].start;
		sv.sq = m[7].start;
	} else {
		sv.sq = m[6].start;
		sv.rq = m[7].start;
	}
}

static void connect_sides(const char *addr, const char *port)
{
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP }, *ai;
	struct rdma_conn_param cp = { .responder_resources = 4, .initiator_depth = 4 };
	struct rdma_cm_event *ev;
	struct rdma_cm_id *cid, *sid;
	int i;

	ec = rdma_create_event_channel();
	if (!ec || rdma_getaddrinfo(addr, port, &hints, &ai))
		die(2, "event channel or address: %s", strerror(errno));
	if (rdma_create_id(ec, &listener, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(listener, ai->ai_dst_addr) || rdma_listen(listener, 4))
		die(2, "listen: %s", strerror(errno));
	if (rdma_create_id(ec, &cid, NULL, RDMA_PS_TCP) ||
	    rdma_resolve_addr(cid, NULL, ai->ai_dst_addr, 5000))
		die(2, "resolve: %s", strerror(errno));
	rdma_ack_cm_event(expect_event(RDMA_CM_EVENT_ADDR_RESOLVED));
	if (rdma_resolve_route(cid, 5000))
		die(2, "resolve route: %s", strerror(errno));
	rdma_ack_cm_event(expect_event(RDMA_CM_EVENT_ROUTE_RESOLVED));
	make_side(&cl, cid);
	if (rdma_connect(cid, &cp))
		die(2, "rdma_connect: %s", strerror(errno));
	ev = expect_event(RDMA_CM_EVENT_CONNECT_REQUEST);
	sid = ev->id;
	rdma_ack_cm_event(ev);
	make_side(&sv, sid);
	if (rdma_accept(sid, &cp))
		die(2, "rdma_accept: %s", strerror(errno));
	for (i = 0; i < 2; i++)
		rdma_ack_cm_event(expect_event(RDMA_CM_EVENT_ESTABLISHED));
	rdma_freeaddrinfo(ai);
	find_rings();
}

static int post_write(struct side *s, struct side *to, uint64_t wr_id, size_t len, int read)
{
	struct ibv_sge sge = { .addr = (uintptr_t)s->buf, .length = len, .lkey = s->mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
		.opcode = read ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { .remote_addr = (uintptr_t)to->buf, .rkey = to->mr->rkey },
	}, *bad;
	int rc = ibv_post_send(s->id->qp, &wr, &bad);

	if (!rc)
		s->posts++;
	return rc;
}

static int poll_n(struct ibv_cq *cq, struct ibv_wc *wc, int n);

/*
 * Waits until the client's earlier RDMA Writes were placed at the server: a
 * Write completes once sent, but a Read's response follows the Writes before
 * it. Reads the server buffer's last 4 bytes into the client buffer's.
 */
static void fence(void)
{
	struct ibv_sge sge = { .addr = (uintptr_t)cl.buf + BUF_BYTES - 4, .length = 4,
			       .lkey = cl.mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = 0xfe, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { .remote_addr = (uintptr_t)sv.buf + BUF_BYTES - 4, .rkey = sv.mr->rkey },
	}, *bad;
	struct ibv_wc wc;

	if (ibv_post_send(cl.id->qp, &wr, &bad) || poll_n(cl.scq, &wc, 1) != 1 ||
	    wc.status != IBV_WC_SUCCESS)
		die(1, "fencing Read failed");
	cl.posts++;
}

/* Polls `cq` until `n` completions arrived or 20 s passed; returns how many. */
static int poll_n(struct ibv_cq *cq, struct ibv_wc *wc, int n)
{
	time_t end = time(NULL) + 20;
	int got = 0, r;

	while (got < n && time(NULL) < end) {
		r = ibv_poll_cq(cq, n - got, wc + got);
		if (r < 0)
			die(1, "ibv_poll_cq: %d", r);
		got += r;
		if (!r)
			usleep(1000);
	}
	return got;
}

/* The flags of the client's SQ slot `pos`. */
static uint16_t *sq_flags(unsigned int pos)
{
	return (uint16_t *)(cl.sq + (pos % QDEPTH) * SQE_BYTES + 8);
}

/*
 * Rings side `s`'s doorbell as libsiw does: a POST_SEND with no work request.
 * Returns 0, or the errno the kernel refused it with.
 */
static int ring(struct side *s)
{
	struct {
		struct ib_uverbs_cmd_hdr hdr;
		struct ib_uverbs_post_send cmd;
	} req = {
		.hdr = { .command = IB_USER_VERBS_CMD_POST_SEND, .in_words = sizeof(req) / 4,
			 .out_words = sizeof(struct ib_uverbs_post_send_resp) / 4 },
	};
	struct ib_uverbs_post_send_resp resp;

	req.cmd.response = (uintptr_t)&resp;
	req.cmd.qp_handle = s->id->qp->handle;
	req.cmd.wqe_size = sizeof(struct ibv_send_wr);
	return write(s->id->verbs->cmd_fd, &req, sizeof(req)) == sizeof(req) ? 0 : errno;
}

/* Rings the client QP's doorbell. */
static void doorbell(void)
{
	int err = ring(&cl);

	if (err)
		die(1, "doorbell: %s", strerror(err));
}

/*
 * Rewrites the client's SQ slot `pos`, which libsiw filled and the kernel has not
 * taken, behind libsiw's back (the valid flag stays set).
 */
static void put_sqe(unsigned int pos, uint64_t id, uint16_t flags, uint8_t nsge, uint8_t op,
		    const uint32_t *lens, int nlens, uint32_t lkey)
{
	uint8_t *e = cl.sq + (pos % QDEPTH) * SQE_BYTES;
	int i;

	memset(e + 10, 0, SQE_BYTES - 10);
	memcpy(e, &id, 8);
	e[10] = nsge;
	e[11] = op;
	memcpy(e + 12, &sv.mr->rkey, 4);
	*(uint64_t *)(e + 16) = (uintptr_t)sv.buf;
	for (i = 0; i < nlens && i < 6; i++) {
		*(uint64_t *)(e + 24 + 16 * i) = (uintptr_t)cl.buf;
		memcpy(e + 32 + 16 * i, &lens[i], 4);
		memcpy(e + 36 + 16 * i, &lkey, 4);
	}
	__atomic_store_n((uint16_t *)(e + 8), flags | WQE_VALID, __ATOMIC_SEQ_CST);
}

/*
 * A good RDMA Write, then one that is rewritten into a bad entry before the
 * kernel takes it, then (if `works_on`) another good one: the bad one completes
 * with `want`, the good ones succeed. An entry that names memory it may not use
 * fails its QP too (its message is cut short on the wire): then the next one is
 * flushed.
 *
 * libsiw rings the doorbell only if the slot before its new entry is free, so
 * marking that (already taken) slot valid again keeps the kernel away while
 * the entry is rewritten; then the slot is freed and the doorbell rung by hand.
 */
static int bad_sqe(uint16_t flags, uint8_t nsge, uint8_t op, const uint32_t *lens, int nlens,
		   uint32_t lkey, enum ibv_wc_status want, int works_on)
{
	struct ibv_wc wc;
	unsigned int slot;

	if (post_write(&cl, &sv, 1, 4096, 0) || poll_n(cl.scq, &wc, 1) != 1 ||
	    wc.status != IBV_WC_SUCCESS)
		die(1, "the write before the bad entry failed");
	__atomic_store_n(sq_flags(cl.posts - 1), WQE_VALID, __ATOMIC_SEQ_CST);
	slot = cl.posts;
	if (post_write(&cl, &sv, 2, 4096, 0))
		die(1, "post of the entry to rewrite: %s", strerror(errno));
	put_sqe(slot, 0xbad, flags | WQE_SIGNALLED, nsge, op, lens, nlens, lkey);
	__atomic_store_n(sq_flags(slot - 1), 0, __ATOMIC_SEQ_CST);
	doorbell();
	if (poll_n(cl.scq, &wc, 1) != 1)
		die(1, "no completion of the bad entry");
	if (wc.wr_id != 0xbad || wc.status != want)
		die(1, "bad entry: wr %llx, %s, expected %s", (unsigned long long)wc.wr_id,
		    ibv_wc_status_str(wc.status), ibv_wc_status_str(want));
	if (post_write(&cl, &sv, 3, 4096, 0) || poll_n(cl.scq, &wc, 1) != 1 || wc.wr_id != 3)
		die(1, "no completion for the entry after the bad one");
	if (wc.status != (works_on ? IBV_WC_SUCCESS : IBV_WC_WR_FLUSH_ERR))
		die(1, "the entry after the bad one: %s", ibv_wc_status_str(wc.status));
	return 0;
}

/* What a flipper thread flips: random bits of `len` bytes at `ring`, until `stop`. */
struct flipping {
	uint8_t *ring;
	size_t len;
	volatile int stop;
	pthread_t thread;
};

static void *flipper(void *arg)
{
	struct flipping *f = arg;
	unsigned int seed = 1;

	while (!f->stop) {
		unsigned int at = rand_r(&seed) % f->len;

		f->ring[at] ^= 1u << (rand_r(&seed) % 8);
	}
	return NULL;
}

static void start_flipping(struct flipping *f, uint8_t *ring, size_t len)
{
	f->ring = ring;
	f->len = len;
	f->stop = 0;
	if (pthread_create(&f->thread, NULL, flipper, f))
		die(2, "pthread_create");
}

static void stop_flipping(struct flipping *f)
{
	f->stop = 1;
	pthread_join(f->thread, NULL);
}

/* Whether a completion the kernel wrote carries a status and opcode that exist. */
static void check_wc(const struct ibv_wc *wc, const char *where)
{
	if (wc->status > IBV_WC_TM_RNDV_INCOMPLETE)
		die(1, "%s: a completion with status %d", where, wc->status);
	if (wc->status == IBV_WC_SUCCESS && wc->opcode != IBV_WC_SEND &&
	    wc->opcode != IBV_WC_RDMA_WRITE && wc->opcode != IBV_WC_RDMA_READ &&
	    wc->opcode != IBV_WC_RECV)
		die(1, "%s: a successful completion with opcode %d", where, wc->opcode);
}

/*
 * After the client's rings were tampered with: the server's QP, which nobody
 * tampered with, still gets an answer for a Write towards the client within
 * 20 s: it succeeds (the connection lived), or it is flushed (a bad entry
 * ended the connection). Either is the client's own harm; a hang is not.
 */
static void server_answers(void)
{
	struct ibv_wc wc;
	int i, err = post_write(&sv, &cl, 0x5e, 4096, 0);

	/*
	 * A QP between RTS and ERROR (its connection closing) refuses the
	 * doorbell with ENOTCONN; the entry stays in the ring, and a later
	 * doorbell (in ERROR: flushed) takes it.
	 */
	for (i = 0; err == ENOTCONN && i < 100; i++) {
		usleep(100000);
		err = ring(&sv);
	}
	if (err)
		die(1, "the server cannot post: %s", strerror(err));
	if (poll_n(sv.scq, &wc, 1) != 1)
		die(1, "the server's Write got no completion");
	if (wc.wr_id != 0x5e || (wc.status != IBV_WC_SUCCESS && wc.status != IBV_WC_WR_FLUSH_ERR))
		die(1, "the server's Write: wr %llx, %s", (unsigned long long)wc.wr_id,
		    ibv_wc_status_str(wc.status));
}

/*
 * Entries changed by another thread while the doorbell takes them. Every
 * completion must carry a status and opcode that exist, and the server's QP
 * must still be answered.
 */
static int flip_sqes(void)
{
	struct ibv_wc wc[QDEPTH];
	struct flipping f;
	time_t end = time(NULL) + 3;
	int i, n;

	start_flipping(&f, cl.sq, QDEPTH * SQE_BYTES);
	while (time(NULL) < end) {
		post_write(&cl, &sv, 3, 4096, 0);
		n = ibv_poll_cq(cl.scq, QDEPTH, wc);
		for (i = 0; i < n; i++)
			check_wc(&wc[i], "while flipping");
	}
	stop_flipping(&f);
	while ((n = ibv_poll_cq(cl.scq, QDEPTH, wc)) > 0)
		for (i = 0; i < n; i++)
			check_wc(&wc[i], "after flipping");
	server_answers();
	return 0;
}

static volatile int stop_arming;

/* Writes random words into the client's send CQ control word. */
static void *armer(void *arg)
{
	volatile uint32_t *ctrl = (volatile uint32_t *)(cl.scq_ring + QDEPTH * 2 * CQE_BYTES);
	unsigned int seed = 7;

	(void)arg;
	while (!stop_arming)
		*ctrl = rand_r(&seed) ^ ((uint32_t)rand_r(&seed) << 16);
	return NULL;
}

/*
 * A garbage CQ control word, rewritten all the time by another thread: it may
 * arm the CQ or not, but every completion still arrives, in order and whole.
 */
static int cq_ctrl_garbage(void)
{
	struct ibv_wc wc;
	pthread_t t;
	int i;

	if (pthread_create(&t, NULL, armer, NULL))
		die(2, "pthread_create");
	for (i = 0; i < 200; i++) {
		if (post_write(&cl, &sv, 0x100 + i, 4096, i & 1))
			die(1, "post %d: %s", i, strerror(errno));
		if (poll_n(cl.scq, &wc, 1) != 1)
			die(1, "no completion for work request %d", i);
		if (wc.wr_id != (uint64_t)(0x100 + i) || wc.status != IBV_WC_SUCCESS ||
		    wc.opcode != ((i & 1) ? IBV_WC_RDMA_READ : IBV_WC_RDMA_WRITE))
			die(1, "work request %d: wr %llx, %s, opcode %d", i,
			    (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status), wc.opcode);
	}
	stop_arming = 1;
	pthread_join(t, NULL);
	return 0;
}

/* Posts a Send of 64 bytes from the client, signalled, as work request `id`. */
static int post_send64(uint64_t id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)cl.buf, .length = 64, .lkey = cl.mr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
	int rc = ibv_post_send(cl.id->qp, &wr, &bad);

	if (!rc)
		cl.posts++;
	return rc;
}

/*
 * A receive entry with 9 SGEs in the server's first receive slot `e` (of its
 * RQ or its SRQ): the QP that takes it for a Send completes it with
 * LOC_QP_OP_ERR.
 */
static int bad_recv_entry(uint8_t *e)
{
	uint64_t id = 0xbad;
	struct ibv_wc wc;

	memset(e, 0, RQE_BYTES);
	memcpy(e, &id, 8);
	e[10] = 9;
	__atomic_store_n((uint16_t *)(e + 8), WQE_VALID, __ATOMIC_SEQ_CST);
	if (post_send64(4))
		die(1, "post send: %s", strerror(errno));
	if (poll_n(sv.rcq, &wc, 1) != 1)
		die(1, "no receive completion");
	if (wc.wr_id != 0xbad || wc.status != IBV_WC_LOC_QP_OP_ERR)
		die(1, "receive: wr %llx, %s", (unsigned long long)wc.wr_id,
		    ibv_wc_status_str(wc.status));
	return 0;
}

/*
 * SRQ entries posted through libsiw and changed by another thread while Sends
 * take them. Every receive completion must carry a status and opcode that
 * exist, and the server's QP must still be answered.
 */
static int flip_srqes(void)
{
	struct ibv_sge sge = { .addr = (uintptr_t)sv.buf, .length = 4096, .lkey = sv.mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 0x77, .sg_list = &sge, .num_sge = 1 }, *bad;
	struct ibv_wc wc[QDEPTH];
	struct flipping f;
	time_t end = time(NULL) + 3;
	int i, n;

	for (i = 0; i < QDEPTH; i++)
		ibv_post_srq_recv(sv.srq, &rwr, &bad);
	start_flipping(&f, sv.srq_ring, QDEPTH * RQE_BYTES);
	while (time(NULL) < end) {
		/* Either may be refused: the rings are garbage by now. */
		ibv_post_srq_recv(sv.srq, &rwr, &bad);
		post_send64(5);
		ibv_poll_cq(cl.scq, QDEPTH, wc);
		n = ibv_poll_cq(sv.rcq, QDEPTH, wc);
		for (i = 0; i < n; i++)
			check_wc(&wc[i], "while flipping");
		usleep(1000);
	}
	stop_flipping(&f);
	while ((n = ibv_poll_cq(sv.rcq, QDEPTH, wc)) > 0)
		for (i = 0; i < n; i++)
			check_wc(&wc[i], "after flipping");
	server_answers();
	return 0;
}


/* Completion slots user space marks valid itself: the CQ overflows, IBV_EVENT_CQ_ERR. */
static int cq_overflow(void)
{
	struct pollfd pfd = { .fd = cl.id->verbs->async_fd, .events = POLLIN };
	struct ibv_async_event ae;
	unsigned int i;

	for (i = 0; i < QDEPTH * 2 * CQE_BYTES; i += CQE_BYTES)
		__atomic_store_n(cl.scq_ring + i + 8, WQE_VALID, __ATOMIC_SEQ_CST);
	/* The control word: every bit. */
	*(volatile uint32_t *)(cl.scq_ring + QDEPTH * 2 * CQE_BYTES) = 0xffffffff;
	if (post_write(&cl, &sv, 5, 64, 0))
		die(1, "post: %s", strerror(errno));
	if (poll(&pfd, 1, 20000) != 1 || ibv_get_async_event(cl.id->verbs, &ae))
		die(1, "no asynchronous event");
	if (ae.event_type != IBV_EVENT_CQ_ERR)
		die(1, "event %s, expected CQ error", ibv_event_type_str(ae.event_type));
	ibv_ack_async_event(&ae);
	return 0;
}

/* Unmaps the rings, then uses them: the process dies, the kernel does not mind. */
static int unmap_rings(void)
{
	post_write(&cl, &sv, 6, BUF_BYTES, 0);
	munmap(cl.scq_ring, cl.scq_len);
	munmap(cl.sq, QDEPTH * SQE_BYTES);
	post_write(&cl, &sv, 7, BUF_BYTES, 0);
	return 0;
}

/* Work in flight at exit. */
static int exit_inflight(void)
{
	int i;

	for (i = 0; i < QDEPTH; i++)
		post_write(&cl, &sv, 8, BUF_BYTES, i & 1);
	_exit(0);
}

/* A fork in the middle: the parent's QPs and registered memory keep working. */
static int forked(void)
{
	struct ibv_wc wc;
	pid_t pid;
	int i, st;

	pid = fork();
	if (pid < 0)
		die(2, "fork: %s", strerror(errno));
	if (!pid) {
		/* The child writes the registered buffers (copy-on-write) and leaves. */
		memset(cl.buf, 0x5a, BUF_BYTES);
		memset(sv.buf, 0x5a, BUF_BYTES);
		_exit(0);
	}
	waitpid(pid, &st, 0);
	for (i = 0; i < 10; i++) {
		memset(cl.buf, i + 1, BUF_BYTES);
		if (post_write(&cl, &sv, 9, BUF_BYTES, 0) || poll_n(cl.scq, &wc, 1) != 1 ||
		    wc.status != IBV_WC_SUCCESS)
			die(1, "write %d after fork failed", i);
		fence();
		if (sv.buf[0] != i + 1 || sv.buf[BUF_BYTES - 1] != i + 1)
			die(1, "write %d after fork did not land in the parent's buffer", i);
	}
	return 0;
}

/*
 * The server unmaps its registered buffer while the client writes to it and maps
 * fresh memory at the same address: the writes go on into the pinned pages, the
 * fresh memory stays untouched, and a Read returns what was written.
 */
static int munmap_mr(void)
{
	struct ibv_wc wc;
	char *fresh;
	int i;

	memset(cl.buf, 0x11, BUF_BYTES);
	if (post_write(&cl, &sv, 10, BUF_BYTES, 0) || poll_n(cl.scq, &wc, 1) != 1 ||
	    wc.status != IBV_WC_SUCCESS)
		die(1, "write before munmap failed");
	fence();
	if (sv.buf[100] != 0x11)
		die(1, "write before munmap did not land");
	munmap(sv.buf, BUF_BYTES);
	fresh = mmap(sv.buf, BUF_BYTES, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	if (fresh != sv.buf)
		die(2, "mmap at the old address: %s", strerror(errno));
	memset(cl.buf, 0x22, BUF_BYTES);
	for (i = 0; i < 10; i++)
		if (post_write(&cl, &sv, 11, BUF_BYTES, 0) || poll_n(cl.scq, &wc, 1) != 1 ||
		    wc.status != IBV_WC_SUCCESS)
			die(1, "write %d after munmap failed", i);
	for (i = 0; i < BUF_BYTES; i++)
		if (fresh[i])
			die(1, "the fresh mapping was written at %d", i);
	memset(cl.buf, 0, BUF_BYTES);
	if (post_write(&cl, &sv, 12, BUF_BYTES, 1) || poll_n(cl.scq, &wc, 1) != 1 ||
	    wc.status != IBV_WC_SUCCESS)
		die(1, "read after munmap failed");
	for (i = 0; i < BUF_BYTES; i++)
		if (cl.buf[i] != 0x22)
			die(1, "read back %#x at %d, expected 0x22", cl.buf[i], i);
	return 0;
}

/* 16 Writes of BUF_BYTES, then the QPs are held until stdin ends. */
static int hold(void)
{
	struct ibv_wc wc;
	char line[16];
	int i;

	for (i = 0; i < 16; i++)
		if (post_write(&cl, &sv, 20 + i, BUF_BYTES, 0) || poll_n(cl.scq, &wc, 1) != 1 ||
		    wc.status != IBV_WC_SUCCESS)
			die(1, "write %d failed", i);
	printf("held %u %u\n", cl.id->qp->qp_num, sv.id->qp->qp_num);
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin))
		;
	return 0;
}

int main(int argc, char **argv)
{
	static const uint32_t one[] = { 64 }, huge[] = { 0xfffffff0, 0xfffffff0 }, long_inline[] = { 81 };

	if (argc != 4) {
		fprintf(stderr, "usage: hostile_user CASE ADDR PORT\n");
		return 2;
	}
	case_name = argv[1];
	use_srq = !strncmp(case_name, "srq", 3);
	connect_sides(argv[2], argv[3]);
	if (!strcmp(case_name, "hold"))
		return hold();
	if (!strcmp(case_name, "sqe-opcode"))
		return bad_sqe(0, 1, 200, one, 1, cl.mr->lkey, IBV_WC_LOC_QP_OP_ERR, 1);
	if (!strcmp(case_name, "sqe-nsge7"))
		return bad_sqe(0, 7, OP_WRITE, one, 1, cl.mr->lkey, IBV_WC_LOC_QP_OP_ERR, 1);
	if (!strcmp(case_name, "sqe-nsge255"))
		return bad_sqe(0, 255, OP_WRITE, one, 1, cl.mr->lkey, IBV_WC_LOC_QP_OP_ERR, 1);
	if (!strcmp(case_name, "sqe-len-overflow"))
		return bad_sqe(0, 2, OP_WRITE, huge, 2, cl.mr->lkey, IBV_WC_LOC_LEN_ERR, 1);
	if (!strcmp(case_name, "sqe-inline-81"))
		return bad_sqe(WQE_INLINE, 0, OP_WRITE, long_inline, 1, 0, IBV_WC_LOC_QP_OP_ERR, 1);
	if (!strcmp(case_name, "sqe-read-inline"))
		return bad_sqe(WQE_INLINE, 0, OP_READ, one, 1, 0, IBV_WC_LOC_QP_OP_ERR, 1);
	if (!strcmp(case_name, "sqe-bad-lkey"))
		return bad_sqe(0, 1, OP_WRITE, one, 1, 0x12345678, IBV_WC_LOC_PROT_ERR, 0);
	if (!strcmp(case_name, "sqe-flip"))
		return flip_sqes();
	if (!strcmp(case_name, "rqe-nsge9"))
		return bad_recv_entry(sv.rq);
	if (!strcmp(case_name, "cq-overflow"))
		return cq_overflow();
	if (!strcmp(case_name, "cq-ctrl-garbage"))
		return cq_ctrl_garbage();
	if (!strcmp(case_name, "srqe-nsge9"))
		return bad_recv_entry(sv.srq_ring);
	if (!strcmp(case_name, "srqe-flip"))
		return flip_srqes();
	if (!strcmp(case_name, "unmap-rings"))
		return unmap_rings();
	if (!strcmp(case_name, "exit-inflight"))
		return exit_inflight();
	if (!strcmp(case_name, "fork"))
		return forked();
	if (!strcmp(case_name, "munmap-mr"))
		return munmap_mr();
	die(2, "unknown case");
}
