/* httpd_defer.c — requests that block (on serve's scheduler, on the device's generation slots and generations) run
 * on worker threads, so libmicrohttpd's event threads (epoll, a small pool) never block: they only read requests,
 * check them and write replies, and idle or half-sent connections cost no thread at all. A server's access handler
 * hands such a request to defer_run, which suspends the connection and queues the work; a worker runs it with the
 * ordinary senders (httpd_send_buffer, httpd_send_stream, and each server's helpers over them), which see that the
 * connection's reply is being captured (defer_capturing) and keep it in the connection's slot; the worker then
 * resumes the connection and libmicrohttpd calls the access handler again, where defer_reply queues the reply on
 * the event thread, as libmicrohttpd requires.
 *
 * A streamed reply's producer (a function that blocks until the next piece: a lookahead token, a generated token,
 * the device page's next event or its heartbeat) keeps running on the worker, pushing pieces into a pipe; the
 * response's reader on the event thread takes what is there, or suspends the connection and returns 0 until the
 * producer pushes more and resumes it. The pipe holds at most PIPE_CAP unsent bytes (a client that does not read
 * stops its producer, and libmicrohttpd's idle timeout closes it). When the client goes away the response is freed;
 * the producer notices before its next piece, stops, and calls the stream's done callback. The pipe is freed by
 * whichever side lets go last.
 *
 * Workers are created on demand up to max_threads; requests beyond them wait in a queue of max_queued, beyond that
 * the server answers 503 with Retry-After. While a non-streamed request runs, its client's hang-up is seen by
 * polling the socket between steps (defer_client_gone: a completion stops generating). */
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <microhttpd.h>

#include "common/error.h"
#include "server/httpd.h"

#define PIPE_CAP (64 * 1024)
#define PIPE_POLL_MS 100

typedef struct stream_pipe {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct MHD_Connection *conn;
    char *buf;
    size_t off, len, cap;   /* unsent bytes are buf[off .. len) */
    bool ended, cut;        /* the producer finished (cut: it failed, out of memory) */
    bool suspended;         /* the reader suspended the connection waiting for bytes */
    bool reader_ended;      /* the reader handed the whole body to libmicrohttpd */
    bool released;          /* libmicrohttpd freed the response (or never made one) */
    int refs;
    char *(*next)(void *cls, bool *last);
    void (*done)(void *cls, bool client_gone);
    void *cls;
} stream_pipe;

typedef struct defer_slot {
    struct MHD_Connection *conn;
    int (*work)(struct MHD_Connection *conn, void *arg);
    void *arg;
    void (*free_arg)(void *arg);
    /* the reply captured */
    bool captured, ready;
    unsigned status;
    const char *content_type;
    char *body;
    size_t len;
    const char *header; /* a name that outlives the request (a literal) */
    char value[48];     /* its value, copied */
    stream_pipe *pipe;
    struct defer_slot *next; /* in the queue */
} defer_slot;

struct defer_pool {
    pthread_mutex_t mu;
    pthread_cond_t work_cv, idle_cv;
    defer_slot *head, *tail;
    int32_t n_queued, n_threads, n_idle, max_threads, max_queued;
    pthread_t *threads;
    atomic_bool stopping;   /* producers check it at least every PIPE_POLL_MS */
};

static _Thread_local defer_slot *current; /* the request the calling worker serves */

static void pipe_unref(stream_pipe *p) {
    pthread_mutex_lock(&p->mu);
    const bool last = --p->refs == 0;
    pthread_mutex_unlock(&p->mu);
    if (!last) return;
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->buf);
    free(p);
}

/* libmicrohttpd's content reader (event thread): never blocks. */
static ssize_t pipe_read(void *cls, uint64_t pos, char *out, size_t max) {
    stream_pipe *p = cls;
    pthread_mutex_lock(&p->mu);
    if (p->off < p->len) {
        size_t n = p->len - p->off;
        if (n > max) n = max;
        memcpy(out, p->buf + p->off, n);
        p->off += n;
        if (p->off == p->len) p->off = p->len = 0;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        return (ssize_t)n;
    }
    if (p->ended) {
        p->reader_ended = !p->cut;
        pthread_mutex_unlock(&p->mu);
        return p->cut ? MHD_CONTENT_READER_END_WITH_ERROR : MHD_CONTENT_READER_END_OF_STREAM;
    }
    /* Nothing yet: sleep until the producer pushes (it resumes the connection; the lock orders the two). */
    p->suspended = true;
    MHD_suspend_connection(p->conn);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

static void pipe_free_response(void *cls) {
    stream_pipe *p = cls;
    pthread_mutex_lock(&p->mu);
    p->released = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pipe_unref(p);
}

/* Wakes the reader if it sleeps; called with p->mu held, resumes after unlocking (returns whether to). */
static bool take_wake(stream_pipe *p) {
    const bool wake = p->suspended;
    p->suspended = false;
    return wake;
}

/* Waits on p->cv (p->mu held) at most PIPE_POLL_MS, so that a stop is seen without a wake-up of its own. */
static void pipe_wait(stream_pipe *p) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += PIPE_POLL_MS * 1000000L;
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&p->cv, &p->mu, &until);
}

