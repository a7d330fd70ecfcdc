// SPDX-License-Identifier: Apache-2.0
// nbd_min_responder — the least an io_uring NBD server can do for reads and
// writes, as a yardstick for the datapath suite (issues 28 and 29): what this
// machine's cores can carry when a client, a server and the disk share them.
// Not a server to use.
//
//   nbd_min_responder [--write] [--spin-us N] SOCKET FILE
//
// Listens on the Unix socket SOCKET, serves FILE (O_DIRECT; read-only unless
// --write) to one client at a time: fixed newstyle handshake (NBD_OPT_GO /
// INFO / EXPORT_NAME; every other option is refused as unsupported, so the
// client falls back to simple replies), then READ, WRITE (with --write),
// FLUSH (an fdatasync through the ring) and DISC. One thread, one ring: a
// recv of requests (a write's payload is copied into the op's buffer, or
// received straight into it when it is larger than what the recv brought),
// an O_DIRECT read or write per request, a writev of header (and data) per
// reply, and a poll of the completion queue for 200 us before it sleeps (as
// ubcache's reactor with a deep disk queue) — the submission pattern of
// ubcache's file export, and the least a writeback cache does for a write
// (its data written once to the cache device), with nothing else (no index,
// no journal, no writeback, no stats, no buffer pool). --spin-us N polls
// N us instead (0: it sleeps in io_uring_enter at once): with 0 its CPU per
// request is the least the kernel's part of a request costs here.
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <liburing.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

enum {
  kMaxOps = 256,              // requests in flight per connection
  kMaxRead = 32 << 20,        // largest READ served
  kRecvBytes = 64 << 10,
  kTagRecv = 0,               // user_data of the recv; ops are 1..kMaxOps
};

static const uint64_t kNbdMagic = 0x4e42444d41474943ull;   // "NBDMAGIC"
static const uint64_t kOptMagic = 0x49484156454F5054ull;   // "IHAVEOPT"
static const uint64_t kRepMagic = 0x3e889045565a9ull;
static const uint32_t kReqMagic = 0x25609513u, kSimpleReplyMagic = 0x67446698u;

struct op {
  int busy, sending;  // sending: 1 a reply header, 2 header and data
  uint64_t cookie;
  uint32_t len;
  unsigned char hdr[16];
  void* buf;
  size_t cap;
  int write;  // a WRITE: its reply carries no data
  uint64_t issued_ns;  // MIN_STATS: when its disk read was queued
};

static struct op ops[kMaxOps + 1];
static struct io_uring ring;
static uint64_t spin_ns;

// MIN_STATS: per connection, the disk reads' and writes' time-weighted depth
// (queued, not yet reaped) and mean latency, and the I/Os per io_uring_enter.
static int stats;
static uint64_t st_reads, st_lat_ns, st_depth_ns, st_last_ns, st_start_ns, st_enters;
static int st_depth;
static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}
static void depth_change(int delta) {
  uint64_t n = now_ns();
  if (st_last_ns) st_depth_ns += (uint64_t)st_depth * (n - st_last_ns);
  st_last_ns = n;
  st_depth += delta;
}
static int file_fd;
static uint64_t file_size;
static int writable;  // --write
// A WRITE whose payload the recv buffer did not hold: the next recvs go
// straight into its buffer until `fill_got` reaches its length.
static struct op* fill_op;
static uint32_t fill_got;
static uint64_t fill_off;

static void die(const char* what) { perror(what); exit(1); }

// SIGTERM is how the bench stops its servers: a clean exit.
static void on_term(int sig) { _exit(0); }

static int read_full(int fd, void* p, size_t n) {
  for (size_t got = 0; got < n;) {
    ssize_t r = read(fd, (char*)p + got, n - got);
    if (r <= 0) return -1;
    got += (size_t)r;
  }
  return 0;
}

