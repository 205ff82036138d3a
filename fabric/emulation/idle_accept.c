/* Preloaded into ovs-vswitchd: an accept() on a listening socket that the
 * calling thread's last poll() found idle fails with EAGAIN without entering
 * the kernel.
 *
 * Why: ovs-vswitchd's main loop tries accept() on every listening socket it
 * has (two per bridge, <bridge>.mgmt and <bridge>.snoop, and its control
 * socket) on every iteration, and the kernel allocates and frees a socket
 * for each one that finds no connection. With 8 bridges that was ~20 % of
 * the forwarding thread's time (see fabric/emulation/ovs.py).
 *
 * Why it is safe: a caller that polled the socket for input is woken by the
 * next poll() as soon as a connection arrives, and tries again then; this
 * only answers "nothing yet" for a socket that poll() has just reported idle.
 * Sockets not in the thread's last poll(), blocking sockets and descriptors
 * beyond MAX_FDS always get the real accept().
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>

#define MAX_FDS 65536

/* Per descriptor: the thread (1-based index) and that thread's poll round
 * that last polled it for input, and whether it had input then. One word,
 * so a reader never sees a torn entry. */
static _Atomic uint64_t polled[MAX_FDS];
/* accept() calls answered here, for tests and curious operators (gdb). */
_Atomic unsigned long fabric_idle_accepts;
static atomic_uint next_thread = 1;
static __thread uint32_t thread_index;
static __thread uint32_t round_no;

static int (*real_poll)(struct pollfd *, nfds_t, int);
static int (*real_accept)(int, struct sockaddr *, socklen_t *);
static int (*real_accept4)(int, struct sockaddr *, socklen_t *, int);

static uint64_t entry(uint32_t round, int ready)
{
    return ((uint64_t) (thread_index & 0xffff) << 48)
           | ((uint64_t) round << 1) | (ready ? 1 : 0);
}

int poll(struct pollfd *fds, nfds_t nfds, int timeout)
{
    if (!real_poll) {
        real_poll = dlsym(RTLD_NEXT, "poll");
    }
    int n = real_poll(fds, nfds, timeout);
    if (n < 0) {
        return n;
    }
    if (!thread_index) {
        thread_index = atomic_fetch_add(&next_thread, 1);
    }
    round_no = (round_no + 1) & 0x7fffffff;
    for (nfds_t i = 0; i < nfds; i++) {
        int fd = fds[i].fd;
        if (fd >= 0 && fd < MAX_FDS && (fds[i].events & POLLIN)) {
            atomic_store_explicit(&polled[fd], entry(round_no, fds[i].revents != 0),
                                  memory_order_relaxed);
        }
    }
    return n;
}

/* True when this thread's last poll() asked 'fd' for input and found none,
 * and 'fd' does not block (a blocking accept() must wait, not fail). */
static int known_idle(int fd)
{
    if (fd < 0 || fd >= MAX_FDS || !thread_index) {
        return 0;
    }
    uint64_t seen = atomic_load_explicit(&polled[fd], memory_order_relaxed);
    if (seen != entry(round_no, 0)) {
        return 0;
    }
    int flags = fcntl(fd, F_GETFL);
    return flags >= 0 && (flags & O_NONBLOCK);
}

/* Answers "nothing yet" (EAGAIN) for a known idle 'fd'; false otherwise. */
static int answered_idle(int fd)
{
    if (!known_idle(fd)) {
        return 0;
    }
    atomic_fetch_add_explicit(&fabric_idle_accepts, 1, memory_order_relaxed);
    errno = EAGAIN;
    return 1;
}

int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
    if (answered_idle(fd)) {
        return -1;
    }
    if (!real_accept) {
        real_accept = dlsym(RTLD_NEXT, "accept");
    }
    return real_accept(fd, addr, len);
}

int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    if (answered_idle(fd)) {
        return -1;
    }
    if (!real_accept4) {
        real_accept4 = dlsym(RTLD_NEXT, "accept4");
    }
    return real_accept4(fd, addr, len, flags);
}
