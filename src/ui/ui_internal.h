/* ui_internal.h — shared between the web UI's HTTP layer (ui_server.c) and its generations (ui_gen.c).
 *
 * One mutex (ui->mu) guards every job's event buffer, the slot pool and the job list; one condition variable
 * (ui->cv) is broadcast on any change. Contention is negligible next to a forward pass, and one lock keeps the
 * hand-offs between the connection threads and the worker threads easy to check. */
#ifndef TR_UI_INTERNAL_H
#define TR_UI_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "tokroute.h"

struct MHD_Daemon;

/* One generation context: the SLM's KV cache, an LLM backend and a router file, reused by later generations
 * (the KV cache keeps the prompt prefix they share). */
typedef struct ui_slot {
    tr_context *ctx;
    tr_llm_backend *llm;   /* opened on first use */
    tr_router *router;     /* the router file, loaded on first use */
    bool busy;
} ui_slot;

/* What a request asks for (validated by the HTTP layer). */
typedef struct ui_request {
    int32_t *prompt;       /* malloc'ed ids */
    int32_t n_prompt;
    tr_route_mode mode;
    tr_policy policy;      /* when no router file */
    float tau;
    int32_t max_tokens;
} ui_request;

typedef struct ui_job {
    struct tr_ui *ui;
    uint64_t id;
    ui_slot *slot;
    ui_request req;
    char *buf;             /* server-sent events not yet read by the connection */
    size_t len, cap, sent;
    bool finished;
    atomic_bool cancel;
    int refs;              /* the worker and the connection */
    struct ui_job *next;   /* in ui->jobs while running */
} ui_job;

struct tr_ui {
    tr_ui_params p;
    char *host, *slm_name, *llm_name, *router_path;
    struct MHD_Daemon *daemon;
    int32_t port;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ui_slot *slots;
    int32_t active;
    int32_t streams;       /* event-stream responses not yet freed by libmicrohttpd */
    uint64_t next_id;
    ui_job *jobs;
    bool stopping;
};

/* ui_gen.c. Returns the job (refs 2: the caller's and the worker's) or NULL with *http_status and a message in
 * tr_last_error() (503 when every slot is busy). Takes ownership of req->prompt either way. */
ui_job *ui_job_start(struct tr_ui *ui, ui_request *req, int *http_status);
/* Drops one reference (the caller holds ui->mu); frees the job at zero. */
void ui_job_release_locked(ui_job *job);
/* Cancels the running generation with this id; false when none. */
bool ui_job_cancel(struct tr_ui *ui, uint64_t id);
/* Frees the slots (after every job ended). */
void ui_slots_free(struct tr_ui *ui);

#endif /* TR_UI_INTERNAL_H */