static int write_full(int fd, const void* p, size_t n) {
  for (size_t done = 0; done < n;) {
    ssize_t r = write(fd, (const char*)p + done, n - done);
    if (r <= 0) return -1;
    done += (size_t)r;
  }
  return 0;
}

static int opt_reply(int fd, uint32_t opt, uint32_t type, const void* data, uint32_t len) {
  unsigned char h[20];
  uint64_t m = htobe64(kRepMagic);
  uint32_t o = htobe32(opt), t = htobe32(type), l = htobe32(len);
  memcpy(h, &m, 8), memcpy(h + 8, &o, 4), memcpy(h + 12, &t, 4), memcpy(h + 16, &l, 4);
  return write_full(fd, h, sizeof h) || (len && write_full(fd, data, len)) ? -1 : 0;
}

// The fixed newstyle handshake, blocking. 0: transmission starts.
static int handshake(int fd) {
  const uint16_t tflags = writable ? 1 | 4 : 1 | 2 | 4;  // HAS_FLAGS, [READ_ONLY,] SEND_FLUSH
  unsigned char g[18];
  uint64_t a = htobe64(kNbdMagic), b = htobe64(kOptMagic);
  uint16_t hf = htobe16(1 | 2);  // FIXED_NEWSTYLE, NO_ZEROES
  memcpy(g, &a, 8), memcpy(g + 8, &b, 8), memcpy(g + 16, &hf, 2);
  uint32_t cflags;
  if (write_full(fd, g, sizeof g) || read_full(fd, &cflags, 4)) return -1;
  for (;;) {
    unsigned char h[16];
    if (read_full(fd, h, sizeof h)) return -1;
    uint32_t opt, len;
    memcpy(&opt, h + 8, 4), memcpy(&len, h + 12, 4);
    opt = be32toh(opt), len = be32toh(len);
    if (len > 4096) return -1;
    char data[4096];
    if (len && read_full(fd, data, len)) return -1;
    uint64_t size = htobe64(file_size);
    uint16_t fl = htobe16(tflags);
    if (opt == 1) {  // EXPORT_NAME: no reply header, just the export
      unsigned char r[10];
      memcpy(r, &size, 8), memcpy(r + 8, &fl, 2);
      return write_full(fd, r, sizeof r);
    }
    if (opt == 6 || opt == 7) {  // INFO, GO: NBD_INFO_EXPORT, then ACK
      unsigned char info[12] = {0, 0};
      memcpy(info + 2, &size, 8), memcpy(info + 10, &fl, 2);
      if (opt_reply(fd, opt, 3, info, sizeof info) || opt_reply(fd, opt, 1, NULL, 0)) return -1;
      if (opt == 7) return 0;
      continue;
    }
    if (opt == 2) {  // ABORT
      opt_reply(fd, opt, 1, NULL, 0);
      return -1;
    }
    if (opt_reply(fd, opt, 0x80000001u, NULL, 0)) return -1;  // ERR_UNSUP
  }
}

// Replies leave in order through one writev at a time (a stream socket
// takes a large reply in several writes, which must not interleave): the
// replies ready while one is in flight go out together in the next.
enum { kTagSend = kMaxOps + 1, kMaxBatch = 64 };
static int sendq[kMaxOps], sendq_head, sendq_len;
static struct iovec send_iov[2 * kMaxBatch];
static int send_ops[kMaxBatch], send_nops, send_first, send_niov;

// A free SQE; when the ring is full, what it holds is submitted first.
static struct io_uring_sqe* get_sqe(void) {
  struct io_uring_sqe* sqe = io_uring_get_sqe(&ring);
  if (!sqe) {
    io_uring_submit(&ring);
    sqe = io_uring_get_sqe(&ring);
  }
  return sqe;
}

