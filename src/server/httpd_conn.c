/* httpd_conn.c — the open connections of either server (httpd.h): one conn_info each (libmicrohttpd's socket
 * context), counted in all and per client address, so that httpd_judge can answer connections opened beyond
 * max_connections or max_connections_per_ip with a 503 and Retry-After (never a reset for a well-formed request);
 * and the request deadline: a connection must deliver a complete request within request_timeout_s of opening or of
 * its previous reply, however slowly it trickles bytes (libmicrohttpd's own timeout only counts silence). A thread
 * checks the deadlines twice a second and shuts late connections down; libmicrohttpd then closes them as it does
 * any connection whose peer went away.
 *
 * The table's lock is held from NOTIFY_STARTED to the end of NOTIFY_CLOSED and around every shutdown(), and
 * libmicrohttpd closes a socket only after NOTIFY_CLOSED, so the deadline thread never touches a closed (or
 * reused) descriptor.
 *
 * libmicrohttpd 0.9.75 keeps a connection whose peer closed in the middle of a request until its timeout when the
 * FIN came right behind the bytes (headers or half a body, then close: it never looks at the socket again), so a
 * client closing early would hold a connection slot for request_timeout_s, as one holding on does. The same sweep
 * shuts such connections down: the peer's FIN seen, nothing left unread, on two sweeps in a row (so that a request
 * whose last bytes libmicrohttpd has just read is never cut: by the second sweep it is complete, not waiting).
 *
 * Connection memory (libmicrohttpd's 32 KiB pools, on the heap: mapping each on its own cost a TLB shootdown per
 * closed connection, 20% of the server's time under a connection flood) goes back to the system from the same
 * thread: after many connections closed, at most once every TRIM_EVERY_MS, the heap's free pages are released. */
#include <poll.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <netinet/in.h>

#include <microhttpd.h>

#include "common/error.h"
#include "common/platform.h"
#include "server/httpd.h"

#define ADDR_BUCKETS 1024
#define TRIM_EVERY_MS 2000.0
#define TRIM_AFTER_CLOSED 64 /* connections closed since the last release */

typedef struct addr_count {
    unsigned char ip[16];
    int32_t count;
    struct addr_count *next;
} addr_count;

struct conn_table {
    httpd *h;
    int32_t max_connections, max_connections_per_ip;
    double timeout_ms;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    conn_info *head;
    int32_t n_open;
    int64_t closed_since_trim;
    addr_count *buckets[ADDR_BUCKETS];
    struct pollfd *polls; /* the deadline thread's: one per connection waiting for its request */
    conn_info **polled;
    int32_t n_polls_cap;
    pthread_t deadline_thread;
    bool thread_started, stopping;
};

/* The address as 16 bytes (IPv4 mapped into IPv6), so both families share the counts. */
static void addr_key(const struct sockaddr_storage *a, unsigned char ip[16]) {
    memset(ip, 0, 16);
    if (a->ss_family == AF_INET6) {
        memcpy(ip, &((const struct sockaddr_in6 *)a)->sin6_addr, 16);
    } else if (a->ss_family == AF_INET) {
        ip[10] = ip[11] = 0xff;
        memcpy(ip + 12, &((const struct sockaddr_in *)a)->sin_addr, 4);
    }
}

static addr_count **addr_slot(conn_table *t, const unsigned char ip[16]) {
    uint32_t h = 2166136261u;
    for (int i = 0; i < 16; i++) h = (h ^ ip[i]) * 16777619u;
    addr_count **pp = &t->buckets[h % ADDR_BUCKETS];
    while (*pp && memcmp((*pp)->ip, ip, 16) != 0) pp = &(*pp)->next;
    return pp;
}

