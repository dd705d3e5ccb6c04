/* httpd.c — the daemon both servers run on (httpd.h): the listening socket, libmicrohttpd on a few event threads
 * over epoll with the connection table (httpd_conn.c) and the worker pool (httpd_defer.c), the verdicts a request
 * gets from its headers, and the senders every reply goes through.
 *
 * The socket is bound here, not by libmicrohttpd, so that a port in use is said in words ("port 8080 on 127.0.0.1
 * is in use") through the library's status and message, not as libmicrohttpd's log line.
 *
 * Host: a page on any site whose name an attacker points at 127.0.0.1 (DNS rebinding) talks to a local server as
 * its own origin, so neither CORS nor the browser stops it; its requests still carry Host: that name. A server
 * answers only Host names that mean it: the address it listens on, the loopback names when it listens on loopback,
 * the names it was given (allowed_hosts). Bound to every address (0.0.0.0, ::) it cannot know its names, so it also
 * answers any IP literal (rebinding needs a name). Bound to anything but loopback with a key, it answers any Host:
 * a rebound page cannot present the key, and which names reach the machine is the operator's business. A POST
 * body must be declared application/json: a cross-site page can send text/plain or a form without a CORS
 * preflight, never JSON. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "server/httpd.h"

#define CONN_MEMORY_BYTES (32u << 10)

struct httpd {
    httpd_params p;
    char *host, **allowed, *tls_cert, *tls_key; /* copies of p's */
    char bound[INET6_ADDRSTRLEN];               /* the address bound, numeric */
    bool loopback, any;                         /* bound to a loopback address / to every address */
    httpd_hosts hosts;                          /* the above, for httpd_host_allowed */
    struct MHD_Daemon *daemon;
    conn_table *conns;
    defer_pool *defer;
    int32_t port;
    bool stopped;
};

double httpd_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---------------------------------------------------------------- verdicts */

/* An IPv4 or IPv6 literal; *loopback when it is 127.x or ::1. */
static bool ip_literal(const char *name, bool *loopback) {
    unsigned char a[16];
    *loopback = false;
    if (inet_pton(AF_INET, name, a) == 1) return *loopback = a[0] == 127, true;
    if (inet_pton(AF_INET6, name, a) == 1) {
        static const unsigned char one[16] = {[15] = 1};
        *loopback = memcmp(a, one, 16) == 0;
        return true;
    }
    return false;
}

/* The name of a Host header value ("name", "name:port", "[v6]", "[v6]:port") into name; false when malformed (a
 * name of letters, digits, '-', '.', '_'; an IPv6 literal of hex digits, ':', '.' and a %zone). */
static bool host_name(const char *h, char *name, size_t cap) {
    size_t n;
    const bool v6 = h[0] == '[';
    if (v6) {
        const char *end = strchr(h, ']');
        if (!end) return false;
        n = (size_t)(end - h - 1);
        if (n >= cap) return false;
        memcpy(name, h + 1, n);
        h = end + 1;
    } else {
        n = strcspn(h, ":");
        if (n >= cap) return false;
        memcpy(name, h, n);
        h += n;
    }
    name[n] = 0;
    for (const char *c = name; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '.' ||
              (v6 ? *c == ':' || *c == '%' : *c == '-' || *c == '_')))
            return false;
    if (*h == ':') {
        if (!h[1] || strlen(h + 1) > 5) return false;
        for (const char *d = h + 1; *d; d++)
            if (*d < '0' || *d > '9') return false;
    } else if (*h) {
        return false;
    }
    return n > 0;
}

bool httpd_host_allowed(const httpd_hosts *h, const char *host_header) {
    if (!host_header) return true; /* HTTP/1.0 clients may omit it; a browser always sends it */
    char name[256];
    if (!host_name(host_header, name, sizeof name)) return false;
    if (strcasecmp(name, h->host) == 0 || strcmp(name, h->bound) == 0) return true;
    for (int32_t i = 0; i < h->n_allowed; i++)
        if (strcasecmp(name, h->allowed[i]) == 0) return true;
    bool loopback_ip;
    const bool literal = ip_literal(name, &loopback_ip);
    const bool loopback_name = loopback_ip || strcasecmp(name, "localhost") == 0;
    if ((h->loopback || h->any) && loopback_name) return true;
    if (!h->loopback && h->keyed) return true; /* every request must show the key, which a rebound page has not */
    return h->any && literal;
}

const char *httpd_bearer_token(const char *authorization) {
    if (!authorization || strncasecmp(authorization, "Bearer ", 7) != 0) return NULL;
    const char *t = authorization + 7;
    while (*t == ' ') t++;
    return t;
}