/* The producer (worker thread): pieces into the pipe until the last, a failure, the client gone or a stop. */
static void pipe_produce(defer_pool *pool, stream_pipe *p) {
    bool last = false, gone = false;
    while (!last && !gone) {
        pthread_mutex_lock(&p->mu);
        while (!p->released && p->len - p->off >= PIPE_CAP && !atomic_load(&pool->stopping)) pipe_wait(p);
        gone = p->released || atomic_load(&pool->stopping);
        pthread_mutex_unlock(&p->mu);
        if (gone) break;
        char *piece = p->next(p->cls, &last);
        const size_t n = piece ? strlen(piece) : 0;
        pthread_mutex_lock(&p->mu);
        if (piece && p->len + n > p->cap) {
            if (p->off > 0) memmove(p->buf, p->buf + p->off, p->len - p->off);
            p->len -= p->off;
            p->off = 0;
            size_t cap = p->cap ? p->cap : 4096;
            while (cap < p->len + n) cap *= 2;
            char *b = cap > p->cap ? realloc(p->buf, cap) : p->buf;
            if (b) p->buf = b, p->cap = cap;
            else free(piece), piece = NULL;
        }
        if (piece) {
            memcpy(p->buf + p->len, piece, n);
            p->len += n;
        } else {
            p->cut = true;
        }
        const bool wake = take_wake(p);
        pthread_mutex_unlock(&p->mu);
        free(piece);
        if (wake) MHD_resume_connection(p->conn);
        if (!piece) break;
    }
    pthread_mutex_lock(&p->mu);
    p->ended = true;
    if (gone && !p->released) p->cut = true; /* the client left (or the server stops): end the response */
    /* A reader that suspended after taking the last piece must run again to end the response, and only then is the
     * response released: wake it before waiting for that, never after (that waited forever). A released response's
     * connection may be gone, so it is never resumed. */
    bool wake = take_wake(p) && !p->released;
    pthread_mutex_unlock(&p->mu);
    if (wake) MHD_resume_connection(p->conn);
    pthread_mutex_lock(&p->mu);
    /* The whole body out, or the client gone: then done() can say which. A stop does not wait for slow readers. */
    while (!p->released && !atomic_load(&pool->stopping)) pipe_wait(p);
    const bool client_gone = !p->reader_ended && !(p->cut && !gone);
    wake = take_wake(p) && !p->released;
    pthread_mutex_unlock(&p->mu);
    if (wake) MHD_resume_connection(p->conn);
    p->done(p->cls, client_gone);
    pipe_unref(p);
}

static void run_slot(defer_pool *pool, defer_slot *s) {
    current = s;
    s->work(s->conn, s->arg);
    if (s->free_arg) s->free_arg(s->arg);
    current = NULL;
    stream_pipe *pipe = s->pipe;
    pthread_mutex_lock(&pool->mu);
    s->ready = true;
    pthread_mutex_unlock(&pool->mu);
    /* From here the event thread owns s (defer_reply frees it); pipe stays this thread's until it lets go. */
    MHD_resume_connection(s->conn);
    if (pipe) pipe_produce(pool, pipe);
}

static void *worker_main(void *arg) {
    defer_pool *pool = arg;
    pthread_mutex_lock(&pool->mu);
    for (;;) {
        while (!pool->head && !atomic_load(&pool->stopping)) {
            pool->n_idle++;
            pthread_cond_wait(&pool->work_cv, &pool->mu);
            pool->n_idle--;
        }
        if (!pool->head) break; /* stopping, and the queue is empty */
        defer_slot *s = pool->head;
        pool->head = s->next;
        if (!pool->head) pool->tail = NULL;
        pool->n_queued--;
        pthread_mutex_unlock(&pool->mu);
        run_slot(pool, s);
        pthread_mutex_lock(&pool->mu);
    }
    pthread_mutex_unlock(&pool->mu);
    return NULL;
}

tr_status defer_pool_create(int32_t max_threads, int32_t max_queued, defer_pool **out) {
    defer_pool *p = calloc(1, sizeof *p);
    if (!p || !(p->threads = calloc((size_t)max_threads, sizeof *p->threads))) {
        free(p);
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    }
    p->max_threads = max_threads;
    p->max_queued = max_queued;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work_cv, NULL);
    pthread_cond_init(&p->idle_cv, NULL);
    *out = p;
    return TR_OK;
}