static void start_send(int fd) {
  if (send_nops || !sendq_len) return;
  send_niov = send_first = 0;
  while (sendq_len && send_nops < kMaxBatch) {
    struct op* o = &ops[sendq[sendq_head]];
    send_ops[send_nops++] = sendq[sendq_head];
    sendq_head = (sendq_head + 1) % kMaxOps, sendq_len--;
    send_iov[send_niov++] = (struct iovec){o->hdr, 16};
    if (o->len && o->sending == 2) send_iov[send_niov++] = (struct iovec){o->buf, o->len};
  }
  struct io_uring_sqe* sqe = get_sqe();
  io_uring_prep_writev(sqe, fd, send_iov + send_first, (unsigned)(send_niov - send_first), 0);
  io_uring_sqe_set_data64(sqe, kTagSend);
}

// `n` bytes of the batch went out: 1 when all of it has (its ops are free),
// else 0 with the rest submitted.
static int batch_sent(int fd, size_t n) {
  while (n && send_first < send_niov) {
    size_t k = n < send_iov[send_first].iov_len ? n : send_iov[send_first].iov_len;
    send_iov[send_first].iov_base = (char*)send_iov[send_first].iov_base + k;
    send_iov[send_first].iov_len -= k;
    n -= k;
    if (send_iov[send_first].iov_len == 0) send_first++;
  }
  if (send_first < send_niov) {
    struct io_uring_sqe* sqe = get_sqe();
    io_uring_prep_writev(sqe, fd, send_iov + send_first, (unsigned)(send_niov - send_first), 0);
    io_uring_sqe_set_data64(sqe, kTagSend);
    return 0;
  }
  for (int i = 0; i < send_nops; i++) ops[send_ops[i]].busy = 0;
  send_nops = 0;
  return 1;
}

static void queue_reply(int fd, struct op* o, uint32_t error, int with_data) {
  uint32_t m = htobe32(kSimpleReplyMagic), e = htobe32(error);
  memcpy(o->hdr, &m, 4), memcpy(o->hdr + 4, &e, 4), memcpy(o->hdr + 8, &o->cookie, 8);
  o->sending = with_data ? 2 : 1;
  sendq[(sendq_head + sendq_len++) % kMaxOps] = (int)(o - ops);
  start_send(fd);
}

static void submit_io(struct op* o, uint64_t off) {
  struct io_uring_sqe* sqe = get_sqe();
  if (o->write)
    io_uring_prep_write(sqe, file_fd, o->buf, o->len, off);
  else
    io_uring_prep_read(sqe, file_fd, o->buf, o->len, off);
  if (stats) o->issued_ns = now_ns(), depth_change(1);
  io_uring_sqe_set_data64(sqe, (uint64_t)(o - ops));
}

static struct op* new_op(void) {
  for (int i = 1; i <= kMaxOps; i++)
    if (!ops[i].busy) {
      ops[i].busy = 1;
      return &ops[i];
    }
  return NULL;
}

// Parses whole requests out of buf[*start, end); returns 1 on DISC or error.
// A WRITE whose payload is not all in the buffer takes what is there and
// leaves the rest to fill_op.
static int take_requests(int fd, unsigned char* buf, size_t* start, size_t end) {
  while (!fill_op && end - *start >= 28) {
    unsigned char* r = buf + *start;
    uint32_t magic, len;
    uint16_t type;
    uint64_t cookie, off;
    memcpy(&magic, r, 4), memcpy(&type, r + 6, 2), memcpy(&cookie, r + 8, 8);
    memcpy(&off, r + 16, 8), memcpy(&len, r + 24, 4);
    if (be32toh(magic) != kReqMagic) return 1;
    type = be16toh(type), off = be64toh(off), len = be32toh(len);
    if (type == 2) return 1;  // DISC
    if (type == 1 && !writable) return 1;  // a payload we will not take: end the connection
    struct op* o = new_op();
    if (!o) return 0;  // all busy: parse the rest after a completion
    *start += 28;
    o->cookie = cookie, o->len = len, o->write = type == 1;
    if (type == 3) {  // FLUSH
      if (writable) {
        o->len = 0;
        struct io_uring_sqe* sqe = get_sqe();
        io_uring_prep_fsync(sqe, file_fd, IORING_FSYNC_DATASYNC);
        io_uring_sqe_set_data64(sqe, (uint64_t)(o - ops));
      } else {
        queue_reply(fd, o, 0, 0);  // nothing is cached
      }
      continue;
    }
    if ((type != 0 && type != 1) || len == 0 || len > kMaxRead || off + len > file_size) {
      if (type == 1) return 1;  // its payload is not skipped: end the connection
      queue_reply(fd, o, 22, 0);  // EINVAL
      continue;
    }
    if (o->cap < len) {
      free(o->buf);
      o->cap = (len + 4095) & ~(size_t)4095;
      if (posix_memalign(&o->buf, 4096, o->cap)) die("posix_memalign");
    }
    if (o->write) {
      size_t have = end - *start < len ? end - *start : len;
      memcpy(o->buf, buf + *start, have);
      *start += have;
      if (have < len) {
        fill_op = o, fill_got = (uint32_t)have, fill_off = off;
        return 0;
      }
    }
    submit_io(o, off);
  }
  return 0;
}

