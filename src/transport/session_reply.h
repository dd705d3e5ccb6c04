/* session_reply.h — the session protocol's /v1/route/next replies as the --server client reads them
 * (docs/protocol.md): a whole JSON reply, or a streamed one line by line (the answer, then lookahead lines, then
 * done), with what the server holds afterwards. Everything read is bounds-checked: a malformed answer fails the
 * call, a malformed line after it only ends the lookahead. Fuzzed by tests/fuzz/fuzz_session_reply.c. */
#ifndef TR_SESSION_REPLY_H
#define TR_SESSION_REPLY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokroute.h"

/* What a reply leaves on the server after the request's tokens: the draft branches it walked, then (with k > 0
 * lookahead tokens produced) the last answer and lookahead[0..k-1). */
typedef struct held_tail {
    int32_t ids[TR_DRAFT_TOKENS_MAX + TR_LOOKAHEAD_MAX + 1];
    int32_t n;
    int32_t last_answer;  /* the lookahead follows it */
    bool in_step;         /* the server's walk follows the draft; else its lookahead is not trusted */
} held_tail;

/* A streamed reply being read. Start it as {.call = call}; feed it lines with session_reply_line. */
typedef struct reply_stream {
    tr_llm_call *call;
    bool answered;        /* the answer line was taken and handed on (tr_llm_call_answered) */
    bool refused;         /* the first line was no usable answer: the call fails with refused_status */
    tr_status refused_status;
    char refused_message[256];
    bool wanted;          /* the caller still takes lookahead tokens */
    bool done;            /* the done line came */
    bool broken;          /* a line that does not belong: what the server holds beyond the answer is unknown */
    held_tail tail;
    int32_t lookahead[TR_LOOKAHEAD_MAX];
    int32_t n_lookahead;  /* lookahead lines received: what the server produced */
    int64_t answer_evaluated;
} reply_stream;

/* A reply object (the whole reply, or a streamed answer line) into call: token (and pos, which must equal
 * n_tokens), logprob, n_evaluated (added), lookahead (up to call->lookahead), timings.lookahead_ms, verify (only
 * with a draft, up to TR_DRAFT_BRANCHES_MAX). TR_ERR_FORMAT with a message when there is no valid answer. */
tr_status session_parse_reply(const char *body, size_t len, tr_llm_call *call);

/* The walk part of what the server holds after a reply; cuts call->n_verify to the branches the draft really
 * continues with (a server that claims more is out of step: t->in_step false, its lookahead not trusted). */
void session_walk_tail(tr_llm_call *call, held_tail *t);

/* One line of a streamed reply (an http_line_fn; user is the reply_stream): the first is the answer, handed on with
 * tr_llm_call_answered; lookahead lines go to tr_llm_call_push_lookahead while wanted. Returns whether to read on. */
bool session_reply_line(void *user, const char *line, size_t len);
/* Whether the caller still wants the rest (an http_wanted_fn). */
bool session_reply_wanted(void *user);

#endif /* TR_SESSION_REPLY_H */