bool httpd_key_equal(const char *key, const char *got) {
    const size_t n_key = strlen(key), n_got = strlen(got);
    unsigned diff = (unsigned)(n_key != n_got);
    for (size_t i = 0; i < n_key; i++) diff |= (unsigned char)key[i] ^ (unsigned char)(n_got ? got[i % n_got] : 0);
    return diff == 0;
}

/* "application/json", alone or with parameters (; charset=utf-8), in any case. */
static bool json_declared(const char *type) {
    static const char json[] = "application/json";
    if (!type || strncasecmp(type, json, sizeof json - 1) != 0) return false;
    const char next = type[sizeof json - 1];
    return next == 0 || next == ';' || next == ' ' || next == '\t';
}

httpd_refusal httpd_judge(httpd *h, struct MHD_Connection *conn, const char *method, bool exempt_from_limits) {
    httpd_refusal r = {0};
    const conn_info *ci = conn_info_of(conn);
    if (!exempt_from_limits && (!ci || ci->over_limit || ci->over_ip_limit)) {
        r.status = 503;
        r.code = "busy";
        snprintf(r.message, sizeof r.message, "too many connections%s: retry later",
                 ci && !ci->over_limit ? " from your address" : "");
        return r;
    }
    const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    if (!httpd_host_allowed(&h->hosts, host)) {
        r.status = 403;
        r.code = "forbidden_host";
        snprintf(r.message, sizeof r.message, "this server does not answer to Host: %.60s (it answers its address %s%s "
                 "and the names given with --allowed-host)", host, h->host, h->loopback ? ", localhost" : "");
        return r;
    }
    const char *length = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    const bool has_body = (length && strtoull(length, NULL, 10) > 0) ||
                          MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    if (strcmp(method, MHD_HTTP_METHOD_POST) == 0 && has_body &&
        !json_declared(MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE))) {
        r.status = 415;
        r.code = "unsupported_media_type";
        snprintf(r.message, sizeof r.message, "send the body as Content-Type: application/json");
    }
    return r;
}

/* ---------------------------------------------------------------- replies */

int httpd_queue_response(struct MHD_Connection *conn, unsigned status, struct MHD_Response *r) {
    const conn_info *ci = conn_info_of(conn);
    if (ci && ci->h->p.decorate) ci->h->p.decorate(ci->h->p.cls, conn, r, status);
    if (status == MHD_HTTP_UNAUTHORIZED) MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    return MHD_queue_response(conn, status, r);
}

int httpd_queue_buffer(struct MHD_Connection *conn, unsigned status, const char *content_type, char *body_owned,
                       size_t len, const char *const *headers) {
    static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                              "\"param\":null,\"code\":\"internal\"}}";
    struct MHD_Response *r =
        body_owned ? MHD_create_response_from_buffer(len, body_owned, MHD_RESPMEM_MUST_FREE)
                   : MHD_create_response_from_buffer(sizeof oom - 1, (void *)oom, MHD_RESPMEM_PERSISTENT);
    if (!r) {
        free(body_owned);
        return MHD_NO;
    }
    if (!body_owned) status = 500, content_type = "application/json";
    if (content_type) MHD_add_response_header(r, "Content-Type", content_type);
    for (int i = 0; headers && headers[i] && headers[i + 1]; i += 2)
        MHD_add_response_header(r, headers[i], headers[i + 1]);
    const int ret = httpd_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

int httpd_send_buffer(struct MHD_Connection *conn, unsigned status, const char *content_type, char *body_owned,
                      size_t len, const char *header, const char *value) {
    if (defer_capturing(conn)) return defer_capture_buffer(conn, status, content_type, body_owned, len, header, value);
    const char *headers[] = {header, value, NULL};
    return httpd_queue_buffer(conn, status, content_type, body_owned, len, header ? headers : NULL);
}

int httpd_send_stream(struct MHD_Connection *conn, const char *content_type, const char *header, const char *value,
                      char *(*next)(void *cls, bool *last), void *cls, void (*done)(void *cls, bool client_gone)) {
    if (defer_capturing(conn)) return defer_capture_stream(conn, content_type, header, value, next, cls, done);
    done(cls, false);
    return httpd_queue_buffer(conn, 500, NULL, NULL, 0, NULL);
}

/* ---------------------------------------------------------------- the daemon */

/* libmicrohttpd's messages, one log line each. Its report of a reply it could not finish sending ("Failed to send
 * the chunked response body ... forcibly closed by remote peer") is dropped: the stream's owner logs the client
 * that went away in its own words. */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    const httpd *h = cls;
    if (!h->p.log) return;
    if (strncmp(fmt, "Failed to send", 14) == 0) return;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
    h->p.log(h->p.log_user, line);
}