static void serve(int fd) {
  static unsigned char buf[kRecvBytes];
  size_t start = 0, end = 0;
  int reading = 1, recv_armed = 0;
  for (;;) {
    if (reading && !recv_armed && fill_op) {
      struct io_uring_sqe* sqe = get_sqe();
      io_uring_prep_recv(sqe, fd, (char*)fill_op->buf + fill_got, fill_op->len - fill_got, 0);
      io_uring_sqe_set_data64(sqe, kTagRecv);
      recv_armed = 1;
    }
    if (reading && !recv_armed) {
      if (start == end) start = end = 0;
      if (end == sizeof buf) {
        memmove(buf, buf + start, end - start);
        end -= start, start = 0;
      }
      struct io_uring_sqe* sqe = get_sqe();
      io_uring_prep_recv(sqe, fd, buf + end, sizeof buf - end, 0);
      io_uring_sqe_set_data64(sqe, kTagRecv);
      recv_armed = 1;
    }
    if (!reading && !recv_armed) {
      int busy = 0;
      for (int i = 1; i <= kMaxOps; i++) busy |= ops[i].busy;
      if (!busy) return;
    }
    if (spin_ns) {
      // MIN_SPIN_US: poll the CQ that long before sleeping (an experiment).
      io_uring_submit(&ring);
      const uint64_t until = now_ns() + spin_ns;
      while (io_uring_cq_ready(&ring) == 0 && now_ns() < until) {
      }
    }
    io_uring_submit_and_wait(&ring, 1);
    st_enters++;
    struct io_uring_cqe* cqe;
    unsigned head, n = 0;
    io_uring_for_each_cqe(&ring, head, cqe) {
      n++;
      uint64_t tag = io_uring_cqe_get_data64(cqe);
      int res = cqe->res;
      if (tag == kTagRecv) {
        recv_armed = 0;
        if (res <= 0) {
          reading = 0;
        } else if (fill_op) {
          fill_got += (uint32_t)res;
          if (fill_got == fill_op->len) {
            submit_io(fill_op, fill_off);
            fill_op = NULL;
            if (take_requests(fd, buf, &start, end)) reading = 0;
          }
        } else {
          end += (size_t)res;
          if (take_requests(fd, buf, &start, end)) reading = 0;
        }
        continue;
      }
      if (tag == kTagSend) {  // an error ends the connection
        if (res <= 0) {
          if (res < 0) fprintf(stderr, "nbd_min_responder: send: %s\n", strerror(-res));
          reading = 0;
          for (int i = 0; i < send_nops; i++) ops[send_ops[i]].busy = 0;
          send_nops = 0;
          while (sendq_len) ops[sendq[sendq_head]].busy = 0, sendq_head = (sendq_head + 1) % kMaxOps, sendq_len--;
          continue;
        }
        if (batch_sent(fd, (size_t)res)) {
          if (reading) start_send(fd);
          if (reading && take_requests(fd, buf, &start, end)) reading = 0;
        }
        continue;
      }
      struct op* o = &ops[tag];
      if (stats && o->len) st_reads++, st_lat_ns += now_ns() - o->issued_ns, depth_change(-1);
      queue_reply(fd, o, res == (int)o->len ? 0 : 5, !o->write && res == (int)o->len);  // EIO when short
    }
    io_uring_cq_advance(&ring, n);
  }
}

