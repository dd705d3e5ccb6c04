/* fuzz_session_reply.c — libFuzzer target: arbitrary bytes as what a server sends back to the --server client for
 * /v1/route/next. Byte 0 picks the lookahead asked for (its low 5 bits, up to TR_LOOKAHEAD_MAX) and whether a draft
 * went along (bit 7); the rest is read twice: as a whole reply (session_parse_reply, session_walk_tail) and as a
 * streamed one split at line breaks (session_reply_line, as the HTTP client feeds it). Neither may read out of
 * bounds, and what they accept must keep the client's invariants: no more lookahead than asked, a draft walk
 * within the draft, a held tail within its array. Any crash, sanitizer report or broken invariant is a bug. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "fuzz_lines.h"
#include "transport/session_reply.h"

static void check_tail(const tr_llm_call *call, const held_tail *t) {
    if (t->n < 0 || t->n > TR_DRAFT_TOKENS_MAX) abort();
    if (call->n_verify < 0 || call->n_verify > (call->draft ? call->draft->n_branches : 0)) abort();
    if (call->id < 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int32_t lookahead = (data[0] & 31) % (TR_LOOKAHEAD_MAX + 1);
    /* The draft: the SLM's own branch 7 8 after the requested position, and an alternative 9 after its 7. */
    tr_llm_draft draft = {.n_branches = 2, .parent = {-1, 0}, .start = {0, 2, 3}, .tokens = {7, 8, 9}};
    const int32_t tokens[3] = {1, 2, 3};
    int32_t la_ids[TR_LOOKAHEAD_MAX], verify[TR_DRAFT_BRANCHES_MAX];
    const tr_llm_call blank = {.tokens = tokens, .n_tokens = 3, .lookahead = lookahead, .lookahead_ids = la_ids,
                               .verify_ids = verify, .draft = data[0] & 0x80 ? &draft : NULL};
    const char *body = (const char *)data + 1;
    const size_t len = size - 1;

    tr_llm_call call = blank;
    if (session_parse_reply(body, len, &call) == TR_OK) {
        if (call.n_lookahead < 0 || call.n_lookahead > lookahead) abort();
        held_tail t;
        session_walk_tail(&call, &t);
        check_tail(&call, &t);
    }
    tr_clear_error();

    call = blank;
    reply_stream rs = {.call = &call};
    feed_lines(body, len, session_reply_line, session_reply_wanted, &rs);
    if (rs.n_lookahead < 0 || rs.n_lookahead > lookahead) abort();
    if (rs.answered) check_tail(&call, &rs.tail);
    if (rs.answered && rs.refused) abort();
    tr_clear_error();
    return 0;
}