void defer_pool_stop(defer_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stopping, true);
    pthread_cond_broadcast(&p->work_cv);
    const int32_t n = p->n_threads;
    pthread_mutex_unlock(&p->mu);
    for (int32_t i = 0; i < n; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_lock(&p->mu);
    p->n_threads = 0;
    pthread_mutex_unlock(&p->mu);
}

void defer_pool_free(defer_pool *p) {
    if (!p) return;
    defer_pool_stop(p);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work_cv);
    pthread_cond_destroy(&p->idle_cv);
    free(p->threads);
    free(p);
}

bool defer_run(defer_pool *p, struct MHD_Connection *conn, int (*work)(struct MHD_Connection *conn, void *arg),
               void *arg, void (*free_arg)(void *arg)) {
    conn_info *ci = conn_info_of(conn);
    if (!ci) return false;
    defer_slot *s = calloc(1, sizeof *s);
    if (!s) return false;
    *s = (defer_slot){.conn = conn, .work = work, .arg = arg, .free_arg = free_arg};
    pthread_mutex_lock(&p->mu);
    bool ok = !atomic_load(&p->stopping) && p->n_queued < p->max_queued;
    if (ok && p->n_idle <= p->n_queued && p->n_threads < p->max_threads) {
        if (pthread_create(&p->threads[p->n_threads], NULL, worker_main, p) == 0) p->n_threads++;
        else ok = p->n_threads > 0; /* the threads there will get to it */
    }
    if (ok) {
        ci->slot = s;
        /* Suspended before a worker can see it: the worker's resume then always follows this suspend. */
        MHD_suspend_connection(conn);
        if (p->tail) p->tail->next = s;
        else p->head = s;
        p->tail = s;
        p->n_queued++;
        pthread_cond_signal(&p->work_cv);
    }
    pthread_mutex_unlock(&p->mu);
    if (!ok) free(s);
    return ok;
}

bool defer_capturing(struct MHD_Connection *conn) { return current && current->conn == conn && !current->captured; }

int defer_capture_buffer(struct MHD_Connection *conn, unsigned status, const char *content_type, char *body_owned,
                         size_t len, const char *header, const char *value) {
    defer_slot *s = current;
    s->captured = true;
    s->status = status;
    s->content_type = content_type;
    s->body = body_owned;
    s->len = len;
    s->header = header;
    snprintf(s->value, sizeof s->value, "%s", value ? value : "");
    return MHD_YES;
}

int defer_capture_stream(struct MHD_Connection *conn, const char *content_type, const char *header,
                         const char *value, char *(*next)(void *cls, bool *last), void *cls,
                         void (*done)(void *cls, bool client_gone)) {
    defer_slot *s = current;
    stream_pipe *p = calloc(1, sizeof *p);
    if (!p) {
        done(cls, false);
        return defer_capture_buffer(conn, 500, "application/json", NULL, 0, NULL, NULL);
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->conn = conn;
    p->next = next;
    p->done = done;
    p->cls = cls;
    p->refs = 2; /* the producer and the response */
    s->captured = true;
    s->status = 200;
    s->content_type = content_type;
    s->header = header;
    snprintf(s->value, sizeof s->value, "%s", value ? value : "");
    s->pipe = p;
    return MHD_YES;
}

bool defer_client_gone(void) { return current && conn_client_gone(current->conn); }

int defer_reply(struct MHD_Connection *conn, bool *handled) {
    *handled = false;
    conn_info *ci = conn_info_of(conn);
    defer_slot *s = ci ? ci->slot : NULL;
    if (!s) return MHD_YES;
    *handled = true;
    ci->slot = NULL; /* ready: the worker resumed the connection after its last touch of s */
    int ret = MHD_NO;
    if (s->pipe) {
        stream_pipe *p = s->pipe;
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, pipe_read, p,
                                                                   pipe_free_response);
        if (r) {
            MHD_add_response_header(r, "Content-Type", s->content_type);
            MHD_add_response_header(r, "Cache-Control", "no-cache");
            MHD_add_response_header(r, "X-Accel-Buffering", "no"); /* proxies pass each piece on at once */
            if (s->header) MHD_add_response_header(r, s->header, s->value);
            ret = httpd_queue_response(conn, 200, r);
            MHD_destroy_response(r);
        } else {
            pipe_free_response(p); /* no response: the producer stops at once */
            ret = httpd_queue_buffer(conn, 500, "application/json", NULL, 0, NULL);
        }
    } else if (s->captured) {
        const char *headers[] = {s->header, s->value, NULL};
        ret = httpd_queue_buffer(conn, s->status, s->content_type, s->body, s->len, s->header ? headers : NULL);
    }
    free(s);
    return ret;
}