/* The listening socket on host:port into *fd; a failure says why. */
static tr_status listen_socket(httpd *h, bool *v6, int *out_fd) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV}, *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", (int)h->p.port);
    const int rc = getaddrinfo(h->host, port, &hints, &ai);
    if (rc != 0) return tr_fail(TR_ERR_ARG, "cannot use host '%s': %s", h->host, gai_strerror(rc));
    *v6 = ai->ai_family == AF_INET6;
    if (*v6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)ai->ai_addr)->sin6_addr;
        h->loopback = IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
        h->any = IN6_IS_ADDR_UNSPECIFIED(a);
        inet_ntop(AF_INET6, a, h->bound, sizeof h->bound);
    } else {
        const struct in_addr *a = &((const struct sockaddr_in *)ai->ai_addr)->sin_addr;
        h->loopback = (ntohl(a->s_addr) >> 24) == 127;
        h->any = a->s_addr == htonl(INADDR_ANY);
        inet_ntop(AF_INET, a, h->bound, sizeof h->bound);
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int on = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    int err = fd < 0 ? errno : 0;
    if (!err && bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) err = errno;
    if (!err && listen(fd, SOMAXCONN) != 0) err = errno;
    if (!err && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) err = errno;
    freeaddrinfo(ai);
    *out_fd = fd;
    if (!err) return TR_OK;
    if (fd >= 0) close(fd);
    if (err == EADDRINUSE)
        return tr_fail(TR_ERR_NETWORK, "port %d on %s is in use (another server listens there): choose another "
                       "with --port", (int)h->p.port, h->host);
    if (err == EACCES)
        return tr_fail(TR_ERR_NETWORK, "no permission to listen on port %d (ports below 1024 need privileges)",
                (int)h->p.port);
    if (err == EADDRNOTAVAIL)
        return tr_fail(TR_ERR_NETWORK, "cannot listen on %s: not an address of this machine", h->host);
    return tr_fail(TR_ERR_NETWORK, "cannot listen on %s port %d: %s", h->host, (int)h->p.port, strerror(err));
}

/* The server's end of a request, then the connection's deadline for its next one starts. */
static void request_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                              enum MHD_RequestTerminationCode toe) {
    const httpd *h = cls;
    if (h->p.on_completed) h->p.on_completed(h->p.cls, conn, con_cls, toe);
    conn_request_answered(conn_info_of(conn));
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

static tr_status start_daemon(httpd *h) {
    bool v6 = false;
    int fd = -1;
    const tr_status st = listen_socket(h, &v6, &fd);
    if (st != TR_OK) return st;
    struct sockaddr_storage a;
    socklen_t alen = sizeof a;
    if (getsockname(fd, (struct sockaddr *)&a, &alen) == 0)
        h->port = ntohs(a.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&a)->sin6_port
                                                : ((struct sockaddr_in *)&a)->sin_port);
    /* Event threads over epoll (MHD_USE_AUTO picks it on Linux); connections suspend while a worker answers. */
    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (v6) flags |= MHD_USE_IPv6;
    if (h->tls_cert) flags |= MHD_USE_TLS;
    /* Connections beyond the limits are accepted and answered 503; these hard limits (refused at accept) only bound
     * the descriptors: a margin above them, within the process's descriptor limit. */
    struct rlimit fds = {0};
    const int64_t fd_room = getrlimit(RLIMIT_NOFILE, &fds) == 0 && fds.rlim_cur != RLIM_INFINITY
                                ? (int64_t)fds.rlim_cur - 64 : (int64_t)1 << 20;
    int64_t hard = (int64_t)h->p.max_connections + h->p.max_connections / 8 + 16;
    if (hard > fd_room) hard = fd_room > 16 ? fd_room : 16;
    const unsigned hard_per_ip = (unsigned)h->p.max_connections_per_ip * 2 + 8;
    struct MHD_OptionItem opts[] = {
        {MHD_OPTION_LISTEN_SOCKET, fd, NULL},
        {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)request_completed, h},
        {MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)conn_table_notify, h->conns},
        {MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)h->p.request_timeout_s, NULL},
        {MHD_OPTION_CONNECTION_LIMIT, (intptr_t)hard, NULL},
        {MHD_OPTION_PER_IP_CONNECTION_LIMIT, (intptr_t)hard_per_ip, NULL},
        /* Up to 32 KiB libmicrohttpd takes each connection's memory (headers, write buffers) from the heap; above,
         * a mapping of its own per connection, whose unmapping at close costs a TLB shootdown across the process's
         * threads. httpd_conn.c returns the heap's free pages after connections close. */
        {MHD_OPTION_CONNECTION_MEMORY_LIMIT, (intptr_t)CONN_MEMORY_BYTES, NULL},
        {MHD_OPTION_THREAD_POOL_SIZE, (intptr_t)h->p.event_threads, NULL},
        {h->tls_cert ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, 0, h->tls_cert},
        {h->tls_cert ? MHD_OPTION_HTTPS_MEM_KEY : MHD_OPTION_END, 0, h->tls_key},
        {MHD_OPTION_END, 0, NULL},
    };
    h->daemon = MHD_start_daemon(flags, (uint16_t)h->port, NULL, NULL, h->p.on_request, h->p.cls,
                                 MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h, MHD_OPTION_ARRAY, opts, MHD_OPTION_END);
    if (!h->daemon) {
        close(fd);
        return tr_fail(TR_ERR_NETWORK, "cannot serve on %s port %d%s", h->host, (int)h->port,
                       h->tls_cert ? " (bad TLS certificate or key?)" : "");
    }
    return TR_OK;
}

