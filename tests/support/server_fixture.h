/* server_fixture.h — the server suites' start-up and tear-down in one place: the test model (stories260K) loaded
 * once per group, a server on a free loopback port, and a scheduler with the suites' usual parameters. */
#ifndef TR_TEST_SERVER_FIXTURE_H
#define TR_TEST_SERVER_FIXTURE_H

#include "server/server_internal.h" /* scheduler, sched_params, server_metrics */
#include "tokroute.h"

/* Loads the suites' model; 0 on success (a cmocka group setup's status), -1 when it cannot. */
int server_fixture_load(tr_model **model);
/* Starts a server for model with p on 127.0.0.1 (a free port, 1 thread); NULL when it cannot. */
tr_server *server_fixture_start(const tr_model *model, tr_server_params p);
/* Loads the suites' model and serves it with p (see server_fixture_start); 0 on success, with *model, *srv and
 * *port set, -1 when it cannot. */
int server_fixture_serve(tr_server_params p, tr_model **model, tr_server **srv, int *port);
/* Stops and frees srv (may be NULL), then the model; 0 (a cmocka group teardown's status). */
int server_fixture_free(tr_model *model, tr_server *srv);
/* The scheduler suites' parameters: 1 thread, 32 sessions of 512 positions, 512 rows a pass, idle for 600 s,
 * 1 GiB of KV, batching on. */
sched_params server_fixture_sched_params(void);
/* A scheduler for model with p, counting into metrics; NULL when it cannot be created. */
scheduler *server_fixture_scheduler(const tr_model *model, server_metrics *metrics, sched_params p);

/* The reference answer: the greedy token after tokens[0..n) from a fresh single-sequence context of model (512
 * positions, 1 thread), what a server's answer must equal; -1 when the context fails (never a token id). */
int32_t server_fixture_greedy(const tr_model *model, const int32_t *tokens, int32_t n);

#endif