/* Connections polled by the sweep whose peer is gone: shut down on the second sweep that finds nothing unread. */
static void shut_gone_peers(conn_table *t, int32_t n_polls) {
    for (int32_t i = 0; i < n_polls; i++) {
        conn_info *ci = t->polled[i];
        int unread = 0;
        const bool gone = (t->polls[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) &&
                          ioctl(t->polls[i].fd, FIONREAD, &unread) == 0 && unread == 0;
        ci->eof_sweeps = gone ? (int8_t)(ci->eof_sweeps + 1) : 0;
        if (ci->eof_sweeps >= 2) {
            shutdown(t->polls[i].fd, SHUT_RDWR);
            ci->waiting_since_ms = 0; /* once */
        }
    }
}

/* Room to poll every open connection on the next sweep (called with the lock held; a failed growth polls fewer). */
static void grow_polls(conn_table *t) {
    if (t->n_open <= t->n_polls_cap) return;
    const int32_t cap = t->n_open + t->n_open / 2 + 64;
    struct pollfd *polls = realloc(t->polls, (size_t)cap * sizeof *polls);
    if (polls) t->polls = polls;
    conn_info **polled = realloc(t->polled, (size_t)cap * sizeof *polled);
    if (polled) t->polled = polled;
    if (polls && polled) t->n_polls_cap = cap;
}

static void *deadline_main(void *arg) {
    conn_table *t = arg;
    const double timeout_ms = t->timeout_ms;
    double trimmed_ms = httpd_now_ms();
    pthread_mutex_lock(&t->mu);
    while (!t->stopping) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 500 * 1000 * 1000;
        if (until.tv_nsec >= 1000000000) until.tv_sec++, until.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&t->wake, &t->mu, &until);
        const double now = httpd_now_ms();
        int32_t n_polls = 0;
        for (conn_info *ci = t->head; ci; ci = ci->next) {
            if (ci->waiting_since_ms <= 0) continue;
            const union MHD_ConnectionInfo *fd = MHD_get_connection_info(ci->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
            if (!fd) continue;
            if (now - ci->waiting_since_ms >= timeout_ms) {
                shutdown(fd->connect_fd, SHUT_RDWR);
                ci->waiting_since_ms = 0; /* once */
            } else if (n_polls < t->n_polls_cap) {
                t->polls[n_polls] = (struct pollfd){.fd = fd->connect_fd, .events = POLLRDHUP};
                t->polled[n_polls++] = ci;
            }
        }
        if (n_polls > 0 && poll(t->polls, (nfds_t)n_polls, 0) > 0) shut_gone_peers(t, n_polls);
        grow_polls(t);
        if (t->closed_since_trim >= TRIM_AFTER_CLOSED && now - trimmed_ms >= TRIM_EVERY_MS) {
            t->closed_since_trim = 0;
            trimmed_ms = now;
            pthread_mutex_unlock(&t->mu);
            tr_platform_trim_heap();
            pthread_mutex_lock(&t->mu);
        }
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

tr_status conn_table_create(httpd *h, int32_t max_connections, int32_t max_connections_per_ip,
                            int32_t request_timeout_s, conn_table **out) {
    conn_table *t = calloc(1, sizeof *t);
    if (!t) return tr_fail(TR_ERR_NOMEM, "out of memory");
    t->h = h;
    t->max_connections = max_connections;
    t->max_connections_per_ip = max_connections_per_ip;
    t->timeout_ms = request_timeout_s * 1e3;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->wake, NULL);
    if (pthread_create(&t->deadline_thread, NULL, deadline_main, t) != 0) {
        conn_table_free(t);
        return tr_fail(TR_ERR_NOMEM, "cannot start the server's deadline thread");
    }
    t->thread_started = true;
    *out = t;
    return TR_OK;
}

void conn_table_free(conn_table *t) {
    if (!t) return;
    if (t->thread_started) {
        pthread_mutex_lock(&t->mu);
        t->stopping = true;
        pthread_cond_signal(&t->wake);
        pthread_mutex_unlock(&t->mu);
        pthread_join(t->deadline_thread, NULL);
    }
    for (int b = 0; b < ADDR_BUCKETS; b++)
        for (addr_count *a = t->buckets[b], *next; a; a = next) next = a->next, free(a);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->wake);
    free(t->polls);
    free(t->polled);
    free(t);
}

void conn_table_notify(void *cls, struct MHD_Connection *conn, void **socket_context, int code) {
    conn_table *t = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        conn_info *ci = calloc(1, sizeof *ci);
        *socket_context = ci;
        if (!ci) return; /* httpd_judge answers a connection without conn_info with 503 */
        ci->table = t;
        ci->h = t->h;
        ci->conn = conn;
        const union MHD_ConnectionInfo *a = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (a && a->client_addr)
            memcpy(&ci->addr, a->client_addr,
                   a->client_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
        unsigned char ip[16];
        addr_key(&ci->addr, ip);
        pthread_mutex_lock(&t->mu);
        addr_count **pp = addr_slot(t, ip);
        if (!*pp && (*pp = calloc(1, sizeof **pp))) memcpy((*pp)->ip, ip, 16);
        if (*pp) {
            ci->over_ip_limit = (*pp)->count >= t->max_connections_per_ip;
            (*pp)->count++;
        }
        ci->over_limit = t->n_open >= t->max_connections;
        t->n_open++;
        ci->waiting_since_ms = httpd_now_ms();
        ci->next = t->head;
        if (t->head) t->head->prev = ci;
        t->head = ci;
        pthread_mutex_unlock(&t->mu);
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        conn_info *ci = *socket_context;
        *socket_context = NULL;
        if (!ci) return;
        unsigned char ip[16];
        addr_key(&ci->addr, ip);
        pthread_mutex_lock(&t->mu);
        addr_count **pp = addr_slot(t, ip);
        if (*pp && --(*pp)->count == 0) {
            addr_count *gone = *pp;
            *pp = gone->next;
            free(gone);
        }
        t->n_open--;
        t->closed_since_trim++;
        if (ci->prev) ci->prev->next = ci->next;
        else t->head = ci->next;
        if (ci->next) ci->next->prev = ci->prev;
        pthread_mutex_unlock(&t->mu);
        free(ci);
    }
}

conn_info *conn_info_of(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

void conn_request_complete(conn_info *ci) {
    if (!ci) return;
    pthread_mutex_lock(&ci->table->mu);
    ci->waiting_since_ms = 0;
    pthread_mutex_unlock(&ci->table->mu);
}

void conn_request_answered(conn_info *ci) {
    if (!ci) return;
    pthread_mutex_lock(&ci->table->mu);
    ci->waiting_since_ms = httpd_now_ms();
    pthread_mutex_unlock(&ci->table->mu);
}

int32_t conn_table_open(const conn_table *t) { return t->n_open; }

/* A FIN alone (POLLRDHUP) is no hang-up: a client may shut its sending side after the request and still read the
 * reply. Linux reports POLLHUP only once the socket is shut both ways, which from the peer's side means a reset
 * (POLLERR with it): what a closed client answers the next bytes written to it with. */
bool conn_client_gone(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *fd = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!fd) return false;
    struct pollfd p = {.fd = fd->connect_fd, .events = POLLIN};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR));
}