tr_status httpd_start(const httpd_params *p, httpd **out) {
    *out = NULL;
    if (p->n_allowed_hosts < 0 || (p->n_allowed_hosts > 0 && !p->allowed_hosts))
        return tr_fail(TR_ERR_ARG, "allowed_hosts: %d names and no list", p->n_allowed_hosts);
    for (int32_t i = 0; i < p->n_allowed_hosts; i++) {
        const char *n = p->allowed_hosts[i];
        char name[256];
        if (!n || !host_name(n, name, sizeof name) || strcmp(name, n) != 0)
            return tr_fail(TR_ERR_ARG, "allowed host '%s' is not a host name (e.g. myserver.lan, without a port)",
                           n ? n : "(null)");
    }
    httpd *h = calloc(1, sizeof *h);
    if (!h) return tr_fail(TR_ERR_NOMEM, "out of memory");
    h->p = *p;
    if (h->p.event_threads <= 0) h->p.event_threads = 2;
    h->host = strdup(p->host ? p->host : "127.0.0.1");
    h->tls_cert = dup_or_null(p->tls_cert);
    h->tls_key = dup_or_null(p->tls_key);
    h->allowed = calloc((size_t)p->n_allowed_hosts + 1, sizeof *h->allowed);
    bool oom = !h->host || !h->allowed || (p->tls_cert && !h->tls_cert) || (p->tls_key && !h->tls_key);
    for (int32_t i = 0; !oom && i < p->n_allowed_hosts; i++) oom = !(h->allowed[i] = strdup(p->allowed_hosts[i]));
    h->p.host = h->p.tls_cert = h->p.tls_key = NULL;
    h->p.allowed_hosts = NULL;
    tr_status st = oom ? tr_fail(TR_ERR_NOMEM, "out of memory") : TR_OK;
    if (st == TR_OK)
        st = conn_table_create(h, p->max_connections, p->max_connections_per_ip, p->request_timeout_s, &h->conns);
    if (st == TR_OK) st = defer_pool_create(p->max_workers, p->max_queued, &h->defer);
    if (st == TR_OK) st = start_daemon(h);
    h->hosts = (httpd_hosts){.host = h->host, .bound = h->bound, .loopback = h->loopback, .any = h->any,
                             .keyed = p->keyed, .allowed = (const char *const *)h->allowed,
                             .n_allowed = p->n_allowed_hosts};
    if (st != TR_OK) {
        httpd_free(h);
        return st;
    }
    *out = h;
    return TR_OK;
}

int32_t httpd_port(const httpd *h) { return h ? h->port : 0; }
int32_t httpd_open_connections(const httpd *h) { return conn_table_open(h->conns); }
defer_pool *httpd_defer_pool(httpd *h) { return h->defer; }

void httpd_stop(httpd *h) {
    if (!h || h->stopped) return;
    h->stopped = true;
    defer_pool_stop(h->defer);
    if (h->daemon) MHD_stop_daemon(h->daemon);
    h->daemon = NULL;
}

void httpd_free(httpd *h) {
    if (!h) return;
    httpd_stop(h);
    defer_pool_free(h->defer);
    conn_table_free(h->conns);
    for (int32_t i = 0; h->allowed && i < h->p.n_allowed_hosts; i++) free(h->allowed[i]);
    free(h->allowed);
    free(h->host);
    free(h->tls_cert);
    free(h->tls_key);
    free(h);
}