int main(int argc, char** argv) {
  long spin_us = -1;  // --spin-us: MIN_SPIN_US on the command line
  for (;;) {
    if (argc > 1 && strcmp(argv[1], "--write") == 0) {
      writable = 1, argc--, argv++;
    } else if (argc > 2 && strcmp(argv[1], "--spin-us") == 0) {
      char* end;
      spin_us = strtol(argv[2], &end, 10);
      if (*end || spin_us < 0) {
        fprintf(stderr, "%s: --spin-us takes microseconds (0: sleep at once)\n", argv[0]);
        return 2;
      }
      argc -= 2, argv += 2;
    } else {
      break;
    }
  }
  if (argc != 3) {
    fprintf(stderr, "usage: %s [--write] [--spin-us N] SOCKET FILE\n", argv[0]);
    return 2;
  }
  signal(SIGTERM, on_term);
  signal(SIGPIPE, SIG_IGN);  // a client gone mid-reply ends its connection, not the server
  file_fd = open(argv[2], (writable ? O_RDWR : O_RDONLY) | O_DIRECT);
  if (file_fd < 0) die(argv[2]);
  struct stat st;
  if (fstat(file_fd, &st)) die("fstat");
  file_size = (uint64_t)st.st_size;
  // Experiments (issue 28's QD32 question: does another submission
  // pattern get more from this machine?): MIN_RING_FLAGS, io_uring setup
  // flags (e.g. 0x3100: COOP_TASKRUN | SINGLE_ISSUER | DEFER_TASKRUN; 2:
  // SQPOLL); MIN_SPIN_US, how long to poll the CQ before sleeping (200;
  // measured at QD32, 2-vCPU VM: 0, 50, 200, 1000 us gave 68-70k, 87-88k,
  // 92-93k, 91-94k IOPS against the raw file's 106-119k).
  const char* env = getenv("MIN_RING_FLAGS");
  unsigned flags = env ? (unsigned)strtoul(env, NULL, 0) : 0;
  stats = getenv("MIN_STATS") != NULL;
  env = getenv("MIN_SPIN_US");
  spin_ns = (spin_us >= 0 ? (unsigned long long)spin_us : env ? strtoull(env, NULL, 0) : 200) * 1000;
  if (io_uring_queue_init(512, &ring, flags)) die("io_uring_queue_init");
  int ls = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  if (strlen(argv[1]) >= sizeof a.sun_path) return 2;
  strcpy(a.sun_path, argv[1]);
  unlink(argv[1]);
  if (ls < 0 || bind(ls, (struct sockaddr*)&a, sizeof a) || listen(ls, 8)) die("listen");
  for (;;) {
    int fd = accept(ls, NULL, NULL);
    if (fd < 0) die("accept");
    st_reads = st_lat_ns = st_depth_ns = st_last_ns = st_enters = 0;
    fill_op = NULL;
    st_depth = 0;
    st_start_ns = now_ns();
    if (handshake(fd) == 0) serve(fd);
    if (stats && st_reads)
      fprintf(stderr, "nbd_min_responder: %llu reads and writes, %.0f/s, disk depth %.1f (time-weighted), latency %.0f us, %.2f per io_uring_enter\n",
              (unsigned long long)st_reads, st_reads * 1e9 / (now_ns() - st_start_ns),
              st_depth_ns / (double)(now_ns() - st_start_ns), st_lat_ns / 1000.0 / st_reads,
              st_reads / (double)st_enters);
    close(fd);
  }
}
